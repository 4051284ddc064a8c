"""The share-partition runtime (``ShareRuntime``, ``broker.shares``): the partition
leader's share partitions, one ``domain.share_partition.SharePartition`` per (share group,
topic, partition), their files (``storage.share_state``), their lock timers, and the share
sessions (``domain.share_sessions``) of the members fetching here.

How one acquisition or acknowledgement becomes durable before it is answered: the machine
transition and the journal append happen on the trio thread with no await between them
(so the journal's order is the machine's), then the caller waits for a group-commit fsync
of the journal (inline on tmpfs, a worker thread on a disk) and checks that the partition's
manifest still carries the epoch the journal is named with (a deposed leader answers
NOT_LEADER_OR_FOLLOWER, as a Produce does). A failed write or fsync drops the share
partition from memory: the next request reloads it from what the files hold.

Locks run on the broker's monotonic clock (they live in memory only; a takeover releases
every acquired record). Expired locks are released when a request touches the partition
and by ``fire_timers`` (``kaas.tasks.group_timers``), which wakes waiting ShareFetches.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas import counters
from kaas.aio import Wakeup
from kaas.coord.share_partitions.configs import GroupShareConfigs, ShareConfigSource, ShareGroupSettings
from kaas.coord.share_partitions.ports import SharedLog, ShareHost
from kaas.domain.share_partition import AckBatch, AckType, Delta, Outcome, ShareError, SharePartition, spans_of
from kaas.domain.share_sessions import ShareSessions
from kaas.errors import CorruptState, KaasError
from kaas.storage import share_state
from kaas.storage.share_state import ShareJournal
from kaas.wire import batch as wb

__all__ = ["Fetched", "ShareRuntime"]

log = structlog.get_logger()

Key = tuple[str, str, int]  # (group, topic, partition)
TIMER_POLL_S = 1.0
RELINQUISHED = "no longer led here"
CORRUPT_RETRY_MS = 5_000  # a corrupt share state is read again (an operator may repair it) after this
READ_BYTES = 1 << 20  # the most one acquisition reads of a partition (at least one whole batch)
MAX_READS = 8  # reads one acquisition makes when they hold only control batches, gaps, aborted data


@dataclass(frozen=True, slots=True)
class Fetched:
    """What one partition gave a ShareFetch: whole batches and the acquired ranges
    (first offset, last offset, delivery count) within them."""

    records: bytes = b""
    acquired: tuple[tuple[int, int, int], ...] = ()


@dataclass(eq=False, slots=True)
class _Held:
    """One share partition this broker holds: its machine and its journal's writer."""

    key: Key
    part: SharedLog
    machine: SharePartition
    journal: ShareJournal
    failed: str | None = None
    syncing: bool = False
    sync_done: trio.Event = field(default_factory=trio.Event)
    close_after_sync: bool = False
    rolling: bool = False


