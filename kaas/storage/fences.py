"""Producer fence logs: ``__cluster/producer_fences/kaas-<id>.log`` (seed).

After an InitProducerId epoch bump the coordinator fences the pid on the partitions it
leads and appends ``{"pid": P, "epoch": E}`` as one JSON line to *its own* fence log; every
peer polls the other brokers' logs and applies the bumps it has not seen yet to the
partitions it leads. Same shared-volume pattern as the marker queue: no RPC.

Invariants:
    - broker ``<id>`` is the only writer of ``kaas-<id>.log``, and only appends; each line
      is fsynced before ``append`` returns;
    - a reader consumes complete lines only (a line still being written is read on a later
      poll), remembering its byte offset per file, so each line is returned once;
    - a file that shrinks (replaced by an operator) is read again from the start:
      re-applying a fence is harmless (fences only raise epochs);
    - a malformed line is skipped and reported, never fatal.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FenceLog", "FenceReader", "FenceRecord"]


@dataclass(frozen=True, slots=True)
class FenceRecord:
    """One epoch bump: every epoch of ``producer_id`` below ``producer_epoch`` is fenced."""

    producer_id: int
    producer_epoch: int


class FenceLog:
    """The append side of this broker's fence log.

    Args:
        path: ``producer_fences/kaas-<self>.log``.
        fsync: fsync after each append (off only in tests).
    """

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync

    def append(self, producer_id: int, producer_epoch: int) -> None:
        """Append one bump durably.

        Raises:
            OSError: the write or fsync failed.
        """
        line = json.dumps({"pid": producer_id, "epoch": producer_epoch}, separators=(",", ":")) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            data = memoryview(line.encode())
            while data:
                n = os.write(fd, data)
                data = data[n:]
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)


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
