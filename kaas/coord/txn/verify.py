"""KIP-890 part 1 produce verification: a transactional batch is accepted on a partition
only while its transaction is Ongoing there (``Verifier.verify_partition``); positive
answers are cached per partition until a marker or a fence makes them stale."""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from kaas.coord.ports import LedPartition, TxnBroker
from kaas.coord.txn.slots import Slots
from kaas.domain.routing import txn_slot
from kaas.domain.txn import TxnMetadata, TxnState
from kaas.errors import CorruptState, KaasError, NotInTransaction

__all__ = ["Verifier"]


class Verifier:
    """The verification of transactional batches, with its cache of positive answers."""

    def __init__(self, broker: TxnBroker, slots: Slots) -> None:
        self.broker = broker
        self.slots = slots
        # pid -> {(epoch, topic, partition): Partition} of positive KIP-890 verifications
        self._verified: dict[int, dict[tuple[int, str, int], LedPartition]] = {}
        self._forgets = 0  # counts ``forget`` calls: did a marker land while a slot read was out?

    def forget(self, producer_id: int, part: LedPartition) -> None:
        """A marker of ``producer_id`` goes to ``part``: its next batch needs a new check."""
        self._forgets += 1
        verified = self._verified.get(producer_id)
        if verified:
            for key in [k for k in verified if k[1] == part.topic and k[2] == part.index]:
                del verified[key]

    def forget_older(self, producer_id: int, producer_epoch: int) -> None:
        """``producer_id`` was fenced at ``producer_epoch``: drop the answers for lower epochs."""
        verified = self._verified.get(producer_id)
        if verified:
            for key in [k for k in verified if k[0] < producer_epoch]:
                del verified[key]

    def forget_closed(self) -> None:
        """Drop the answers for partitions this broker does not lead any more."""
        for pid in list(self._verified):
            verified = self._verified[pid]
            for k in [k for k, p in verified.items() if p.closed]:
                del verified[k]
            if not verified:
                del self._verified[pid]

    @property
    def forgets(self) -> int:
        """How many ``forget`` calls there were: a caller that remembers an answer it got
        while it waited passes the count from before it asked (``remember``)."""
        return self._forgets

    def verified(self, producer_id: int, producer_epoch: int, part: LedPartition) -> bool:
        """Is a transactional batch of (pid, epoch) known to belong on ``part`` without
        asking the coordinator: its transaction is open there at this epoch, or a positive
        answer is cached? (A TV2 leader adds only the partitions this says no to.)"""
        entry = part.log.producers.get(producer_id)
        if entry is not None and entry.epoch == producer_epoch and entry.txn_first_offset is not None:
            return True
        return self._verified.get(producer_id, {}).get((producer_epoch, part.topic, part.index)) is part

    def remember(self, producer_id: int, producer_epoch: int, partitions: Iterable[tuple[str, int]],
                 since: int) -> None:
        """The coordinator added ``partitions`` to (pid, epoch)'s transaction (TV2): cache the
        positive answer for those this broker leads, unless a marker landed since the
        ``forgets`` count ``since`` (it may have ended that very transaction)."""
        if since != self._forgets:
            return
        verified = None
        for tp in partitions:
            led = self.broker.partitions.get(tp)
            if led is not None and not led.closed:
                if verified is None:
                    verified = self._verified.setdefault(producer_id, {})
                verified[(producer_epoch, tp[0], tp[1])] = led

    async def verify_partition(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                               topic: str, partition: int) -> None:
        """KIP-890 part 1: may a transactional batch of (pid, epoch) go to this partition?

        Accepted when this pid's transaction is already open on the partition at this
        epoch, when a positive answer is cached, or when the slot file (read afresh: the
        coordinator may be another broker) shows the transaction Ongoing with this pid and
        epoch and holding the partition.

        Raises:
            KaasError: INVALID_PRODUCER_EPOCH for an older epoch (a fenced zombie),
                INVALID_TXN_STATE when the partition is not in the ongoing transaction,
                KAFKA_STORAGE_ERROR when the slot file cannot be read.
        """
        if not transactional_id:
            raise KaasError(ErrorCode.invalid_txn_state, "transactional batch without a transactional id")
        part = self.broker.partitions.get((topic, partition))
        if part is not None:
            entry = part.log.producers.get(producer_id)
            if entry is not None:
                if producer_epoch < entry.epoch:
                    raise KaasError(ErrorCode.invalid_producer_epoch,
                                    f"producer {producer_id} epoch {producer_epoch} is fenced by {entry.epoch}")
                if producer_epoch == entry.epoch and entry.txn_first_offset is not None:
                    return
            cached = self._verified.get(producer_id, {}).get((producer_epoch, topic, partition))
            if cached is part:
                return
        forgets = self._forgets
        meta = await self._current(transactional_id, producer_id, producer_epoch)
        if meta.state is not TxnState.Ongoing or (topic, partition) not in meta.partitions:
            raise NotInTransaction(f"{topic}-{partition} is not in an ongoing transaction of {transactional_id!r}")
        # Remember the answer for every partition of the transaction this broker leads, not
        # only this one: a Produce that carries several of them (or the next one) then reads
        # the slot file once. Each stays valid until its marker (``forget``), a fence
        # (``forget_older``) or the partition's close (``forget_closed``), as for this one.
        # Only when no marker landed while the read was out (a worker thread off tmpfs):
        # that marker may have closed this very transaction on another of its partitions.
        verified = self._verified.setdefault(producer_id, {})
        partitions = self.broker.partitions
        for tp in meta.partitions if forgets == self._forgets else ((topic, partition),):
            led = part if tp == (topic, partition) else partitions.get(tp)
            if led is not None and not led.closed:
                verified[(producer_epoch, tp[0], tp[1])] = led

    async def verify_group(self, transactional_id: str, producer_id: int, producer_epoch: int, group: str) -> None:
        """KIP-890 part 1 for TxnOffsetCommit (versions below 5, which only verify): may
        (pid, epoch) stage offsets of ``group``? Only while its transaction is Ongoing and
        holds the group (AddOffsetsToTxn), as the slot file shows.

        Raises:
            KaasError: as ``verify_partition``; INVALID_TXN_STATE when the group is not in
                the ongoing transaction.
        """
        meta = await self._current(transactional_id, producer_id, producer_epoch)
        if meta.state is not TxnState.Ongoing or group not in meta.groups:
            raise KaasError(ErrorCode.invalid_txn_state,
                            f"group {group!r} is not in an ongoing transaction of {transactional_id!r}")

    async def _current(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        """The entry of ``transactional_id`` (this broker's cached slot when it coordinates
        the id, else the slot file read afresh), checked to be (pid, epoch)'s."""
        slot = txn_slot(transactional_id)
        state = self.slots.cached(slot)
        if state is None:
            try:
                state = await self.broker.run_io(self.slots.store.load, slot)
            except (CorruptState, OSError) as exc:
                self.slots.unreadable.report(("slot", slot), exc)
                raise KaasError(ErrorCode.kafka_storage_error, f"transaction slot {slot} is unreadable") from None
        meta = state.get(transactional_id)
        if meta is None:
            raise KaasError(ErrorCode.invalid_txn_state, f"unknown transactional id {transactional_id!r}")
        if meta.producer_id != producer_id:
            if meta.last_producer_id == producer_id:
                raise KaasError(ErrorCode.invalid_producer_epoch, f"producer {producer_id} was replaced")
            raise KaasError(ErrorCode.invalid_txn_state,
                            f"producer {producer_id} is not the producer of {transactional_id!r}")
        if producer_epoch < meta.producer_epoch:
            raise KaasError(ErrorCode.invalid_producer_epoch,
                            f"producer {producer_id} epoch {producer_epoch} is fenced by {meta.producer_epoch}")
        if producer_epoch != meta.producer_epoch:
            raise NotInTransaction(f"producer {producer_id} epoch {producer_epoch} is not {transactional_id!r}'s")
        return meta
