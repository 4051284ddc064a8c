"""The KIP-848 consumer group runtime (``kaas.coord.group.consumer.runtime``) on a real ``Broker``:
timers on trio's MockClock through the broker's one clock (session timeout, an
unacknowledged revocation), the state on file before an answer, a successor coordinator
restoring the group, a failed write and a corrupt file; and the handlers over the wire
(ConsumerGroupHeartbeat/Describe, OffsetCommit/OffsetFetch v9, TxnOffsetCommit, ListGroups
v5, DescribeGroups, a classic JoinGroup)."""

from __future__ import annotations

import datetime
import json
import uuid
from contextlib import asynccontextmanager

import pytest
import structlog.testing
import trio
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode as E
from kio.schema.join_group.v7.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_fetch.v9.request import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)

from kaas import failpoints
from kaas.clock import TrioClock
from kaas.coord.group import GroupCoordinator
from kaas.domain.groups.consumer.group import Heartbeat
from kaas.errors import KaasError
from kaas.net.connection import serve_connection
from kaas.wire import codec
from kaas.wire.build import build
from tests.component.faults import FAULTS
from tests.component.test_connection import Client, open_broker_in

SESSION, INTERVAL, REBALANCE = 6_000, 1_000, 3_000


@asynccontextmanager
async def open_broker(path, clock):
    async with open_broker_in(path, clock=TrioClock(clock), group_consumer_session_timeout_ms=SESSION,
                              group_consumer_heartbeat_interval_ms=INTERVAL,
                              group_initial_rebalance_delay_ms=0) as (broker, nursery):
        broker.topics.create("t", 4)
        yield broker, nursery


def join(member: str, *, instance: str | None = None) -> Heartbeat:
    return Heartbeat(member, 0, instance_id=instance, rebalance_timeout_ms=REBALANCE,
                     subscribed_topic_names=("t",), owned=())


def beat(member: str, epoch: int, owned: set[int] | None, tid: str) -> Heartbeat:
    return Heartbeat(member, epoch, owned=None if owned is None else ((tid, tuple(sorted(owned))),))


