"""Read-only access to the volume for ``kaas inspect``: whole files through ``O_RDONLY``
and ``pread``, JSON documents, directory listings and file ages.

Invariants:
    - nothing is opened for writing, created, renamed or deleted;
    - a missing file is ``None`` (or an empty listing), never an error; a file that does
      not parse is an error text, never an exception.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def read_bytes(path: Path) -> bytes | None:
    """The whole file, opened read-only; None when it does not exist.

    Raises:
        OSError: the file exists but could not be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks: list[bytes] = []
        pos = 0
        while True:
            chunk = os.pread(fd, 1 << 20, pos)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            pos += len(chunk)
    finally:
        os.close(fd)


def read_json(path: Path) -> tuple[object, str | None]:
    """A JSON document, not validated: its callers check its shape (``isinstance``).

    Returns:
        (parsed document, None), (None, None) when absent, or (None, error text).
    """
    try:
        data = read_bytes(path)
    except OSError as exc:
        return None, f"unreadable: {exc}"
    if data is None:
        return None, None
    try:
        doc: object = json.loads(data)
    except ValueError as exc:
        return None, f"invalid JSON: {exc}"
    return doc, None


def listdir(path: Path) -> list[str]:
    """The names in a directory, sorted; empty when it is missing or not a directory."""
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def size_of(path: Path) -> int:
    st = stat(path)
    return st.st_size if st else 0


def utc(ms: object) -> str:
    """A time in milliseconds as UTC text; ``?`` for anything but an int."""
    if not isinstance(ms, int):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + "Z"


class Ages:
    """File ages against one "now" taken when the command starts."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self, path: Path) -> float | None:
        st = stat(path)
        return round(self.now - st.st_mtime, 1) if st else None


def named(directory: Path, prefix: str, suffix: str) -> list[tuple[str, str]]:
    """(file name, middle part) of the files ``<prefix><middle><suffix>`` of a directory."""
    return [(n, n[len(prefix):len(n) - len(suffix)]) for n in listdir(directory)
            if n.startswith(prefix) and n.endswith(suffix) and len(n) > len(prefix) + len(suffix)]


def as_int(text: str) -> int | str:
    """A broker id from a file name: an int when it is one, else the text as found."""
    return int(text) if text.isdigit() else text
