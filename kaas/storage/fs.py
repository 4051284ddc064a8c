"""The storage layer's file-system seam: every write and fsync of a segment or a state
file goes through here, so a failing disk (ENOSPC, EIO, a short write) can be injected at
exactly those points by a failpoint (``append.write``, ``append.fsync``, ``state.write``,
``state.fsync``, ``state.rename``; the context is the file's path) without a special mount.

Invariants:
    - ``write_all`` writes every byte or raises; after it raised, the file holds an
      unknown prefix of the bytes (a short write leaves torn bytes, as a real one does):
      the caller must truncate back or give the file up, never append after them;
    - ``fsync`` raises on failure and is never retried by the caller as if it had
      succeeded (after a failed fsync the page cache may already be marked clean).
"""

from __future__ import annotations

import errno
import os

from kaas import failpoints

__all__ = ["write_all", "fsync", "replace"]

Buffer = bytes | bytearray | memoryview


def write_all(fd: int, buffers: list[Buffer] | tuple[Buffer, ...], *, point: str, path: str | os.PathLike[str]) -> None:
    """Write ``buffers`` in order to ``fd`` (one writev in the usual case), finishing
    short writes.

    Args:
        fd: an open file descriptor.
        buffers: the pieces, written back to back.
        point: the failpoint name (``append.write`` or ``state.write``).
        path: the file's path (the failpoint's context, and the error's filename; made a
            string only then).

    Raises:
        OSError: the write failed; an unknown prefix of the bytes may be on the file.
    """
    if failpoints.ARMED:
        fraction = failpoints.io_fault(point, path=path)
        if fraction is not None:
            _write_prefix(fd, buffers, fraction)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    n = os.writev(fd, buffers)
    if n == sum(map(len, buffers)):
        return
    views = [memoryview(b).cast("B") for b in buffers]
    for view in views:  # a short write: finish the rest byte-exactly
        if n >= len(view):
            n -= len(view)
            continue
        view = view[n:]
        n = 0
        while view:
            view = view[os.write(fd, view):]


def fsync(fd: int, *, point: str, path: str | os.PathLike[str]) -> None:
    """``os.fsync`` behind the failpoint ``point`` (``append.fsync`` or ``state.fsync``).

    Raises:
        OSError: the fsync failed; the file's durable content is unknown.
    """
    if failpoints.ARMED:
        failpoints.io_fault(point, path=path)
    os.fsync(fd)


def replace(src: str, dst: str, *, point: str = "state.rename") -> None:
    """``os.replace`` behind the failpoint ``point`` (a rename can fail with ENOSPC or EIO
    too: the directory may need a new block).

    Raises:
        OSError: the rename failed; ``dst`` is as it was.
    """
    if failpoints.ARMED:
        failpoints.io_fault(point, path=dst)
    os.replace(src, dst)


def _write_prefix(fd: int, buffers: list[Buffer] | tuple[Buffer, ...], fraction: float) -> None:
    data = b"".join(bytes(b) for b in buffers)
    keep = max(0, min(len(data) - 1, int(len(data) * fraction)))
    view = memoryview(data)[:keep]
    while view:
        view = view[os.write(fd, view):]


def io_fault(point: str, **context: object) -> float | None:
    """A failpoint that fails an I/O call: raises the armed ``OSError``, or returns the
    fraction a ``short`` write may write (``failpoints.io_fault``)."""
    return failpoints.io_fault(point, **context)


def crash_point(name: str, **context: object) -> None:
    """A failpoint between two steps of a multi-file update (crash tests: ``crash`` kills
    the process there)."""
    failpoints.hit(name, **context)