async def send(groups: GroupCoordinator, hb: Heartbeat, group: str = "g"):
    reply, interval = await groups.consumers.heartbeat(group, hb, api_version=1)
    if reply.error_code == E.none:
        assert interval in (INTERVAL, INTERVAL // 10)  # a tenth while the group rebalances
    return reply


def on_file(broker, group: str = "g") -> dict:
    return json.loads(broker.groups.store.path(group).read_bytes())["consumer"]


async def two_members(broker) -> tuple[str, set[int], set[int]]:
    """m1 and m2 share t's four partitions, m1 having revoked two for m2."""
    groups, tid = broker.groups, str(broker.topics.get("t").topic_id)
    assert (await send(groups, join("m1"))).member_epoch == 1
    assert (await send(groups, join("m2"))).member_epoch == 2
    kept = set((await send(groups, beat("m1", 1, {0, 1, 2, 3}, tid))).assignment[tid])
    assert (await send(groups, beat("m1", 1, kept, tid))).member_epoch == 2
    got = set((await send(groups, beat("m2", 2, set(), tid))).assignment[tid])
    assert got == {0, 1, 2, 3} - kept
    return tid, kept, got


async def test_a_silent_member_is_fenced_when_its_session_ends(shm_path, thread_safe_autojump_clock):
    async with open_broker(shm_path, thread_safe_autojump_clock) as (broker, _):
        groups = broker.groups
        tid, _kept, got = await two_members(broker)
        assert {m["member_id"] for m in on_file(broker)["members"]} == {"m1", "m2"}
        # m2 keeps heartbeating, m1 says nothing for longer than a session
        epoch = 2
        for _ in range(SESSION // INTERVAL + 2):
            await trio.sleep(INTERVAL / 1000)
            r = await send(groups, beat("m2", epoch, got, tid))
            epoch = r.member_epoch
            if r.assignment is not None:
                got = set(r.assignment[tid])
        assert "m1" not in groups.groups["g"].consumer.members
        assert got == {0, 1, 2, 3} and r.member_epoch == 3
        assert [m["member_id"] for m in on_file(broker)["members"]] == ["m2"]  # the fence is on file
        assert (await send(groups, beat("m1", 2, set(), tid))).error_code == E.unknown_member_id
        stats = groups.consumers.stats  # kaas_consumer_group_events_total
        assert stats["members_fenced"] == 1 and stats["heartbeats"] >= SESSION // INTERVAL
        assert stats["group_epoch_bumps"] == 3 and stats["revocations"] >= 1  # m1, m2 joined; m1 fenced


async def test_an_unacknowledged_revocation_fences_after_the_rebalance_timeout(shm_path, thread_safe_autojump_clock):
    async with open_broker(shm_path, thread_safe_autojump_clock) as (broker, _):
        groups, tid = broker.groups, str(broker.topics.get("t").topic_id)
        await send(groups, join("m1"))
        await send(groups, join("m2"))
        m2: set[int] = set()
        with structlog.testing.capture_logs() as logs:
            for _ in range(REBALANCE // INTERVAL + 2):  # heartbeats, never lets go
                r = await send(groups, beat("m1", 1, {0, 1, 2, 3}, tid))
                if r.error_code != E.none:
                    break
                r2 = await send(groups, beat("m2", 2, m2, tid))
                if r2.assignment is not None:
                    m2 = set(r2.assignment[tid])
                await trio.sleep(INTERVAL / 1000)
        assert r.error_code == E.unknown_member_id
        assert [(x["member"], x["reason"]) for x in logs if x["event"] == "consumer_member_fenced"] == \
            [("m1", "rebalance")]
        r2 = await send(groups, beat("m2", 2, m2, tid))
        if r2.assignment is not None:
            m2 = set(r2.assignment[tid])
        assert m2 == {0, 1, 2, 3} and r2.member_epoch == 3


async def test_state_is_on_file_before_the_answer_and_a_successor_carries_on(shm_path, thread_safe_autojump_clock):
    async with open_broker(shm_path, thread_safe_autojump_clock) as (broker, _):
        tid, kept, got = await two_members(broker)
        snap = on_file(broker)
        assert (snap["group_epoch"], snap["assignment_epoch"]) == (2, 2)
        assert {m["member_id"]: (m["member_epoch"], m["assigned"]) for m in snap["members"]} == \
            {"m1": (2, {tid: sorted(kept)}), "m2": (2, {tid: sorted(got)})}

        # the coordinator stops (a move, or SIGKILL); later another one takes over
        old = broker.groups.groups["g"].consumer
        broker.groups.unload("g")
        await trio.sleep(SESSION / 2000)
        fresh = GroupCoordinator(broker)
        with structlog.testing.capture_logs() as logs:
            r1 = await send(fresh, beat("m1", 2, kept, tid))
        assert [x["event"] for x in logs if x["event"].startswith("consumer_group")] == ["consumer_group_restored"]
        r2 = await send(fresh, beat("m2", 2, got, tid))
        # same epochs, same partitions, no rebalance
        assert (r1.error_code, r1.member_epoch, r2.member_epoch) == (E.none, 2, 2)
        g = fresh.groups["g"].consumer
        assert (g.group_epoch, g.assignment_epoch, g.state) == (2, 2, "Stable")
        assert g.members == old.members
        # the restored members got a whole session from the restore
        assert g.next_deadline() == broker.clock.wall_ms() + SESSION


async def test_a_dead_member_goes_by_death_session_and_grace_however_often_the_coordinator_moves(
        shm_path, thread_safe_autojump_clock):
    """Issue 42: the coordinator moves every 2.5 s (under the 3 s grace, far under the 6 s
    session); m1 dies, m2 heartbeats every second to whichever coordinator serves. Each
    restore counts m1's session from its last contact on file, with the grace once: m1 is
    fenced by its death + session + grace, and m2 gets its partitions, never fenced."""
    async with open_broker(shm_path, thread_safe_autojump_clock) as (broker, _):
        clock = broker.clock
        tid, _kept, got = await two_members(broker)
        death = clock.wall_ms()  # m1 is heard from no more
        groups, epoch, moves, fenced_at = broker.groups, 2, 0, None
        with structlog.testing.capture_logs() as logs:
            while clock.wall_ms() < death + 2 * SESSION:
                for _ in range(2):
                    await trio.sleep(INTERVAL / 1000)
                    await groups.fire_timers()
                    r = await send(groups, beat("m2", epoch, got, tid))
                    assert r.error_code == E.none, r  # the live member is never fenced
                    epoch = r.member_epoch
                    if r.assignment is not None:
                        got = set(r.assignment[tid])
                    if fenced_at is None and "m1" not in groups.groups["g"].consumer.members:
                        fenced_at = clock.wall_ms()
                await trio.sleep(0.5)
                groups.unload("g")  # the coordinator moves: a fresh one restores the group from its file
                groups = GroupCoordinator(broker)
                moves += 1
        assert moves >= 4 and fenced_at is not None
        assert fenced_at <= death + SESSION + SESSION // 2 + INTERVAL  # (the heartbeats' step)
        assert got == {0, 1, 2, 3}
        assert [x["member"] for x in logs if x["event"] == "consumer_member_fenced"] == ["m1"]


async def test_a_failed_write_fails_the_heartbeat_and_changes_nothing(shm_path, thread_safe_autojump_clock):
    async with open_broker(shm_path, thread_safe_autojump_clock) as (broker, _):
        groups, run = broker.groups, broker.layout.run
        await send(groups, join("m1"))
        before, group = broker.groups.store.path("g").read_bytes(), groups.groups["g"].consumer
        point, spec = FAULTS["enospc"]
        failpoints.arm(run, 0, {point: {**spec, "path": "consumer_offsets"}})
        failpoints.reload()
        try:
            with pytest.raises(KaasError) as exc:
                await send(groups, join("m2"))
        finally:
            failpoints.disarm(run, 0)
            failpoints.reload()
        assert exc.value.code == E.coordinator_not_available
        assert broker.groups.store.path("g").read_bytes() == before
        assert groups.groups["g"].consumer is group and set(group.members) == {"m1"}
        assert (await send(groups, join("m2"))).member_epoch == 2


async def test_a_corrupt_state_file_is_reported_and_refused_never_reset(shm_path, thread_safe_autojump_clock):
    async with open_broker(shm_path, thread_safe_autojump_clock) as (broker, _):
        await send(broker.groups, join("m1"))
        path = broker.groups.store.path("g")
        obj = json.loads(path.read_bytes())
        obj["consumer"]["members"][0]["state"] = "no-such-state"
        path.write_text(json.dumps(obj))
        damaged = path.read_bytes()
        fresh = GroupCoordinator(broker)
        with structlog.testing.capture_logs() as logs:
            for _ in range(3):
                with pytest.raises(KaasError) as exc:
                    await send(fresh, join("m1"))
                assert exc.value.code == E.unknown_server_error
            with pytest.raises(KaasError):
                fresh.consumers.describe("g")
            with pytest.raises(KaasError):
                await fresh.commit("g", member_id="m1", group_instance_id=None, generation_id=1, offsets={})
        assert [x["event"] for x in logs if x["log_level"] == "error"] == ["consumer_group_state_unreadable"]
        assert path.read_bytes() == damaged


async def test_a_file_written_by_another_coordinator_is_read_back_not_overwritten(shm_path,
                                                                                  thread_safe_autojump_clock):
    async with open_broker(shm_path, thread_safe_autojump_clock) as (broker, _):
        a, b = broker.groups, GroupCoordinator(broker)
        assert (await send(a, join("m1"))).member_epoch == 1
        assert (await send(b, join("m2"))).member_epoch == 2  # b read a's file, then wrote
        with pytest.raises(KaasError) as exc:  # a's copy is stale: not written over b's
            await send(a, join("m3"))
        assert exc.value.code == E.not_coordinator
        assert {m["member_id"] for m in on_file(broker)["members"]} == {"m1", "m2"}
        assert (await send(a, join("m3"))).member_epoch == 3  # the client's retry: a read the file again
        assert set(a.groups["g"].consumer.members) == {"m1", "m2", "m3"}


async def test_a_classic_group_with_members_is_not_a_consumer_group(shm_path, thread_safe_autojump_clock):
    async with open_broker(shm_path, thread_safe_autojump_clock) as (broker, _):
        groups = broker.groups
        r = await groups.join("g", member_id="", group_instance_id=None, client_id="c", client_host="h",
                              session_timeout_ms=SESSION, rebalance_timeout_ms=SESSION, protocol_type="consumer",
                              protocols=[("range", b"")], require_known_member=False)
        assert r.error_code == E.none
        reply = await send(groups, join("m1"))
        assert (reply.error_code, reply.error_message) == (E.group_id_not_found, "Group g is not a consumer group.")
        assert groups.groups["g"].consumer is None and r.member_id in groups.groups["g"].group.members


# --------------------------------------------------------------------------- over the wire


@asynccontextmanager
async def open_client(broker, nursery):
    ours, theirs = trio.testing.memory_stream_pair()
    nursery.start_soon(serve_connection, broker, theirs)
    async with ours:
        yield Client(ours)


def cg_heartbeat(member: str, epoch: int, *, names=None, regex=None, owned=None, assignor=None,
                 rebalance: int = -1, group: str = "w") -> ConsumerGroupHeartbeatRequest:
    tps = None if owned is None else tuple(_owned(tid, ps) for tid, ps in owned.items())
    return ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch,
        rebalance_timeout=datetime.timedelta(milliseconds=rebalance), subscribed_topic_names=names,
        subscribed_topic_regex=regex, server_assignor=assignor, topic_partitions=tps)


def _owned(tid: uuid.UUID, ps):
    from kio.schema.consumer_group_heartbeat.v1.request import TopicPartitions
    return TopicPartitions(topic_id=tid, partitions=tuple(ps))


async def test_the_apis_over_the_wire(shm_path, thread_safe_autojump_clock):
    async with open_broker(shm_path, thread_safe_autojump_clock) as (broker, nursery), \
            open_client(broker, nursery) as client:
        tid = broker.topics.get("t").topic_id
        r = await client.call(cg_heartbeat("m1", 0, names=("t",), owned={}, rebalance=REBALANCE))
        assert (r.error_code, r.member_id, r.member_epoch) == (E.none, "m1", 1)
        assert int(r.heartbeat_interval.total_seconds() * 1000) == INTERVAL // 10  # the group just changed
        assert [(tp.topic_id, tp.partitions) for tp in r.assignment.topic_partitions] == [(tid, (0, 1, 2, 3))]

        # bad input: Apache's errors, the group unharmed
        r = await client.call(cg_heartbeat("m2", 0, names=("t",), owned={}, rebalance=REBALANCE, assignor="nope"))
        assert r.error_code == E.unsupported_assignor and "uniform, range" in r.error_message
        r = await client.call(cg_heartbeat("m2", 0, regex="(", owned={}, rebalance=REBALANCE))
        assert r.error_code == E.invalid_regular_expression
        r = await client.call(cg_heartbeat("m2", 0, regex="(", owned={}, rebalance=REBALANCE, group="fresh"))
        assert r.error_code == E.invalid_regular_expression and "fresh" not in broker.groups.groups  # no trace
        r = await client.call(cg_heartbeat("m2", 0, names=("t",), rebalance=REBALANCE))
        assert r.error_code == E.invalid_request
        assert (await client.call(cg_heartbeat("ghost", 3))).error_code == E.unknown_member_id
        assert (await client.call(cg_heartbeat("m1", 7))).error_code == E.fenced_member_epoch
        assert (await client.call(cg_heartbeat("x", 1, group="nope"))).error_code == E.group_id_not_found

        await trio.sleep(INTERVAL / 1000)  # stable for an interval: the configured interval again
        r = await client.call(cg_heartbeat("m1", 1))
        assert (r.error_code, int(r.heartbeat_interval.total_seconds() * 1000)) == (E.none, INTERVAL)

        d = (await client.call(ConsumerGroupDescribeRequest(group_ids=("w", "nope"),
                                                            include_authorized_operations=True))).groups
        assert (d[0].error_code, d[0].group_state, d[0].group_epoch, d[0].assignor_name) == \
            (E.none, "Stable", 1, "uniform")
        (m,) = d[0].members
        assert (m.member_id, m.member_epoch, m.subscribed_topic_names, m.member_type) == ("m1", 1, ("t",), 1)
        assert [(tp.topic_name, tp.partitions) for tp in m.assignment.topic_partitions] == [("t", (0, 1, 2, 3))]
        assert d[1].error_code == E.group_id_not_found

        # offsets: the member epoch is checked
        def commit(epoch: int) -> OffsetCommitRequest:
            return OffsetCommitRequest(group_id="w", generation_id_or_member_epoch=epoch, member_id="m1",
                                       group_instance_id=None, topics=(OffsetCommitRequestTopic(name="t", partitions=(
                                           OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                                        committed_leader_epoch=-1,
                                                                        committed_metadata=""),)),))
        assert (await client.call(commit(1))).topics[0].partitions[0].error_code == E.none
        assert (await client.call(commit(0))).topics[0].partitions[0].error_code == E.stale_member_epoch

        def fetch(epoch: int) -> OffsetFetchRequest:
            return OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id="w", member_id="m1", member_epoch=epoch,
                                                                      topics=(OffsetFetchRequestTopics(
                                                                          name="t", partition_indexes=(0,)),)),),
                                      require_stable=False)
        g = (await client.call(fetch(1))).groups[0]
        assert g.error_code == E.none and g.topics[0].partitions[0].committed_offset == 5
        assert (await client.call(fetch(9))).groups[0].error_code == E.stale_member_epoch

        # a transaction that added the group (TxnOffsetCommit is verified against it first)
        init = await client.call(build(codec.request_class(22, 4), {
            "transactional_id": "x", "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}))
        added = await client.call(build(codec.request_class(25, 3), {
            "transactional_id": "x", "producer_id": init.producer_id, "producer_epoch": init.producer_epoch,
            "group_id": "w"}))
        assert (init.error_code, added.error_code) == (E.none, E.none)
        txn = TxnOffsetCommitRequest(transactional_id="x", group_id="w", producer_id=init.producer_id,
                                     producer_epoch=init.producer_epoch,
                                     generation_id=0, member_id="m1", group_instance_id=None,
                                     topics=(TxnOffsetCommitRequestTopic(name="t", partitions=(
                                         TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=6,
                                                                         committed_leader_epoch=-1,
                                                                         committed_metadata=""),)),))
        r = await client.call(txn)
        assert r.topics[0].partitions[0].error_code == E.illegal_generation

        groups = (await client.call(ListGroupsRequest(states_filter=(), types_filter=("consumer",)))).groups
        assert [(x.group_id, x.group_state, x.group_type) for x in groups] == [("w", "Stable", "consumer")]
        assert (await client.call(ListGroupsRequest(states_filter=(), types_filter=("Classic",)))).groups == ()
        d = (await client.call(DescribeGroupsRequest(groups=("w",), include_authorized_operations=False))).groups
        assert d[0].group_state == "Dead"

        join = JoinGroupRequest(group_id="w", session_timeout=datetime.timedelta(seconds=10),
                                rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
                                group_instance_id=None, protocol_type="consumer",
                                protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),))
        assert (await client.call(join)).error_code == E.inconsistent_group_protocol

        r = await client.call(cg_heartbeat("m1", -1))
        assert (r.error_code, r.member_epoch) == (E.none, -1)
        d = (await client.call(ConsumerGroupDescribeRequest(group_ids=("w",), include_authorized_operations=False)))
        assert d.groups[0].group_state == "Empty"
