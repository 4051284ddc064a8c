"""Wake up on changes of a local directory through Linux inotify (ctypes, no dependency).

Used to notice new marker-queue entries at once when the data directory is local (tmpfs or
a local disk). inotify does not see writes made by other NFS clients, so callers keep their
polling loop as the source of truth and treat this as a doorbell only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
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

_libc = None


def _lib():
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c") or "libc.so.6"
        lib = ctypes.CDLL(name, use_errno=True)
        lib.inotify_init1.argtypes = [ctypes.c_int]
        lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        _libc = lib
    return _libc


class DirWatch:
    """An inotify descriptor watching one directory for entries created, moved or deleted."""

    def __init__(self, path: Path) -> None:
        lib = _lib()
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        mask = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CLOSE_WRITE
        if lib.inotify_add_watch(fd, os.fsencode(str(path)), mask) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"inotify_add_watch {path} failed")
        self.fd = fd

    async def wait(self) -> None:
        """Return after the next batch of events (drained)."""
        await trio.lowlevel.wait_readable(self.fd)
        try:
            while os.read(self.fd, 65536):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_watch(path: Path) -> DirWatch | None:
    """A watch on ``path``, or None where inotify is unavailable (the caller polls)."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        return DirWatch(path)
    except (OSError, AttributeError):
        return None
