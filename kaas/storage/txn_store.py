"""Transaction state slot files: ``__cluster/txn_state/slot-<n>.json`` (docs/transactions.rst).

One file per slot (``routing.txn_slot(transactional_id)``, 50 slots) holding every
transactional id of that slot as ``domain.txn.SlotState.to_json()``. The slot's
coordinator is the file's only writer; any broker may read it (KIP-890 produce
verification reads it from the partition leader).

Invariants:
    - writes go through ``atomic.write_bytes`` (tmp + fsync + rename): a reader sees the old
      or the new file, never a torn one;
    - the bytes written are exactly ``atomic.json_bytes(state.to_json())`` (canonical JSON:
      keys sorted, no spaces), built by ``SlotEncoder`` from one cached piece per entry, so
      a write encodes only the entries that changed since the last one;
    - every read opens the file afresh (close-to-open), so a new coordinator after a
      failover sees exactly what the previous one persisted;
    - a file that exists but does not parse raises ``CorruptState``; it is never reset
      (the caller refuses service for that slot);
    - ``save`` writes only while ``owns(slot)`` holds, checked immediately before writing.
"""

from __future__ import annotations

from collections.abc import Callable
from json.encoder import encode_basestring_ascii as _json_str
from pathlib import Path

from kio.schema.errors import ErrorCode

from kaas.domain.txn import SLOT_FORMAT, SlotState, TxnMetadata, TxnState
from kaas.errors import CorruptState, KaasError
from kaas.storage import atomic

__all__ = ["SlotEncoder", "TxnStore", "entry_json"]


def entry_json(meta: TxnMetadata) -> str:
    """``meta.to_json()`` as canonical JSON (``atomic.json_bytes``: keys sorted, no spaces,
    non-ASCII escaped), without building the dict: the slot write of every transactional
    request encodes one."""
    partitions = _partitions_json(meta.partitions) if meta.partitions else ""
    groups = ",".join([_json_str(g) for g in sorted(meta.groups)]) if meta.groups else ""
    return (f'{{"groups":[{groups}],"last_producer_epoch":{meta.last_producer_epoch},'
            f'"last_producer_id":{meta.last_producer_id},"last_update_ms":{meta.last_update_ms},'
            f'"next_producer_id":{meta.next_producer_id},'
            f'"ongoing_since_ms":{meta.ongoing_since_ms},"partitions":[{partitions}],'
            f'"producer_epoch":{meta.producer_epoch},"producer_id":{meta.producer_id},'
            f'"state":{_STATE_JSON[meta.state]},"timeout_ms":{meta.timeout_ms},'
            f'"transaction_version":{meta.txn_version},'
            f'"transactional_id":{_json_str(meta.transactional_id)},"txn_seq":{meta.txn_seq}}}')


_STATE_JSON = {state: _json_str(state.value) for state in TxnState}
_PARTITIONS_KEPT = 4096
_partitions: dict[frozenset[tuple[str, int]], str] = {}


def _partitions_json(partitions: frozenset[tuple[str, int]]) -> str:
    """The JSON of a transaction's partitions list (sorted ``[topic, partition]`` pairs), made
    once per set: an entry is written Ongoing and again Prepare* with the same partitions,
    and a producer's next transactions have the same ones."""
    out = _partitions.get(partitions)
    if out is None:
        out = ",".join([f"[{_json_str(t)},{p}]" for t, p in sorted(partitions)])
        if len(_partitions) >= _PARTITIONS_KEPT:
            _partitions.clear()
        _partitions[partitions] = out
    return out


class SlotEncoder:
    """Encodes slot states, keeping each entry's JSON for as long as the entry object is
    the same (entries are immutable: a changed entry is a new object)."""

    def __init__(self) -> None:
        self._pieces: dict[int, dict[str, tuple[TxnMetadata, str]]] = {}  # slot -> id -> (entry, '"id":{..}')

    def encode(self, slot: int, state: SlotState) -> bytes:
        """``atomic.json_bytes(state.to_json())``."""
        old = self._pieces.get(slot, {})
        new: dict[str, tuple[TxnMetadata, str]] = {}
        entries = state.entries
        for txn_id in sorted(entries):
            meta = entries[txn_id]
            piece = old.get(txn_id)
            if piece is None or piece[0] is not meta:
                piece = (meta, f"{_json_str(txn_id)}:{entry_json(meta)}")
            new[txn_id] = piece
        self._pieces[slot] = new
        body = ",".join(piece for _meta, piece in new.values())
        return f'{{"format":{SLOT_FORMAT},"transactions":{{{body}}}}}'.encode()

    def forget(self, slot: int) -> None:
        """Drop the pieces of ``slot`` (no longer owned)."""
        self._pieces.pop(slot, None)

    def forget_all(self) -> None:
        self._pieces.clear()


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
        self.encoder = SlotEncoder()

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
        data = self.encoder.encode(slot, state)
        try:
            atomic.write_bytes(path, data, fsync=self.fsync)
        except FileNotFoundError:  # first write into a fresh data directory
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(path, data, fsync=self.fsync)
