"""Shared output helpers of the CLI tools: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence

import click

__all__ = ["cell", "emit", "section", "table"]


def cell(value: object) -> str:
    """How one value is shown in a table: None as ``-``, lists comma-joined."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(cell(v) for v in value) if value else "-"
    return str(value)


def table(rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> str:
    """Rows as an aligned table with an upper-case header line.

    Args:
        rows: one dict per line; a missing key shows as an empty cell.
        columns: the keys to show, in order.

    Returns:
        The table, lines joined by newlines (no trailing newline).
    """
    def text(r: Mapping[str, object], c: str) -> str:
        return cell(r[c]) if c in r else ""

    widths = {c: max([len(c)] + [len(text(r, c)) for r in rows]) for c in columns}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip()]
    for r in rows:
        lines.append("  ".join(text(r, c).ljust(widths[c]) for c in columns).rstrip())
    return "\n".join(lines)


def section(title: str, body: str) -> str:
    """A titled block of human output."""
    return f"{title}\n{body}" if body else title


def emit(data: object, as_json: bool, human: Callable[[], str | Iterable[str]]) -> None:
    """Print ``data`` as one JSON document, or the human rendering ``human()``."""
    if as_json:
        click.echo(json.dumps(data, default=str))
        return
    out = human()
    click.echo(out if isinstance(out, str) else "\n".join(out))
