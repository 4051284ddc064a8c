"""Whole-file writes: tmp file, fsync, rename in the same directory, fsync the directory.

Invariants:
    - a reader sees the old or the new content, never a torn file;
    - the tmp name carries the writer's pid and thread id so two writers (processes, or
      threads of one process such as ``trio.to_thread`` workers) cannot clobber each
      other's tmp.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from kaas.errors import CorruptState


def write_bytes(path: Path, data: bytes, *, fsync: bool = True) -> int:
    """Atomically replace ``path`` with ``data``. Returns the new file's inode number (a
    writer can later tell whether the file is still the one it wrote, see ``file_id``)."""
    tmp = path.with_name(f".{path.name}.{_writer_id()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if fsync:
            os.fsync(fd)
        ino = os.fstat(fd).st_ino
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)
    return ino


def file_id(path: Path) -> int | None:
    """The inode number of ``path`` (None when absent). Every whole-file write makes a new
    inode, so an unchanged id means nobody replaced the file since it was read or written."""
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _writer_id() -> str:
    return f"{os.getpid()}-{threading.get_ident()}"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, obj: dict, *, fsync: bool = True) -> int:
    """Atomically write ``obj`` (which must carry ``format``) as JSON. Returns the inode."""
    return write_bytes(path, json.dumps(obj, separators=(",", ":"), sort_keys=True).encode(), fsync=fsync)


def read_json(path: Path) -> dict | None:
    """Read a JSON state file afresh (close-to-open). None when it does not exist.

    Raises:
        CorruptState: the file exists but does not parse as a JSON object with a format.
    """
    data = read_bytes_id(path)[0]
    if data is None:
        return None
    return parse_json(path, data)


def read_bytes_id(path: Path) -> tuple[bytes | None, int | None]:
    """(content, inode number) of one open of ``path``; (None, None) when absent."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None, None
    try:
        ino = os.fstat(fd).st_ino
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks), ino


def parse_json(path: Path, data: bytes) -> dict:
    """Parse a kaas state object read from ``path``.

    Raises:
        CorruptState: not JSON, or not an object with a format field.
    """
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise CorruptState(str(path), f"invalid JSON: {exc}") from None
    if not isinstance(obj, dict) or "format" not in obj:
        raise CorruptState(str(path), "not a kaas state object (no format field)")
    return obj


def create_exclusive(path: Path, data: bytes, *, fsync: bool = True) -> bool:
    """Exclusive create (O_CREAT|O_EXCL) of ``path`` with ``data``. True if this caller won.

    The content is first written to a tmp file and hard-linked into place, so the winner's
    file is never seen half-written.
    """
    tmp = path.with_name(f".{path.name}.{_writer_id()}.excl")
    write_bytes(tmp, data, fsync=fsync)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    if fsync:
        fsync_dir(path.parent)
    return True


def read_any(path: Path) -> Any:
    return read_json(path)
