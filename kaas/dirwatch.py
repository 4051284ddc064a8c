"""Wake up on changes of a local directory through Linux inotify (ctypes, no dependency).

Used to notice new marker-queue entries, and every change of the cluster state under
``__cluster/`` (heartbeats, death notices, controller epochs, the assignment, topics), at
once when the data directory is local (tmpfs or a local disk). inotify does not see
writes made by other NFS clients, so callers keep their polling loop as the source of
truth and treat this as a doorbell only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import trio

IN_MODIFY = 0x002
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
IN_Q_OVERFLOW = 0x4000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c") or "libc.so.6"
        lib = ctypes.CDLL(name, use_errno=True)
        lib.inotify_init1.argtypes = [ctypes.c_int]
        lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        _libc = lib
    return _libc


class DirWatch:
    """One inotify descriptor watching one or more directories for entries created, moved,
    deleted or written."""

    def __init__(self, path: Path | Sequence[Path]) -> None:
        paths = [Path(path)] if isinstance(path, (str, os.PathLike)) else [Path(p) for p in path]
        lib = _lib()
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        mask = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CLOSE_WRITE
        self.dirs: dict[int, Path] = {}
        for d in paths:
            wd = lib.inotify_add_watch(fd, os.fsencode(str(d)), mask)
            if wd < 0:
                err = ctypes.get_errno()
                os.close(fd)
                raise OSError(err, f"inotify_add_watch {d} failed")
            self.dirs[wd] = d
        self.fd = fd

    async def wait(self) -> None:
        """Return after the next batch of events (drained)."""
        await self.wait_changes()

    async def wait_changes(self) -> set[tuple[Path, str]]:
        """Wait for the next batch of events; return the (directory, entry name) pairs they
        name (an overflowed queue returns ``{(directory, "")}`` for every directory)."""
        await trio.lowlevel.wait_readable(self.fd)
        out: set[tuple[Path, str]] = set()
        try:
            while True:
                buf = os.read(self.fd, 65536)
                if not buf:
                    break
                out |= self._parse(buf)
        except BlockingIOError:
            pass
        return out

    def _parse(self, buf: bytes) -> set[tuple[Path, str]]:
        out: set[tuple[Path, str]] = set()
        pos = 0
        while pos + _EVENT.size <= len(buf):
            wd, mask, _cookie, length = _EVENT.unpack_from(buf, pos)
            raw = buf[pos + _EVENT.size:pos + _EVENT.size + length]
            pos += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                out |= {(d, "") for d in self.dirs.values()}
                continue
            d = self.dirs.get(wd)
            if d is not None:
                out.add((d, os.fsdecode(raw.split(b"\0", 1)[0])))
        return out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_watch(path: Path | Sequence[Path]) -> DirWatch | None:
    """A watch on ``path`` (one directory or several), or None where inotify is unavailable
    (the caller polls)."""
    paths = [Path(path)] if isinstance(path, (str, os.PathLike)) else [Path(p) for p in path]
    try:
        for d in paths:
            d.mkdir(parents=True, exist_ok=True)
        return DirWatch(paths)
    except (OSError, AttributeError):
        return None
