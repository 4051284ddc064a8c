"""ShareFetch (78) and ShareAcknowledge (79) over a real broker in-process, on trio's
autojumping MockClock through the broker's one clock (``TrioClock``): acquisition and
acknowledgement, session epochs, each bad input with Apache's error, lock expiry and
renewal, long polls, read_committed, the delivery-count limit, a corrupt state file, and
a leader takeover resuming from the persisted state."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from kio.schema.errors import ErrorCode

from kaas import counters
from kaas.broker import Broker
from kaas.clock import TrioClock
from kaas.coord.share_partitions import ShareRuntime, runtime
from kaas.domain.groups.share.group import ShareHeartbeat
from kaas.domain.share_partition import RecordState
from kaas.net.metrics_http import BrokerCollector
from kaas.storage import manifest, share_state
from kaas.tasks import group_configs as tasks_group_configs
from tests.component.share_calls import (
    ack_req,
    acquired,
    call,
    fetch_req,
    is_member,
    joined,
    offsets_in,
    part_of,
    produce,
)
from tests.component.test_connection import open_broker_in, open_client
from tests.component.test_group_configs import SET, incremental

ACCEPT, RELEASE, REJECT, GAP, RENEW = 1, 2, 3, 0, 4
LOCK_MS = 2_000  # (Apache's default group.share.record.lock.duration.ms is 30 s)


@asynccontextmanager
async def broker_with_topic(shm_path, clock, name: str = "q", partitions: int = 1, read_committed: bool = False,
                            **settings) -> AsyncIterator[tuple[Broker, uuid.UUID]]:
    """A broker and a topic; share.auto.offset.reset=earliest for the groups "g" and
    "other", by_duration:PT1S for "recent" (and "late" keeps Apache's default, latest);
    share.isolation.level=read_committed for "g" with ``read_committed``."""
    async with open_broker_in(shm_path, clock=TrioClock(clock), **settings) as (broker, nursery):
        meta, (err, _msg) = await broker.admin.create_topic(name, partitions, {})
        assert err == ErrorCode.none and meta is not None
        g = {"share.auto.offset.reset": "earliest"}
        if read_committed:
            g["share.isolation.level"] = "read_committed"
        await group_configs(broker, nursery, "g", g)
        await group_configs(broker, nursery, "other", {"share.auto.offset.reset": "earliest"})
        await group_configs(broker, nursery, "recent", {"share.auto.offset.reset": "by_duration:PT1S"})
        yield broker, meta.topic_id


async def group_configs(broker: Broker, nursery: trio.Nursery, group: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs on the GROUP resource, as an admin client sends it."""
    async with open_client(broker, nursery) as client:
        r = (await client.call(incremental(group, *((k, SET, v) for k, v in configs.items())))).responses[0]
        assert r.error_code == ErrorCode.none, r


def new_leader_memory(broker: Broker) -> None:
    """The share runtime of a new leader: nothing in memory, the files to read."""
    broker.shares = ShareRuntime(broker)


async def test_share_consumers_acquire_acknowledge_and_accepted_records_stay_done(shm_path, thread_safe_autojump_clock):
    counters.reset()
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        await produce(broker, "q", 5)
        # share.auto.offset.reset=latest (Apache's default): a new group starts at the end
        assert acquired(await call(broker, fetch_req("x", 0, tid, group="late"))) == []
        await produce(broker, "q", 5)
        assert acquired(await call(broker, fetch_req("x", 1, tid, group="late"))) == [(5, 9, 1)]
        # a member opens its session (epoch 0) and acquires what is there, batch by batch
        r = await call(broker, fetch_req("m1", 0, tid, max_records=3))
        assert acquired(r) == [(0, 4, 1)]
        assert r.acquisition_lock_timeout.total_seconds() == 30  # Apache's default
        assert offsets_in(part_of(r).records) == [0, 1, 2, 3, 4]
        # another member gets the next batch, not the locked one
        r2 = await call(broker, fetch_req("m2", 0, tid))
        assert acquired(r2) == [(5, 9, 1)]
        # m1 accepts 0-2 and releases 3-4 piggybacked on its next fetch (epoch 1): it gets them back
        r = await call(broker, fetch_req("m1", 1, tid, acks={0: [(0, 2, (ACCEPT,)), (3, 4, (RELEASE,))]}))
        assert part_of(r).acknowledge_error_code == ErrorCode.none
        assert acquired(r) == [(3, 4, 2)]
        # ShareAcknowledge (epoch 2): accept everything held
        a = await call(broker, ack_req("m1", 2, tid, {0: [(3, 4, (ACCEPT,))]}))
        assert a.error_code == ErrorCode.none and part_of(a).error_code == ErrorCode.none
        a = await call(broker, ack_req("m2", 1, tid, {0: [(5, 9, (ACCEPT, REJECT, ACCEPT, GAP, ACCEPT))]}))
        assert part_of(a).error_code == ErrorCode.none
        sp = broker.shares.held()[("g", "q", 0)]
        assert (sp.start, sp.end) == (10, 10)
        # nothing accepted comes back; new records do
        r = await call(broker, fetch_req("m1", 3, tid))
        assert acquired(r) == []
        await produce(broker, "q", 2)
        assert acquired(await call(broker, fetch_req("m1", 4, tid))) == [(10, 11, 1)]
        assert counters.SHARE.acquired == 5 + 5 + 5 + 2 + 2
        assert counters.SHARE.acknowledged == {"accept": 8, "release": 2, "reject": 1, "gap": 1}
        assert counters.SHARE.archived == 2
        # and /metrics says so
        samples = {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
                   for m in BrokerCollector(broker).collect() for smp in m.samples}
        assert samples[("kaas_share_records_acquired_total", ())] == 19
        assert samples[("kaas_share_acknowledgements_total", (("type", "accept"),))] == 8
        assert samples[("kaas_share_acknowledgements_total", (("type", "renew"),))] == 0
        assert samples[("kaas_share_records_archived_total", ())] == 2
        assert samples[("kaas_share_lock_expiries_total", ())] == 0
        assert samples[("kaas_share_partitions", ())] == 2


async def test_session_epochs_and_every_bad_input_get_apaches_errors(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        await produce(broker, "q", 10)
        # no session yet
        assert (await call(broker, fetch_req("m", 1, tid))).error_code == ErrorCode.share_session_not_found
        assert (await call(broker, ack_req("m", 1, tid, {0: [(0, 0, (1,))]}))).error_code \
            == ErrorCode.share_session_not_found
        # acknowledgements in the request that opens a session
        r = await call(broker, fetch_req("m", 0, tid, acks={0: [(0, 0, (1,))]}))
        assert r.error_code == ErrorCode.invalid_request
        assert acquired(await call(broker, fetch_req("m", 0, tid, max_records=5), connection=1)) == [(0, 9, 1)]
        # a stale epoch (and a future one)
        assert (await call(broker, fetch_req("m", 0 + 5, tid))).error_code == ErrorCode.invalid_share_session_epoch
        assert (await call(broker, ack_req("m", 7, tid, {0: [(0, 0, (1,))]}))).error_code \
            == ErrorCode.invalid_share_session_epoch
        assert (await call(broker, ack_req("m", 0, tid, {0: [(0, 0, (1,))]}))).error_code \
            == ErrorCode.invalid_share_session_epoch  # ShareAcknowledge never opens a session
        epoch = 1

        async def acks(batches, member="m", version=1, **v2):
            nonlocal epoch
            r = await call(broker, ack_req(member, epoch if member == "m" else 1, tid, {0: batches},
                                           version=version, **v2))
            assert r.error_code == ErrorCode.none
            if member == "m":
                epoch += 1
            return part_of(r).error_code, part_of(r).error_message

        sp = broker.shares.held()[("g", "q", 0)]
        before = sp.snapshot()
        # overlapping, reversed, unknown type, wrong type count, renew in v1
        assert (await acks([(0, 4, (1,)), (3, 6, (1,))]))[0] == ErrorCode.invalid_request
        # one shared offset passes Apache's request check; the partition refuses it whole
        assert (await acks([(0, 4, (1,)), (4, 6, (2,))]))[0] == ErrorCode.invalid_record_state
        assert (await acks([(6, 2, (1,))]))[0] == ErrorCode.invalid_request
        assert (await acks([(0, 0, (9,))]))[0] == ErrorCode.invalid_request
        assert (await acks([(0, 2, (1, 1))]))[0] == ErrorCode.invalid_request
        assert (await acks([(0, 0, (4,))]))[0] == ErrorCode.invalid_request
        # offsets never acquired (past them: INVALID_REQUEST), another member's records
        assert (await acks([(12, 14, (1,))]))[0] == ErrorCode.invalid_request
        assert (await call(broker, fetch_req("intruder", 0, tid))).error_code == ErrorCode.none
        code, message = await acks([(3, 3, (1,))], member="intruder")
        assert code == ErrorCode.invalid_record_state and "owner" in message
        assert sp.snapshot() == before  # none of it changed anything
        assert (await acks([(3, 3, (2,))]))[0] == ErrorCode.none
        code, _ = await acks([(3, 3, (1,))])  # released: no longer acquired
        assert code == ErrorCode.invalid_record_state
        # an unknown topic id
        r = await call(broker, ack_req("m", epoch, uuid.uuid4(), {0: [(0, 0, (1,))]}))
        assert part_of(r).error_code == ErrorCode.unknown_topic_id
        epoch += 1
        # bad ids
        invalid_member = (ErrorCode.invalid_request, "Invalid member id in the request.")  # Apache 4.4's
        r = await call(broker, fetch_req("", 0, tid))
        assert (r.error_code, r.error_message) == invalid_member
        r = await call(broker, fetch_req("m" * 37, 0, tid))
        assert (r.error_code, r.error_message) == invalid_member
        r = await call(broker, fetch_req("m", 0, tid, group=None), join=False)  # type: ignore[arg-type]
        assert (r.error_code, r.error_message) == (ErrorCode.invalid_request, "Invalid group id in the request.")
        # the member leaves the group: as in Apache, the partition's leader does not ask the
        # coordinator; the member's share session stays and its acknowledgements count
        epoch_m = broker.groups.shares.describe("g")["group_epoch"]
        left, _ = await broker.groups.shares.heartbeat("g", ShareHeartbeat("m", -1))
        assert (left.error_code, left.member_epoch, is_member(broker, "g", "m")) == (ErrorCode.none, -1, False)
        assert broker.groups.shares.describe("g")["group_epoch"] == epoch_m + 1
        r = await call(broker, ack_req("m", epoch, tid, {0: [(0, 2, (1,))]}), join=False)
        assert (r.error_code, part_of(r).error_code) == (ErrorCode.none, ErrorCode.none)
        epoch += 1
        assert sp.start == 3
        # until the connection that opened the session closes: the session ends and the
        # member's records are available at once, their delivery counts kept (Apache 4.4)
        broker.shares.connection_closed(2)  # another connection: nothing happens
        assert [(f, la, s.name) for f, la, s, _c, _m, _d in sp.runs()] == [(3, 3, "AVAILABLE"), (4, 9, "ACQUIRED")]
        broker.shares.connection_closed(1)
        r = await call(broker, ack_req("m", epoch, tid, {0: [(4, 4, (1,))]}), join=False)
        assert r.error_code == ErrorCode.share_session_not_found
        assert [(f, la, s.name, c) for f, la, s, c, _m, _d in sp.runs()] == [(3, 9, "AVAILABLE", 1)]
        # the final epoch closes the session and releases what is still held, the
        # delivery counts kept: the next delivery of 6-9 is their third
        assert acquired(await call(broker, fetch_req("n", 0, tid, max_records=1))) == [(3, 3, 2)]
        assert acquired(await call(broker, fetch_req("n", 1, tid))) == [(4, 9, 2)]
        r = await call(broker, fetch_req("n", -1, tid, acks={0: [(3, 5, (1,))]}))
        assert r.error_code == ErrorCode.none and part_of(r).acknowledge_error_code == ErrorCode.none
        assert (await call(broker, fetch_req("n", 2, tid))).error_code == ErrorCode.share_session_not_found
        assert [(f, la, s.name, c) for f, la, s, c, _m, _d in sp.runs()] == [(6, 9, "AVAILABLE", 2)]


async def test_locks_expire_and_renew_on_the_injected_clock(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock, group_share_record_lock_duration_ms=LOCK_MS,
                                 group_share_min_record_lock_duration_ms=1000) as (broker, tid):
        await produce(broker, "q", 4)
        t0 = trio.current_time()
        assert acquired(await call(broker, fetch_req("m1", 0, tid))) == [(0, 3, 1)]
        # v2: renew 0-1 half way through the lock
        await trio.sleep(LOCK_MS / 2000)
        r = await call(broker, ack_req("m1", 1, tid, {0: [(0, 1, (RENEW,))]}, version=2, is_renew_ack=True))
        assert part_of(r).error_code == ErrorCode.none
        # m2 waits: the timer loop releases 2-3 when their lock ends, which wakes it
        r = await call(broker, fetch_req("m2", 0, tid, max_wait_ms=60_000))
        assert acquired(r) == [(2, 3, 2)]
        assert LOCK_MS / 1000 <= trio.current_time() - t0 < LOCK_MS / 1000 + 0.5
        # the renewed ones last one more lock from the renewal
        r = await call(broker, fetch_req("m2", 1, tid, max_wait_ms=60_000))
        assert acquired(r) == [(0, 1, 2)]
        assert 1.5 * LOCK_MS / 1000 <= trio.current_time() - t0 < 1.5 * LOCK_MS / 1000 + 0.5
        # m1's acknowledgement comes too late: the records are m2's now
        r = await call(broker, ack_req("m1", 2, tid, {0: [(0, 1, (ACCEPT,))]}))
        assert part_of(r).error_code == ErrorCode.invalid_record_state
        assert counters.SHARE.expired >= 4


async def test_a_waiting_share_fetch_wakes_on_new_records(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        got = []

        async def consume():
            got.append(await call(broker, fetch_req("m", 0, tid, max_wait_ms=10_000)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await trio.sleep(2)
            assert not got
            await produce(broker, "q", 3)
        assert acquired(got[0]) == [(0, 2, 1)]
        # nothing there: the answer comes after max_wait, empty
        t0 = trio.current_time()
        assert acquired(await call(broker, fetch_req("m", 1, tid, max_wait_ms=500))) == []
        assert trio.current_time() - t0 >= 0.5


async def test_read_committed_never_hands_out_aborted_records_nor_past_the_lso(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock, read_committed=True) as (broker, tid):
        part = broker.get_partition("q", 0)
        await produce(broker, "q", 2)  # 0-1 plain
        await produce(broker, "q", 2, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)  # 2-3
        res = part.append_control(7, 0, commit=False, coordinator_epoch=0)  # 4: ABORT
        assert res is not None
        await part.wait_durable(res.next_offset)
        await produce(broker, "q", 2, producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)  # 5-6
        res = part.append_control(8, 0, commit=True, coordinator_epoch=0)  # 7: COMMIT
        assert res is not None
        await part.wait_durable(res.next_offset)
        await produce(broker, "q", 1, producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)  # 8 open
        await produce(broker, "q", 1)  # 9: past the LSO (8)
        r = await call(broker, fetch_req("m", 0, tid))
        assert acquired(r) == [(0, 1, 1), (5, 6, 1)]  # aborted 2-3 and the markers never acquired
        sp = broker.shares.held()[("g", "q", 0)]
        assert sp.end == 8 and part.last_stable_offset == 8
        assert acquired(await call(broker, fetch_req("m", 1, tid))) == []
        res = part.append_control(9, 0, commit=True, coordinator_epoch=0)  # 10: COMMIT, the LSO moves
        assert res is not None
        await part.wait_durable(res.next_offset)
        assert acquired(await call(broker, fetch_req("m", 2, tid))) == [(8, 9, 1)]


async def test_the_delivery_count_limit_archives_a_poison_record(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock, group_share_delivery_count_limit=3) \
            as (broker, tid):
        await produce(broker, "q", 3)
        epoch = 0
        deliveries = []
        for _ in range(6):
            r = await call(broker, fetch_req("m", epoch, tid))
            epoch += 1
            got = acquired(r)
            if not got:
                break
            deliveries.append(got)
            # 0 and 2 are fine, 1 crashes the consumer every time: released
            batches = [(f, la, tuple(ACCEPT if o != 1 else RELEASE for o in range(f, la + 1))) for f, la, _ in got]
            r = await call(broker, ack_req("m", epoch, tid, {0: batches}))
            epoch += 1
            assert part_of(r).error_code == ErrorCode.none
        assert deliveries == [[(0, 2, 1)], [(1, 1, 2)], [(1, 1, 3)]]
        sp = broker.shares.held()[("g", "q", 0)]
        assert (sp.start, sp.end) == (3, 3)


async def test_a_corrupt_share_state_file_is_reported_not_reset(shm_path, thread_safe_autojump_clock, capsys):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        await produce(broker, "q", 3)
        assert acquired(await call(broker, fetch_req("m", 0, tid))) == [(0, 2, 1)]
        part = broker.get_partition("q", 0)
        snap = share_state.snapshot_path(part.log.path / share_state.DIR, "g")
        damaged = b"garbage"
        snap.write_bytes(damaged)
        new_leader_memory(broker)
        r = await call(broker, fetch_req("m", 0, tid))
        assert part_of(r).error_code == ErrorCode.kafka_storage_error
        assert "corrupt state file" in (part_of(r).error_message or "")
        r = await call(broker, fetch_req("m", 1, tid))
        assert part_of(r).error_code == ErrorCode.kafka_storage_error
        assert snap.read_bytes() == damaged  # never reset
        assert capsys.readouterr().out.count("share_state_corrupt") == 1  # one log line
        # another group of the same partition is not affected
        assert acquired(await call(broker, fetch_req("m", 0, tid, group="other"))) == [(0, 2, 1)]


async def test_a_new_leader_resumes_from_the_persisted_state(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        await produce(broker, "q", 4)
        await produce(broker, "q", 4)
        assert acquired(await call(broker, fetch_req("m1", 0, tid, max_records=1))) == [(0, 3, 1)]
        assert acquired(await call(broker, fetch_req("m2", 0, tid, max_records=1))) == [(4, 7, 1)]
        r = await call(broker, ack_req("m1", 1, tid, {0: [(0, 3, (ACCEPT, RELEASE, ACCEPT, ACCEPT))]}))
        assert part_of(r).error_code == ErrorCode.none
        old = broker.get_partition("q", 0)

        # another broker takes the partition over: its first write is the manifest with its
        # epoch. This one has not noticed yet; an acknowledgement it serves now is written
        # to its journal but never answered as done: its fsync is followed by the epoch check.
        manifest.write(old.log.path, epoch=old.epoch + 1, log_start_offset=0, high_watermark=8, fsync=False)
        r = await call(broker, ack_req("m2", 1, tid, {0: [(4, 7, (RELEASE,))]}))
        assert part_of(r).error_code == ErrorCode.not_leader_or_follower
        assert part_of(r).current_leader.leader_id in (-1, 0)

        # the new leader (a new memory, the same volume) resumes from the files
        meta = broker.topics.get("q")
        assert meta is not None
        await broker.relinquish(old)
        new = await broker.take_over(meta, 0, old.epoch + 1)
        assert new is not None and new.epoch == old.epoch + 1
        new_leader_memory(broker)
        # accepted 0, 2, 3 never come back; 1 (released) and 4-7 (acquired, unacknowledged)
        # are available at once, their delivery counts kept
        r = await call(broker, fetch_req("m3", 0, tid))
        assert acquired(r) == [(1, 1, 2), (4, 7, 2)]
        # m2's session was on the old leader; a new one cannot acknowledge what it no longer holds
        r = await call(broker, ack_req("m2", 2, tid, {0: [(4, 7, (1,))]}))
        assert r.error_code == ErrorCode.share_session_not_found
        assert acquired(await call(broker, fetch_req("m2", 0, tid))) == []
        r = await call(broker, ack_req("m2", 1, tid, {0: [(4, 7, (1,))]}))
        assert part_of(r).error_code == ErrorCode.invalid_record_state
        r = await call(broker, ack_req("m3", 1, tid, {0: [(1, 1, (1,)), (4, 7, (1,))]}))
        assert part_of(r).error_code == ErrorCode.none
        sp = broker.shares.held()[("g", "q", 0)]
        assert (sp.start, sp.end) == (8, 8)
        # the new leader writes a journal of its own epoch; the old one is history
        assert share_state.journals(new.log.path / share_state.DIR, "g") == [(new.epoch, 0)]


def test_share_group_apis_are_advertised():
    from kaas.handlers.registry import REGISTRY

    assert [(k, REGISTRY[k].min_version, REGISTRY[k].max_version) for k in (76, 77, 78, 79)] == \
        [(76, 1, 1), (77, 1, 1), (78, 1, 2), (79, 1, 2)]


async def test_an_acquisition_reads_on_past_batches_that_hold_no_record(shm_path, thread_safe_autojump_clock,
                                                                           monkeypatch):
    monkeypatch.setattr(runtime, "READ_BYTES", 1)  # one batch per read
    async with broker_with_topic(shm_path, thread_safe_autojump_clock, read_committed=True) as (broker, tid):
        part = broker.get_partition("q", 0)
        for seq in (0, 2, 4):  # 0-5: an aborted transaction in three batches
            await produce(broker, "q", 2, producer_id=7, producer_epoch=0, base_sequence=seq, transactional=True)
        res = part.append_control(7, 0, commit=False, coordinator_epoch=0)  # 6: ABORT
        assert res is not None
        await part.wait_durable(res.next_offset)
        await produce(broker, "q", 1)  # 7
        assert acquired(await call(broker, fetch_req("m", 0, tid))) == [(7, 7, 1)]


async def test_share_auto_offset_reset_by_duration_starts_at_the_first_recent_record(shm_path,
                                                                                     thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        await produce(broker, "q", 3)  # 0-2, now
        await trio.sleep(2)
        await produce(broker, "q", 2)  # 3-4, two seconds later
        await trio.sleep(0.5)
        assert acquired(await call(broker, fetch_req("m", 0, tid, group="recent"))) == [(3, 4, 1)]


async def test_a_new_share_partition_starts_where_the_group_configs_on_the_volume_say(shm_path,
                                                                                       thread_safe_autojump_clock,
                                                                                       monkeypatch):
    """librdkafka 0172: the group's share.auto.offset.reset=earliest was altered through the
    controller (another broker) a moment before the first ShareFetch reached the partition's
    leader, whose poll of group_configs.json had not come round yet. The share partition
    must still start at the log start, not at the end."""
    polled = []

    async def never_again(reload, directory, *, inotify, task_status=trio.TASK_STATUS_IGNORED):
        await reload(True)
        polled.append(True)
        task_status.started()
        await trio.sleep_forever()  # this broker's poll has not come round yet

    monkeypatch.setattr(tasks_group_configs, "keep_current", never_again)
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        await produce(broker, "q", 5)
        store = broker.group_configs
        store.file.write(store.file.read().with_group("fresh", {"share.auto.offset.reset": "earliest"}))
        assert polled and store.overrides("fresh") == {}  # not seen by this broker yet
        assert acquired(await call(broker, fetch_req("m", 0, tid, group="fresh"))) == [(0, 4, 1)]
        assert store.overrides("fresh") == {"share.auto.offset.reset": "earliest"}


async def test_max_bytes_0_asks_for_no_records_and_acquires_none(shm_path, thread_safe_autojump_clock):
    """librdkafka 0180 (fetch.max.bytes=0): Apache answers a ShareFetch whose MaxBytes (or
    MaxRecords) is 0 at once, with no records, and acquires nothing; its acknowledgements
    still count."""
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        await produce(broker, "q", 3)
        t0 = trio.current_time()
        assert acquired(await call(broker, fetch_req("m", 0, tid, max_bytes=0, max_wait_ms=5_000))) == []
        assert acquired(await call(broker, fetch_req("m", 1, tid, max_records=0, max_wait_ms=5_000))) == []
        assert trio.current_time() - t0 < 1  # not a long poll
        assert acquired(await call(broker, fetch_req("m", 2, tid, max_records=1))) == [(0, 2, 1)]
        r = await call(broker, fetch_req("m", 3, tid, max_bytes=0, acks={0: [(0, 2, (ACCEPT,))]}))
        assert part_of(r).acknowledge_error_code == ErrorCode.none and acquired(r) == []
        await produce(broker, "q", 1)
        assert acquired(await call(broker, fetch_req("other", 0, tid, group="other", max_bytes=0))) == []
        assert acquired(await call(broker, fetch_req("other", 1, tid, group="other"))) == [(0, 3, 1)]


async def test_a_stale_session_epoch_is_refused_and_changes_nothing(shm_path, thread_safe_autojump_clock):
    """A ShareFetch or ShareAcknowledge at an epoch the session already passed (a retry of
    an answered request) is INVALID_SHARE_SESSION_EPOCH as a whole: its acknowledgements
    are not applied, nothing is acquired, and the session still expects the next epoch."""
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        await produce(broker, "q", 4)
        assert acquired(await call(broker, fetch_req("m", 0, tid, max_records=1))) == [(0, 3, 1)]
        await produce(broker, "q", 2)
        assert acquired(await call(broker, fetch_req("m", 1, tid, max_records=1))) == [(4, 5, 1)]
        sp = broker.shares.held()[("g", "q", 0)]
        before = sp.runs()
        for stale in (1, 1):  # twice: a refusal moves nothing on
            r = await call(broker, fetch_req("m", stale, tid, acks={0: [(0, 3, (ACCEPT,))]}))
            assert (r.error_code, r.responses) == (ErrorCode.invalid_share_session_epoch, ())
            r = await call(broker, ack_req("m", stale, tid, {0: [(4, 5, (REJECT,))]}))
            assert (r.error_code, r.responses) == (ErrorCode.invalid_share_session_epoch, ())
        assert sp.runs() == before
        # the session goes on at epoch 2: each acknowledgement applies once
        r = await call(broker, ack_req("m", 2, tid, {0: [(0, 3, (ACCEPT,)), (4, 5, (REJECT,))]}))
        assert part_of(r).error_code == ErrorCode.none
        assert (sp.start, sp.end) == (6, 6)
        r = await call(broker, ack_req("m", 3, tid, {0: [(0, 3, (ACCEPT,))]}))
        # all below the start, settled: INVALID_RECORD_STATE, as Apache answers once its
        # in-flight cache dropped them
        assert part_of(r).error_code == ErrorCode.invalid_record_state
        assert (sp.start, sp.end, sp.counts()[RecordState.ACKNOWLEDGED]) == (6, 6, 0)


async def test_a_closed_connection_ends_the_share_sessions_it_opened(shm_path, thread_safe_autojump_clock):
    """Apache's ShareSessionCache: a client connection that closes ends the share sessions
    it opened, and their members' records are available again at once (not at their lock's
    end), their delivery counts kept; a session of another connection, still open, goes on."""
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        await produce(broker, "q", 3)
        await produce(broker, "q", 3)
        await joined(broker, "g", "m1")
        await joined(broker, "g", "m2")
        async with trio.open_nursery() as nursery:
            async with open_client(broker, nursery) as c1, open_client(broker, nursery) as c2:
                assert acquired(await c1.call(fetch_req("m1", 0, tid, max_records=1))) == [(0, 2, 1)]
                assert acquired(await c2.call(fetch_req("m2", 0, tid, max_records=1))) == [(3, 5, 1)]
                open_now = broker.connections
                await c1.stream.aclose()
                while broker.connections == open_now:
                    await trio.sleep(0.01)
                sp = broker.shares.held()[("g", "q", 0)]
                assert [(f, la, s.name, c) for f, la, s, c, _m, _d in sp.runs()] == [(0, 2, "AVAILABLE", 1),
                                                                                   (3, 5, "ACQUIRED", 1)]
                assert broker.shares.sessions.get("g", "m1") is None
                r = await c2.call(ack_req("m2", 1, tid, {0: [(3, 5, (ACCEPT,))]}))
                assert part_of(r).error_code == ErrorCode.none
                assert acquired(await c2.call(fetch_req("m2", 2, tid))) == [(0, 2, 2)]


async def test_the_final_acknowledgements_of_a_closing_consumer_count_after_it_left(shm_path,
                                                                                    thread_safe_autojump_clock):
    """librdkafka 0179 (destroy_with_explicit_ack): a closing share consumer sends its last
    acknowledgements (ShareAcknowledge, epoch -1) to each leader at the same moment as its
    leave heartbeat; the leave may reach the coordinator first. Apache's leaders never ask
    the coordinator, so the acknowledgements count (NONE), and the rest is released, its
    delivery count kept."""
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, tid):
        await produce(broker, "q", 4)
        assert acquired(await call(broker, fetch_req("m", 0, tid))) == [(0, 3, 1)]
        left, _ = await broker.groups.shares.heartbeat("g", ShareHeartbeat("m", -1))
        assert left.error_code == ErrorCode.none and not is_member(broker, "g", "m")
        r = await call(broker, ack_req("m", -1, tid, {0: [(0, 1, (ACCEPT,))]}), join=False)
        assert (r.error_code, part_of(r).error_code) == (ErrorCode.none, ErrorCode.none)
        sp = broker.shares.held()[("g", "q", 0)]
        assert [(f, la, s.name, c) for f, la, s, c, _m, _d in sp.runs()] == [(2, 3, "AVAILABLE", 1)]
        assert broker.shares.sessions.get("g", "m") is None


async def test_a_new_groups_partitions_are_assigned_once_initialized(shm_path, thread_safe_autojump_clock,
                                                                      monkeypatch):
    """librdkafka 0172 (mixed_ack_mode_same_group): two share consumers join a new group a
    moment apart. As in Apache 4.1+, the first heartbeat assigns nothing: it records the
    subscribed partitions initialized (in its one write of the group's file: nothing is
    written at the leaders in between); the next heartbeat assigns them. So the first
    member never holds every partition alone (and drains them all before the second gets
    any)."""
    async with broker_with_topic(shm_path, thread_safe_autojump_clock, partitions=2) as (broker, tid):
        shares = broker.groups.shares
        writes = []
        run_io, save = broker.run_io, broker.groups.store.save

        async def counted_io(fn, *args):
            if fn == save:
                writes.append(args[0].share)
            return await run_io(fn, *args)

        monkeypatch.setattr(broker, "run_io", counted_io)
        r1, _ = await shares.heartbeat("g", ShareHeartbeat("m1", 0, subscribed_topic_names=("q",)))
        assert (r1.error_code, r1.assignment) == (ErrorCode.none, {})
        on_file = json.loads(broker.groups.store.path("g").read_bytes())["share"]
        assert (on_file["initialized"], on_file["initializing"]) == ({str(tid): [0, 1]}, {})
        assert writes == [on_file]  # the join and the initialization in one write
        r2, _ = await shares.heartbeat("g", ShareHeartbeat("m2", 0, subscribed_topic_names=("q",)))
        r1, _ = await shares.heartbeat("g", ShareHeartbeat("m1", r1.member_epoch))
        assert r1.assignment is not None and r2.assignment is not None
        got = [ps for r in (r1, r2) for ps in r.assignment.values()]
        assert sorted(map(sorted, got)) == [[0], [1]]  # one partition each
