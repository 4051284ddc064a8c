"""Producer fence logs: ``__cluster/producer_fences/kaas-<id>.log`` (docs/transactions.rst).

After an InitProducerId epoch bump the coordinator fences the pid on the partitions it
leads and appends ``{"pid": P, "epoch": E}`` as one JSON line to *its own* fence log; every
peer polls the other brokers' logs and applies the bumps it has not seen yet to the
partitions it leads. Same shared-volume pattern as the marker queue: no RPC.

Invariants:
    - broker ``<id>`` is the only writer of ``kaas-<id>.log``, and only appends; each line
      is fsynced before ``append`` returns;
    - a failed append leaves no bytes behind: the file is cut back to its size before the
      append; while that cut has not succeeded, no append writes (each retries the cut
      first), so a line is never written after torn bytes;
    - a reader consumes complete lines only (a line still being written is read on a later
      poll), remembering its byte offset per file, so each line is returned once;
    - a file that shrinks (replaced by an operator) is read again from the start:
      re-applying a fence is harmless (fences only raise epochs);
    - a malformed line is skipped and reported, never fatal.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from kaas.storage import fs

__all__ = ["FenceLog", "FenceReader", "FenceRecord"]


class FenceLine(TypedDict):
    """One line of a fence log (JSON)."""

    pid: int
    epoch: int


@dataclass(frozen=True, slots=True)
class FenceRecord:
    """One epoch bump: every epoch of ``producer_id`` below ``producer_epoch`` is fenced."""

    producer_id: int
    producer_epoch: int


class FenceLog:
    """The append side of this broker's fence log.

    A failed append (ENOSPC, EIO, a short write, a failed fsync) may leave torn bytes at
    the end of the file; the next line written after them would merge with them into one
    malformed line that every reader skips, and that fence would be lost. So a failed
    append truncates the file back to its size before the append (and fsyncs that); if
    the truncation fails too, every later append first retries it and refuses (raises)
    until it succeeds. The first append of a ``FenceLog`` (a restarted broker) also cuts
    an unterminated tail back to the last complete line.

    Args:
        path: ``producer_fences/kaas-<self>.log``.
        fsync: fsync after each append (off only in tests).
    """

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._name = str(self.path)
        # the size the file must be cut back to before the next append: set when a failed
        # append could not be undone; None when the file ends in a complete line
        self._cut_to: int | None = None
        self._tail_checked = False
        self._lock = threading.Lock()  # appends run in worker threads: one at a time

    def append(self, producer_id: int, producer_epoch: int) -> None:
        """Append one bump durably.

        Raises:
            OSError: the write or fsync failed (the file is cut back to its previous
                size), or torn bytes of an earlier failed append could not be removed
                (nothing was written).
        """
        bump: FenceLine = {"pid": producer_id, "epoch": producer_epoch}
        line = json.dumps(bump, separators=(",", ":")) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                self._repair(fd)
                size = os.fstat(fd).st_size
                try:
                    fs.write_all(fd, (line.encode(),), point="state.write", path=self._name)
                    if self.fsync:
                        fs.fsync(fd, point="state.fsync", path=self._name)
                except OSError:
                    self._cut_to = size
                    self._cut(fd, sync=False)
                    raise
            finally:
                os.close(fd)

    def _repair(self, fd: int) -> None:
        """Remove what a failed append left (or, once per instance, an unterminated tail).

        Raises:
            OSError: the truncation (or its fsync) failed; the next append tries again.
        """
        if self._cut_to is None and not self._tail_checked:
            self._cut_to = _complete_prefix(fd)
        self._tail_checked = True
        if self._cut_to is not None:
            if not self._cut(fd, sync=True):
                raise OSError(errno.EIO, "torn bytes of a failed append could not be removed", self._name)

    def _cut(self, fd: int, *, sync: bool) -> bool:
        """Truncate to ``_cut_to`` and make that durable (fsync when the size changed, or
        always with ``sync``: an earlier cut may not have reached the disk). True on
        success (``_cut_to`` is cleared); False when it failed (kept: the next append
        retries first)."""
        assert self._cut_to is not None
        try:
            if os.fstat(fd).st_size != self._cut_to:
                os.ftruncate(fd, self._cut_to)
                sync = True
            if sync and self.fsync:
                fs.fsync(fd, point="state.fsync", path=self._name)
        except OSError:
            return False
        self._cut_to = None
        return True

    @property
    def torn(self) -> bool:
        """True while bytes of a failed append could not be removed yet: the next append
        retries the truncation first, and fails if it fails again."""
        return self._cut_to is not None


def _complete_prefix(fd: int) -> int | None:
    """The length of the file up to and including its last newline, or None when the
    file is empty or already ends with one."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return None
    end = size
    while end > 0:
        start = max(0, end - 4096)
        chunk = os.pread(fd, end - start, start)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        end = start
    return 0


@dataclass
class FenceReader:
    """Reads the fence logs of a directory incrementally.

    Args:
        directory: ``producer_fences``.
        skip: broker ids whose logs to ignore (normally this broker's own).

    Attributes:
        offsets: bytes consumed per file name.
        errors: malformed lines seen, as ``(file name, line)`` (for the caller to log).
    """

    directory: Path
    skip: frozenset[int] = frozenset()
    offsets: dict[str, int] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)

    def poll(self) -> list[FenceRecord]:
        """New complete lines of every log, in file order per log.

        Returns:
            The bumps not returned before.
        """
        out: list[FenceRecord] = []
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return out
        for name in names:
            if not (name.startswith("kaas-") and name.endswith(".log")):
                continue
            try:
                broker_id = int(name[5:-4])
            except ValueError:
                continue
            if broker_id in self.skip:
                continue
            out.extend(self._read_new(name))
        return out

    def _read_new(self, name: str) -> list[FenceRecord]:
        path = Path(self.directory) / name
        start = self.offsets.get(name, 0)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < start:
                    start = 0
                if size == start:
                    self.offsets[name] = start
                    return []
                f.seek(start)
                data = f.read(size - start)
        except FileNotFoundError:
            self.offsets.pop(name, None)
            return []
        end = data.rfind(b"\n")
        if end < 0:
            self.offsets[name] = start
            return []
        self.offsets[name] = start + end + 1
        records = []
        for raw in data[: end + 1].splitlines():
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
                pid, epoch = obj["pid"], obj["epoch"]
                if type(pid) is not int or type(epoch) is not int:
                    raise ValueError("pid and epoch must be ints")
            except (ValueError, KeyError, TypeError):
                self.errors.append((name, raw.decode(errors="replace")))
                continue
            records.append(FenceRecord(pid, epoch))
        return records
