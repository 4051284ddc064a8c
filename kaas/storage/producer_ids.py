"""The per-broker PID block allocator (docs/transactions.rst: "Producer ids are never reused").

``pid = (broker_id + 1) * 2**40 + local``; ``local`` advances in blocks of 1000 whose end
is persisted in ``__cluster/producer_ids/kaas-<id>.json`` (tmp + fsync + rename) before any
PID of the block is handed out.

Invariants:
    - the persisted block end only grows;
    - every PID handed out is below the persisted end, so a crash can skip PIDs, never
      reuse one;
    - broker b's PIDs lie in [(b+1)*2**40, (b+2)*2**40): brokers never collide;
    - a failed block write changes nothing in memory: the next allocation writes the same
      new block end again.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict, cast

from kaas.errors import CorruptState
from kaas.storage import atomic

BLOCK = 1000
SPAN = 2**40


class PidBlockFile(TypedDict):
    """``kaas-<id>.json``, format 1."""

    format: int
    broker_id: int
    block_end: int


class PidAllocator:
    def __init__(self, path: Path, broker_id: int, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.broker_id = broker_id
        self.fsync = fsync
        self.base = (broker_id + 1) * SPAN
        obj = cast("PidBlockFile | None", atomic.read_json(self.path))
        if obj is None:
            self._end = 0
        else:
            try:
                self._end = int(obj["block_end"])
            except (KeyError, TypeError, ValueError):
                raise CorruptState(str(self.path), "no integer block_end") from None
            if obj.get("broker_id", broker_id) != broker_id:
                raise CorruptState(str(self.path), "belongs to another broker")
        self._next = self._end  # everything below the persisted end may have been used

    def allocate(self) -> int:
        """The next never-used PID (persists a new block end first when needed).

        Raises:
            OSError: the new block end could not be written (ENOSPC, EIO, ...): the file
                and this allocator are as they were, and no PID was handed out.
            RuntimeError: this broker's PID space is exhausted.
        """
        if self._next >= self._end:
            new_end = self._next + BLOCK
            if new_end >= SPAN:
                raise RuntimeError("producer id space of this broker is exhausted")
            block: PidBlockFile = {"format": 1, "broker_id": self.broker_id, "block_end": new_end}
            atomic.write_json(self.path, block, fsync=self.fsync)
            self._end = new_end
        pid = self.base + self._next
        self._next += 1
        return pid

    @property
    def block_end(self) -> int:
        return self._end
