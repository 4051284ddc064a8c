"""Transaction state slot files: ``__cluster/txn_state/slot-<n>.json`` (docs/transactions.rst).

One file per slot (``routing.txn_slot(transactional_id)``, 50 slots) holding every
transactional id of that slot as ``domain.txn.SlotState.to_json()``. The slot's
coordinator is the file's only writer; any broker may read it (KIP-890 produce
verification reads it from the partition leader).

Invariants:
    - writes go through ``atomic.write_json`` (tmp + fsync + rename): a reader sees the old
      or the new file, never a torn one;
    - every read opens the file afresh (close-to-open), so a new coordinator after a
      failover sees exactly what the previous one persisted;
    - a file that exists but does not parse raises ``CorruptState``; it is never reset
      (the caller refuses service for that slot);
    - ``save`` writes only while ``owns(slot)`` holds, checked immediately before writing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kio.schema.errors import ErrorCode

from kaas.domain.txn import SlotState
from kaas.errors import CorruptState, KaasError
from kaas.storage import atomic

__all__ = ["TxnStore"]


class TxnStore:
    """Load and save slot files.

    Args:
        directory: the ``txn_state`` directory.
        owns: ``owns(slot)`` is True while this broker coordinates the slot; ``save``
            refuses to write otherwise.
        fsync: fsync file and directory on save (off only in tests).
    """

    def __init__(self, directory: Path, owns: Callable[[int], bool], *, fsync: bool = True) -> None:
        self.dir = Path(directory)
        self.owns = owns
        self.fsync = fsync
        self._files: dict[int, str] = {}  # slot -> its file's path as a string

    def path(self, slot: int) -> Path:
        """The file of ``slot``."""
        return self.dir / f"slot-{slot}.json"

    def _file(self, slot: int) -> str:
        name = self._files.get(slot)
        if name is None:
            name = self._files[slot] = str(self.path(slot))
        return name

    def load(self, slot: int) -> SlotState:
        """Read a slot file afresh.

        Args:
            slot: the slot number.

        Returns:
            Its state; an empty ``SlotState`` when the file does not exist yet.

        Raises:
            CorruptState: the file exists but is not a valid slot file.
        """
        path = self._file(slot)
        obj = atomic.read_json(path)
        if obj is None:
            return SlotState({})
        try:
            return SlotState.from_json(obj)
        except ValueError as exc:
            raise CorruptState(path, str(exc)) from None

    def save(self, slot: int, state: SlotState) -> None:
        """Replace the slot file with ``state`` (tmp + fsync + rename).

        Args:
            slot: the slot number.
            state: every entry of the slot.

        Raises:
            KaasError: NOT_COORDINATOR when this broker does not own the slot.
            OSError: the write failed (the old file is intact).
        """
        if not self.owns(slot):
            raise KaasError(ErrorCode.not_coordinator, f"transaction slot {slot} is not owned here")
        path = self._file(slot)
        try:
            atomic.write_json(path, state.to_json(), fsync=self.fsync)
        except FileNotFoundError:  # first write into a fresh data directory
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic.write_json(path, state.to_json(), fsync=self.fsync)
