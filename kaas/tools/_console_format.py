"""The line formats of the console tools, as Apache's: ``LineReader`` parses a producer's
input line (headers, key, value, by the properties of Apache's ``LineMessageReader``) and
``Formatter`` writes a consumed record (the properties of Apache's
``DefaultMessageFormatter``). Pure: strings and bytes in, records and bytes out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import click

from kaas.tools._records import Fetched, Outgoing

__all__ = ["Formatter", "LineReader", "properties"]

TRUE = ("true",)
READER_KEYS = {"parse.key", "key.separator", "parse.headers", "headers.delimiter", "headers.separator",
               "headers.key.separator", "ignore.error", "null.marker"}
FORMATTER_KEYS = {"print.timestamp", "print.key", "print.offset", "print.partition", "print.headers", "print.value",
                  "key.separator", "line.separator", "headers.separator", "null.literal"}


def properties(items: Iterable[str]) -> dict[str, str]:
    """``--property KEY=VALUE`` items; ``\\t`` and ``\\n`` in a value are a tab and a newline
    (as a shell passes them to Apache's tools, unescaped)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--property")
        out[key.strip()] = value.replace("\\t", "\t").replace("\\n", "\n")
    return out


def _check(props: Mapping[str, str], known: set[str]) -> None:
    unknown = sorted(set(props) - known)
    if unknown:
        raise click.BadParameter(f"unknown properties {', '.join(unknown)} (known: {', '.join(sorted(known))})",
                                 param_hint="--property")


class LineReader:
    """One producer input line -> ``Outgoing`` (Apache's ``LineMessageReader``).

    Raises:
        click.BadParameter: an unknown property, or a null marker equal to a separator.
    """

    def __init__(self, props: Mapping[str, str]) -> None:
        _check(props, READER_KEYS)
        self.parse_key = props.get("parse.key", "false").strip().lower() in TRUE
        self.key_separator = props.get("key.separator", "\t")
        self.parse_headers = props.get("parse.headers", "false").strip().lower() in TRUE
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.ignore_error = props.get("ignore.error", "false").strip().lower() in TRUE
        self.null_marker = props.get("null.marker")
        for name in ("key.separator", "headers.separator", "headers.delimiter", "headers.key.separator"):
            if self.null_marker is not None and self.null_marker == getattr(self, name.replace(".", "_")):
                raise click.BadParameter(f"null.marker and {name} may not be equal", param_hint="--property")
        self.line_number = 0

    def _cut(self, enabled: bool, line: str, start: int, mark: str, what: str) -> str | None:
        if not enabled:
            return None
        i = line.find(mark, start)
        if i < 0:
            if self.ignore_error:
                return None
            raise click.ClickException(f"No {what} found on line number {self.line_number}: '{line}'")
        return line[start:i]

    def _bytes(self, text: str | None) -> bytes | None:
        return None if text is None or text == self.null_marker else text.encode()

    def parse(self, raw: bytes) -> Outgoing:
        self.line_number += 1
        line = raw.decode("utf-8").rstrip("\n").rstrip("\r")
        headers = self._cut(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter")
        at = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = self._cut(self.parse_key, line, at, self.key_separator, "key separator")
        at += 0 if key is None else len(key) + len(self.key_separator)
        return Outgoing(self._bytes(key), self._bytes(line[at:]), self._headers(headers))

    def _headers(self, text: str | None) -> tuple[tuple[str, bytes | None], ...]:
        if text is None or text == self.null_marker:
            return ()
        out: list[tuple[str, bytes | None]] = []
        for pair in text.split(self.headers_separator):
            i = pair.find(self.headers_key_separator)
            if i < 0:
                if self.ignore_error:
                    out.append((pair, None))
                    continue
                raise click.ClickException(f"No header key separator found in pair '{pair}' on line number "
                                           f"{self.line_number}")
            name = pair[:i]
            if name == self.null_marker:
                raise click.ClickException(f"Header keys should not be equal to the null marker "
                                           f"'{self.null_marker}' as they can't be null")
            out.append((name, self._bytes(pair[i + len(self.headers_key_separator):])))
        return tuple(out)


class Formatter:
    """A consumed record -> its output bytes (Apache's ``DefaultMessageFormatter``):
    timestamp, partition, offset, headers, key and value, each printed one separated by
    ``key.separator``, the last ended by ``line.separator``."""

    def __init__(self, props: Mapping[str, str]) -> None:
        _check(props, FORMATTER_KEYS)

        def flag(name: str, default: bool = False) -> bool:
            return props.get(name, "true" if default else "false").strip().lower() in TRUE
        self.fields = [name for name, on in (
            ("timestamp", flag("print.timestamp")), ("partition", flag("print.partition")),
            ("offset", flag("print.offset")), ("headers", flag("print.headers")), ("key", flag("print.key")),
            ("value", flag("print.value", True))) if on]
        self.key_separator = props.get("key.separator", "\t").encode()
        self.line_separator = props.get("line.separator", "\n").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.null_literal = props.get("null.literal", "null").encode()

    def _field(self, name: str, partition: int, rec: Fetched) -> bytes:
        if name == "timestamp":
            return f"{rec.timestamp_type}:{rec.timestamp}".encode()
        if name == "partition":
            return f"Partition:{partition}".encode()
        if name == "offset":
            return f"Offset:{rec.offset}".encode()
        if name == "headers":
            if not rec.headers:
                return b"NO_HEADERS"
            return self.headers_separator.join(k.encode() + b":" + (v if v is not None else self.null_literal)
                                               for k, v in rec.headers)
        value = rec.key if name == "key" else rec.value
        return value if value is not None else self.null_literal

    def format(self, partition: int, rec: Fetched) -> bytes:
        parts = [self._field(name, partition, rec) for name in self.fields]
        return self.key_separator.join(parts) + self.line_separator if parts else b""

    @staticmethod
    def as_dict(topic: str, partition: int, rec: Fetched) -> dict[str, Any]:
        """The record for ``--json`` (bytes as UTF-8 text, undecodable bytes replaced)."""
        def text(b: bytes | None) -> str | None:
            return None if b is None else b.decode("utf-8", "replace")
        return {"topic": topic, "partition": partition, "offset": rec.offset, "timestamp": rec.timestamp,
                "timestamp_type": rec.timestamp_type, "key": text(rec.key), "value": text(rec.value),
                "headers": [[k, text(v)] for k, v in rec.headers]}
