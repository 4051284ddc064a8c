"""Whole-file writes: tmp file, fsync, rename in the same directory, fsync the directory.

Invariants:
    - a reader sees the old or the new content, never a torn file;
    - a failed write (ENOSPC, EIO, a short write, a failed fsync or rename) raises and
      leaves the previous file intact and no tmp file behind: the caller's in-memory state
      must not run ahead of the file. The one failure after the rename, the directory's
      fsync, leaves the new file in place but not known durable: it raises too, and the
      caller re-reads before relying on either content;
    - the tmp name carries the writer's incarnation (``storage.incarnation``: a random id
      per process, never its pid, which is 1 in every container) and thread id, so two
      writers (processes on any host, or threads of one process such as ``trio.to_thread``
      workers) cannot clobber each other's tmp.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import crc32c

from kaas.errors import CorruptState
from kaas.storage import fs, incarnation


@dataclass(frozen=True, slots=True)
class Points:
    """The failpoints of one whole-file write's steps (``kaas.failpoints``)."""

    write: str = "state.write"
    fsync: str = "state.fsync"
    rename: str = "state.rename"


STATE = Points()


def write_bytes(path: str | os.PathLike[str], data: bytes, *, fsync: bool = True, points: Points = STATE) -> None:
    """Atomically replace ``path`` with ``data``. (String path arithmetic: the slot and
    manifest writes are on the transactional request path, where pathlib's object
    building cost more than the system calls.)

    Args:
        fsync: fsync the file before the rename and the directory after it; without, the
            write is still atomic for readers but not durable across a host crash.
        points: the failpoints of the steps (the broker's state writes by default; the
            supervisor names its own).
    """
    dst = os.fspath(path)
    directory, tmp = _tmp_names(dst, incarnation.current(), threading.get_ident())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            fs.write_all(fd, (data,), point=points.write, path=dst)
            if fsync:
                fs.fsync(fd, point=points.fsync, path=dst)
        finally:
            os.close(fd)
        fs.replace(tmp, dst, point=points.rename)
    except BaseException:
        _unlink_quietly(tmp)  # a tmp left behind would hold space on a full volume
        raise
    if fsync:
        fsync_dir(directory or ".", point=points.fsync)


@functools.lru_cache(maxsize=4096)
def _tmp_names(dst: str, writer: str, thread: int) -> tuple[str, str]:
    """(directory, tmp file) of a write of ``dst`` by this writer (its incarnation and
    thread, as ``_writer_id``; the slot and manifest files are written again and again:
    the names are made once)."""
    directory, name = os.path.split(dst)
    return directory, os.path.join(directory, f".{name}.{writer}-{thread}.tmp")


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def content_id(data: bytes | None) -> tuple[int, int] | None:
    """(length, crc32c) of a file's content, None for no file: what a writer remembers of
    the version it read or wrote, to tell later whether anybody replaced it (inode numbers
    and timestamps are not enough: file systems reuse inodes, and mtime is coarse)."""
    if data is None:
        return None
    return len(data), crc32c.crc32c(data)


def file_content_id(path: Path) -> tuple[int, int] | None:
    """``content_id`` of the file as it is now."""
    try:
        return content_id(path.read_bytes())
    except FileNotFoundError:
        return None


def stat_signature(path: str | os.PathLike[str]) -> tuple[int, int, int, int] | None:
    """What ``stat`` says of a file (inode, size, mtime, ctime), None when absent: a polled
    reader reads the file again when this changes (and now and then regardless: an NFS
    client may cache attributes)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _writer_id() -> str:
    return f"{incarnation.current()}-{threading.get_ident()}"


def fsync_dir(path: str | os.PathLike[str], *, point: str = "state.fsync") -> None:
    """fsync a directory (a rename or create in it becomes durable), behind the failpoint
    ``point`` with the directory as its path.

    Raises:
        OSError: the fsync failed. After a rename the new file is in place but may not
            survive a crash: the caller treats the write as failed and re-reads the file
            before relying on either content (its in-memory state stays behind the file,
            never ahead of it).
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fs.fsync(fd, point=point, path=os.fspath(path))
    finally:
        os.close(fd)


# One encoder for every state write: ``json.dumps`` with options builds a new one per call,
# which was half of encoding a slot file (11 against 6 us).
_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


JsonObject = dict[str, object]
"""A state file's object as parsed. Each file's reader (its ``from_json``) checks the
members against the file's record, a TypedDict of its format, and reports a file that does
not match as ``CorruptState``; its writer builds that TypedDict."""


def json_bytes(obj: Mapping[str, object]) -> bytes:
    """The canonical encoding of a state object."""
    return _ENCODER.encode(obj).encode()


def write_json(path: str | os.PathLike[str], obj: Mapping[str, object], *, fsync: bool = True) -> None:
    """Atomically write ``obj`` (which must carry ``format``) as JSON."""
    write_bytes(path, json_bytes(obj), fsync=fsync)


READ_CHUNK = 1 << 20


def read_json(path: str | os.PathLike[str]) -> JsonObject | None:
    """Read a JSON state file afresh (close-to-open). None when it does not exist.

    Raises:
        CorruptState: the file exists but does not parse as a JSON object with a format.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:  # (os calls: a file object's layers cost more than reading a small state file)
        chunks = []
        while chunk := os.read(fd, READ_CHUNK):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return parse_json(path, chunks[0] if len(chunks) == 1 else b"".join(chunks))


def parse_json(path: str | os.PathLike[str], data: bytes) -> JsonObject:
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
    parsed: JsonObject = obj
    return parsed


def create_exclusive(path: Path, data: bytes, *, fsync: bool = True) -> bool:
    """Exclusive create (O_CREAT|O_EXCL) of ``path`` with ``data``. True if this caller won.

    The content is first written to a tmp file and hard-linked into place, so the winner's
    file is never seen half-written.
    """
    tmp = path.with_name(f".{path.name}.{_writer_id()}.excl")
    try:
        write_bytes(tmp, data, fsync=fsync)
        fs.io_fault("state.rename", path=str(path))
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        _unlink_quietly(str(tmp))
    if fsync:
        fsync_dir(path.parent)
    return True