class ShareRuntime:
    """The share partitions this broker leads and the share sessions of its clients.

    Args:
        host: the broker.
        configs: each group's share settings (default: its group configs, ``broker.group_config``).
    """

    def __init__(self, host: ShareHost, configs: ShareConfigSource | None = None) -> None:
        self.host = host
        self.configs: ShareConfigSource = (configs if configs is not None
                                           else GroupShareConfigs(host.group_config))
        self.sessions: ShareSessions[tuple[uuid.UUID, int]] = ShareSessions(
            idle_ms=host.settings.group_share_session_timeout_ms)
        self._held: dict[Key, _Held] = {}
        self._loading: dict[Key, trio.Event] = {}
        self._corrupt: dict[Key, tuple[SharedLog, str, int]] = {}  # key -> (partition, reason, retry at ms)
        self._changed = trio.Event()  # set when records became available (release, expiry, start moved)
        # (a new lock ends no sooner than group.share.record.lock.duration.ms, at least the
        # timer loop's longest wait: it never has to be woken for one)
        self.timer_wakeup = Wakeup()

    # ------------------------------------------------------------------ the data plane

    def now_ms(self) -> int:
        """The broker's monotonic clock in milliseconds (locks, session idleness)."""
        return int(self.host.clock.monotonic() * 1000)

    def settings_of(self, group_id: str) -> ShareGroupSettings:
        """The group's share settings.

        Raises:
            KaasError: its group configs cannot be read (KAFKA_STORAGE_ERROR).
        """
        return self.configs.share_settings(group_id)

    def lock_ms(self, group_id: str) -> int:
        """The group's record lock duration, for the answers' ``acquisition_lock_timeout``
        (the broker's when the group configs cannot be read: the partitions then say why)."""
        try:
            return self.settings_of(group_id).limits.record_lock_duration_ms
        except KaasError:
            return self.host.settings.group_share_record_lock_duration_ms

    async def acquire(self, group_id: str, member_id: str, topic: str, index: int, *, max_records: int,
                      max_bytes: int, min_one: bool = True, record_limit: bool = False) -> Fetched:
        """Acquire records of ``topic``-``index`` for the member, durably.

        Raises:
            KaasError: the partition is not led here (NOT_LEADER_OR_FOLLOWER and friends),
                its share state is corrupt or the disk failed (KAFKA_STORAGE_ERROR).
        """
        h = await self._hold(group_id, topic, index)
        conf = self.settings_of(group_id)
        now = self.now_ms()
        self._refresh(h, conf, now)
        part, m = h.part, h.machine
        pos = -1
        for _ in range(MAX_READS):  # a read that held only what is no record: read on
            if max_records <= 0 or not m.can_acquire():
                break
            fetch_offset = m.next_fetch_offset()
            limit = part.last_stable_offset if conf.read_committed else part.high_watermark
            if fetch_offset >= limit:
                break
            try:
                res = part.read(fetch_offset, min(max_bytes, READ_BYTES), limit, min_one)
            except OSError as exc:
                log.error("share_fetch_read_failed", group=group_id, topic=topic, partition=index, error=str(exc))
                raise KaasError(ErrorCode.kafka_storage_error, str(exc)) from None
            buf = res.records
            headers = list(wb.iter_headers(buf))
            batches = [(hd.base_offset, hd.last_offset, hd.producer_id, hd.is_transactional, hd.is_control)
                       for _, hd in headers]
            aborted = [a for a in part.log.aborted if a[0] >= fetch_offset] if conf.read_committed else []
            acq = m.acquire(member_id, fetch_offset, spans_of(batches, aborted, conf.read_committed),
                            max_records=max_records, now_ms=now, record_limit=record_limit)
            if acq.delta is None:
                break
            pos = self._append(h, acq.delta)
            self._count(acq)
            if acq.acquired:
                counters.SHARE.acquired += acq.count
                await self._durable(h, pos)
                await self._maybe_roll(h)
                return Fetched(_covering(buf, headers, acq.acquired[0][0], acq.acquired[-1][1]), tuple(acq.acquired))
        if pos >= 0:
            await self._durable(h, pos)
        return Fetched()

    async def acknowledge(self, group_id: str, member_id: str, topic: str, index: int,
                          batches: Sequence[AckBatch]) -> None:
        """Apply the member's acknowledgements (checked with ``check_ack_batches``) and
        return once they are durable.

        Raises:
            KaasError: INVALID_RECORD_STATE / INVALID_REQUEST from the machine (nothing
                changed), or the partition's errors as for ``acquire``.
        """
        if not batches:
            return
        h = await self._hold(group_id, topic, index)
        now = self.now_ms()
        self._refresh(h, self.settings_of(group_id), now)
        start = h.machine.start
        try:
            out = h.machine.acknowledge(member_id, batches, now)
        except ShareError as exc:
            raise KaasError(exc.code, exc.message) from None
        self._count(out)
        if out.delta is None:
            return
        pos = self._append(h, out.delta)
        if out.acknowledged.get(AckType.RELEASE) or h.machine.start > start:
            self._wake()  # records to hand out again, or room under max.record.locks
        await self._durable(h, pos)
        await self._maybe_roll(h)

    def release(self, group_id: str, member_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """The member's share session ended: its acquired records of those partitions are
        available again at once (Apache's ``releaseSession``). Partitions no longer led
        here are skipped (their next leader released everything when it loaded)."""
        for topic, index in partitions:
            h = self._held.get((group_id, topic, index))
            if h is None or h.failed is not None or h.part.closed:
                continue
            out = h.machine.release_member(member_id)
            if out.delta is not None:
                try:
                    self._append(h, out.delta)  # durable with the next group commit: a
                except KaasError:  # crash before it loads the records as released anyway
                    continue
                self._wake()

    def close_session(self, group_id: str, member_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """A final-epoch request was served: release and forget the session."""
        self.sessions.close(group_id, member_id)
        self.release(group_id, member_id, partitions)

    def connection_closed(self, connection: int) -> None:
        """A client connection closed: the share sessions it opened end and their members'
        records here are available again at once (Apache's ``ShareSessionCache`` tells
        ``SharePartitionManager.releaseSession`` on a disconnect)."""
        for s in self.sessions.connection_closed(connection):
            log.info("share_session_closed_with_connection", group=s.group_id, member=s.member_id)
            self.release(s.group_id, s.member_id, [(t, i) for g, t, i in self._held if g == s.group_id])

    async def wait_for_work(self) -> None:
        """Return when records may have become available: an append to any led partition,
        a release or lock expiry of a share partition, or an acknowledgement that moved its
        start offset (room under max.record.locks) (the caller bounds the wait)."""
        async with trio.open_nursery() as nursery:
            async def first(fn: Callable[[], Awaitable[None]]) -> None:
                await fn()
                nursery.cancel_scope.cancel()

            nursery.start_soon(first, self.host.wait_for_data)
            nursery.start_soon(first, self._changed.wait)

    # ------------------------------------------------------------------ timers

    def timer_wait_s(self, longest: float = TIMER_POLL_S) -> float:
        """Seconds until the earliest lock deadline (at most ``longest``)."""
        deadlines = [d for h in self._held.values() if h.failed is None
                     for d in (h.machine.next_deadline(),) if d is not None]
        if not deadlines:
            return longest
        return max(0.0, min(longest, (min(deadlines) - self.now_ms()) / 1000))

    async def fire_timers(self) -> None:
        """Release every lock past its deadline; forget share partitions whose partition
        this broker no longer leads."""
        now = self.now_ms()
        for key, h in list(self._held.items()):
            if h.failed is not None or h.part.closed or self.host.partitions.get(key[1:]) is not h.part:
                self._drop(h, None)
                continue
            self._expire(h, now)

    def close(self) -> None:
        """Forget every share partition and close its files (the broker stops)."""
        for h in list(self._held.values()):
            self._drop(h, None)

    # ------------------------------------------------------------------ introspection

    def held(self) -> dict[Key, SharePartition]:
        """The machines of the share partitions held now (tests, operator views)."""
        return {k: h.machine for k, h in self._held.items() if h.failed is None}

    @asynccontextmanager
    async def locked(self, group_id: str, topic: str, index: int, *,
                     forget: bool = False) -> AsyncIterator[tuple[SharedLog, SharePartition | None]]:
        """One share partition for an operator's call (``coord.share_partitions.admin``): the led
        partition and the machine held here (None: its files are the whole state), with
        loads of it kept out meanwhile. ``forget``: the machine is dropped first, because
        the caller changes the files (the next request reads them again).

        Raises:
            KaasError: the partition is not led here (as ``get_partition``).
        """
        key = (group_id, topic, index)
        while (loading := self._loading.get(key)) is not None:
            await loading.wait()
        part = self.host.get_partition(topic, index)
        done = self._loading[key] = trio.Event()
        try:
            h = self._held.get(key)
            if h is not None and (forget or h.part is not part or h.failed is not None or part.closed):
                self._drop(h, None)
                h = None
            if forget:
                self._corrupt.pop(key, None)
            yield part, h.machine if h is not None else None
        finally:
            del self._loading[key]
            done.set()

    # ------------------------------------------------------------------ internals

    def _wake(self) -> None:
        ev, self._changed = self._changed, trio.Event()
        ev.set()

    def _count(self, out: Outcome) -> None:
        for t, n in out.acknowledged.items():
            counters.SHARE.acknowledged[t.name.lower()] = counters.SHARE.acknowledged.get(t.name.lower(), 0) + n
        counters.SHARE.expired += out.expired
        counters.SHARE.archived += out.archived

    def _refresh(self, h: _Held, conf: ShareGroupSettings, now: int) -> None:
        """Before a transition: the group's limits, lapsed locks, a moved log start."""
        if h.machine.limits != conf.limits:
            h.machine.limits = conf.limits
        self._expire(h, now)
        out = h.machine.advance_log_start(h.part.log_start_offset)
        if out.delta is not None:
            self._count(out)
            self._append(h, out.delta)

    def _expire(self, h: _Held, now: int) -> None:
        out = h.machine.expire(now)
        if out.delta is None:
            return
        self._count(out)
        try:
            self._append(h, out.delta)  # need not be durable: a reload releases the locks too
        except KaasError:
            return
        self._wake()

    def _append(self, h: _Held, delta: Delta) -> int:
        """Journal ``delta`` (on the trio thread, right after the transition).

        Raises:
            KaasError: the partition may not be written (lease, leadership), or the write
                failed (the share partition is dropped: reloaded from its files next time).
        """
        if h.failed is not None:
            raise _gone(h)
        try:
            h.part.check_open()
        except KaasError:
            self._drop(h, None)
            raise
        try:
            return h.journal.append(delta)
        except OSError as exc:
            self._drop(h, f"journal write failed: {exc}")
            raise KaasError(ErrorCode.kafka_storage_error, str(exc)) from None

    async def _durable(self, h: _Held, pos: int) -> None:
        """Return once the journal is durable up to ``pos`` and the partition still ours."""
        while h.journal.durable < pos:
            if h.failed is not None:
                raise _gone(h)
            if h.syncing:
                await h.sync_done.wait()
                continue
            end, fds = h.journal.take_dirty()
            h.syncing = True
            try:
                if fds:
                    t0 = time.perf_counter()
                    await self.host.run_io(h.journal.fsync_fds, fds)
                    counters.observe_fsync(time.perf_counter() - t0)
                h.journal.mark_durable(end)
            except OSError as exc:
                self._drop(h, f"journal fsync failed: {exc}")
                raise KaasError(ErrorCode.kafka_storage_error, str(exc)) from None
            finally:
                h.syncing = False
                done, h.sync_done = h.sync_done, trio.Event()
                done.set()
                if h.close_after_sync:
                    h.close_after_sync = False
                    h.journal.close()
        self._check_leader(h)

    def _check_leader(self, h: _Held) -> None:
        """After the fsync, before the answer: the manifest still carries our epoch."""
        h.part.check_open()
        try:
            epoch = h.part.log.manifest_epoch()
        except (OSError, CorruptState):
            epoch = -1
        if epoch != h.part.epoch:
            log.warning("share_partition_deposed", group=h.key[0], topic=h.key[1], partition=h.key[2],
                        epoch=h.part.epoch, manifest_epoch=epoch)
            self._drop(h, None)
            raise KaasError(ErrorCode.not_leader_or_follower, "partition taken over")

    async def _maybe_roll(self, h: _Held) -> None:
        """Fold a long journal into a new snapshot (the journal switch happens with the
        machine, so every later delta goes to the new journal the snapshot names)."""
        if h.rolling or h.failed is not None or not h.journal.should_roll():
            return
        h.rolling = True
        try:
            state = h.machine.snapshot()
            nxt = h.journal.roll()
            await self.host.run_io(h.journal.write_snapshot, state, nxt)
            for failure in await self.host.run_io(h.journal.remove_older):
                log.warning("share_journal_not_removed", group=h.key[0], topic=h.key[1], partition=h.key[2],
                            error=failure)
        except OSError as exc:  # the old journals stay and are replayed: nothing is lost
            log.warning("share_snapshot_failed", group=h.key[0], topic=h.key[1], partition=h.key[2], error=str(exc))
        finally:
            h.rolling = False

    def _drop(self, h: _Held, reason: str | None) -> None:
        """Forget a share partition (failed, or no longer led here)."""
        if self._held.get(h.key) is h:
            del self._held[h.key]
        if h.failed is None:
            h.failed = reason or RELINQUISHED
            if reason is not None:
                log.error("share_partition_failed", group=h.key[0], topic=h.key[1], partition=h.key[2],
                          reason=reason)
        if h.syncing:
            h.close_after_sync = True
        else:
            h.journal.close()

    async def _hold(self, group_id: str, topic: str, index: int) -> _Held:
        """The share partition, loaded from its files on first use by this leader.

        Raises:
            KaasError: as ``acquire``.
        """
        key = (group_id, topic, index)
        while True:
            part = self.host.get_partition(topic, index)
            h = self._held.get(key)
            if h is not None:
                if h.part is part and h.failed is None and not part.closed:
                    return h
                self._drop(h, None)
            corrupt = self._corrupt.get(key)
            if corrupt is not None and corrupt[0] is part and self.now_ms() < corrupt[2]:
                raise KaasError(ErrorCode.kafka_storage_error, corrupt[1])
            loading = self._loading.get(key)
            if loading is None:
                break
            await loading.wait()
        done = self._loading[key] = trio.Event()
        try:
            return await self._load(key, part)
        finally:
            del self._loading[key]
            done.set()

    async def _load(self, key: Key, part: SharedLog) -> _Held:
        group_id, topic, index = key
        conf = self.settings_of(group_id)
        directory = part.log.path / share_state.DIR
        part.check_open()
        try:
            machine, loaded = await self.host.run_io(share_state.load_window, directory, group_id, conf.limits)
        except CorruptState as exc:
            if key not in self._corrupt or self._corrupt[key][1] != str(exc):
                log.error("share_state_corrupt", group=group_id, topic=topic, partition=index, error=str(exc))
            self._corrupt[key] = (part, str(exc), self.now_ms() + CORRUPT_RETRY_MS)
            raise KaasError(ErrorCode.kafka_storage_error, str(exc)) from None
        except OSError as exc:
            log.error("share_state_unreadable", group=group_id, topic=topic, partition=index, error=str(exc))
            raise KaasError(ErrorCode.kafka_storage_error, str(exc)) from None
        self._corrupt.pop(key, None)
        for cut in loaded.cuts:
            log.warning("share_journal_torn_tail", group=group_id, topic=topic, partition=index, cut=cut)
        fresh = machine is None
        if machine is None:
            # where it starts follows the group's configs as the file holds them now: an
            # AlterConfigs answered by the controller a moment ago may not have reached this
            # broker's poll yet (Apache assigns a partition only once its state was
            # initialized, a heartbeat after the subscription, so its brokers have long seen it)
            await self.host.refresh_group_configs()
            conf = self.settings_of(group_id)
            start = await self.host.run_io(self._start_offset, part, conf)
            machine = SharePartition(conf.limits, start)
        restored = machine.restore()
        self._count(restored)
        machine.advance_log_start(part.log_start_offset)
        journal = ShareJournal(directory, group_id, part.epoch, fsync=self.host.settings.fsync)
        part.check_open()
        try:
            for failure in await self.host.run_io(journal.begin, machine.snapshot()):
                log.warning("share_journal_not_removed", group=group_id, topic=topic, partition=index, error=failure)
        except OSError as exc:
            journal.close()
            log.error("share_state_write_failed", group=group_id, topic=topic, partition=index, error=str(exc))
            raise KaasError(ErrorCode.kafka_storage_error, str(exc)) from None
        if part.closed or self.host.partitions.get((topic, index)) is not part:
            journal.close()
            raise KaasError(ErrorCode.not_leader_or_follower, "partition relinquished while loading its share state")
        h = self._held[key] = _Held(key, part, machine, journal)
        log.info("share_partition_loaded", group=group_id, topic=topic, partition=index, epoch=part.epoch,
                 fresh=fresh, start=machine.start, end=machine.end, archived=restored.archived)
        return h

    def _start_offset(self, part: SharedLog, conf: ShareGroupSettings) -> int:
        """Where a share partition with no state starts (``share.auto.offset.reset``)."""
        reset = conf.auto_offset_reset
        if reset.kind == "earliest":
            return part.log_start_offset
        end = part.last_stable_offset if conf.read_committed else part.high_watermark
        if reset.kind == "by_duration":
            found = part.log.offset_for_timestamp(self.host.clock.wall_ms() - reset.duration_ms)
            return min(found[0], end) if found is not None else end
        return end


def _gone(h: _Held) -> KaasError:
    """The error for a request that finds its share partition dropped meanwhile."""
    if h.failed == RELINQUISHED:
        return KaasError(ErrorCode.not_leader_or_follower, "the partition is no longer led here")
    return KaasError(ErrorCode.kafka_storage_error, f"share state failed: {h.failed}")


def _covering(buf: bytes | memoryview, headers: list[tuple[int, wb.BatchHeader]], first: int, last: int) -> bytes:
    """The batches of ``buf`` that hold any offset of [first, last]."""
    lo = hi = -1
    for pos, hd in headers:
        if hd.last_offset < first:
            continue
        if hd.base_offset > last:
            break
        if lo < 0:
            lo = pos
        hi = pos + hd.size
    return bytes(buf[lo:hi]) if lo >= 0 else b""
