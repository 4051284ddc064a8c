"""Offset retention on a real ``Broker`` (``kaas.coord.group.expiry`` run by its own loop,
``kaas.tasks.offset_expiry``) with its timers on trio's MockClock: a classic group's
offsets go once it has been Empty for ``offsets.retention.minutes`` (1 minute here) and
the group with them; one that comes back in time keeps them; standalone commits go by
their commit time; the time a group became Empty survives a move to a new coordinator;
a consumer group loses the offsets of topics it no longer subscribes to; a share group is
never touched; and each expiry is logged once with its reason."""

from __future__ import annotations

import struct
from contextlib import asynccontextmanager

import structlog.testing
import trio
from kio.schema.errors import ErrorCode

from kaas.clock import TrioClock
from kaas.coord.group.coordinator import GroupCoordinator
from kaas.coord.group.expiry import expire_offsets
from kaas.domain.groups.consumer.group import Heartbeat
from kaas.domain.groups.share.group import ShareHeartbeat
from kaas.storage.offset_store import Committed
from tests.component.test_connection import open_broker_in

RETENTION_S, CHECK_S, SESSION = 60, 5, 6_000


@asynccontextmanager
async def open_broker(path, clock):
    async with open_broker_in(path, clock=TrioClock(clock), offsets_retention_minutes=RETENTION_S // 60,
                              offsets_retention_check_interval_ms=CHECK_S * 1000,
                              group_initial_rebalance_delay_ms=0, group_consumer_session_timeout_ms=45_000,
                              group_consumer_heartbeat_interval_ms=5_000) as (broker, nursery):
        yield broker, nursery


def subscription(*topics: str) -> bytes:
    """A consumer protocol Subscription v0 naming ``topics``."""
    body = struct.pack(">hi", 0, len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    return body + struct.pack(">i", -1)


async def join(groups: GroupCoordinator, group: str, *topics: str) -> tuple[str, int]:
    """A one-member classic generation of ``group`` subscribed to ``topics``: (member, generation)."""
    reply = await groups.join(group, member_id="", group_instance_id=None, client_id="c", client_host="h",
                              session_timeout_ms=SESSION, rebalance_timeout_ms=SESSION, protocol_type="consumer",
                              protocols=[("range", subscription(*topics))], require_known_member=False)
    member, gen = reply.member_id, reply.generation_id
    sync = await groups.sync(group, member_id=member, group_instance_id=None, generation_id=gen,
                             assignments=[(member, b"")], protocol_type="consumer", protocol_name="range")
    assert sync.error_code == ErrorCode.none
    return member, gen


async def commit(groups: GroupCoordinator, group: str, member: str = "", gen: int = -1, topic: str = "t") -> None:
    now = groups.now()  # the commit time, as the OffsetCommit handler stamps it
    code = await groups.commit(group, member_id=member, group_instance_id=None, generation_id=gen,
                               offsets={(topic, 0): Committed(5, timestamp=now),
                                        (topic, 1): Committed(7, timestamp=now)})
    assert code == ErrorCode.none


async def left_empty(groups: GroupCoordinator, group: str) -> tuple[str, int]:
    """A one-member generation of ``group`` (on topic ``t``) that committed, then left: Empty.
    Returns the member that left, and its generation."""
    member, gen = await join(groups, group, "t")
    await commit(groups, group, member, gen)
    await groups.leave(group, [(member, None)])
    return member, gen


async def committed(groups: GroupCoordinator, group: str) -> dict[tuple[str, int], int]:
    got, _ = await groups.fetch(group, None, False)
    return {tp: c.offset for tp, c in got.items() if c is not None}


def listed(groups: GroupCoordinator) -> set[str]:
    return {g["group_id"] for g in groups.list_groups()}


async def heartbeat_forever(groups: GroupCoordinator, group: str, member: str, gen: int) -> None:
    while True:
        assert groups.heartbeat(group, member, None, gen) == ErrorCode.none
        await trio.sleep(SESSION / 3000)


async def test_an_empty_group_loses_its_offsets_after_the_retention_and_leaves_the_list(shm_path,
                                                                                      autojump_clock):
    async with open_broker(shm_path, autojump_clock) as (broker, _):
        groups = broker.groups
        member, gen = await join(groups, "g", "t")
        await commit(groups, "g", member, gen)
        with structlog.testing.capture_logs() as logs:
            await trio.sleep(RETENTION_S * 2)  # no heartbeats: the member's session ends, the group is Empty
        assert await committed(groups, "g") == {} and "g" not in listed(groups)
        assert not groups.store.path("g").exists()
        expired = [x for x in logs if x["event"] == "group_offsets_expired"]
        assert len(expired) == 1 and expired[0]["group"] == "g" and expired[0]["group_deleted"]
        assert expired[0]["partitions"] == 2 and "has been Empty for" in expired[0]["reason"]


async def test_a_group_that_comes_back_before_the_retention_keeps_its_offsets(shm_path, autojump_clock):
    async with open_broker(shm_path, autojump_clock) as (broker, nursery):
        groups = broker.groups
        await left_empty(groups, "g")
        await trio.sleep(RETENTION_S - 2 * CHECK_S)  # Empty, not yet long enough
        assert await committed(groups, "g") == {("t", 0): 5, ("t", 1): 7}
        member, gen = await join(groups, "g", "t")  # back, and stays
        nursery.start_soon(heartbeat_forever, groups, "g", member, gen)
        await trio.sleep(RETENTION_S * 3)
        assert await committed(groups, "g") == {("t", 0): 5, ("t", 1): 7} and "g" in listed(groups)


async def test_the_time_a_group_emptied_survives_a_new_coordinator(shm_path, autojump_clock):
    async with open_broker(shm_path, autojump_clock) as (broker, _):
        groups = broker.groups
        await left_empty(groups, "g")
        emptied = broker.clock.wall_ms()
        await trio.sleep(2)  # the timer loop writes the Empty membership
        groups.unload("g")  # the group moves: the next coordinator knows only its file
        await trio.sleep(RETENTION_S / 2)
        assert groups.entry("g").group.state_since_ms == emptied  # loaded again, as the file says
        assert await committed(groups, "g") == {("t", 0): 5, ("t", 1): 7}
        await trio.sleep(RETENTION_S / 2 + CHECK_S)  # a minute after it emptied, not after the move
        assert await committed(groups, "g") == {} and "g" not in listed(groups)


async def test_standalone_commits_expire_by_their_commit_time(shm_path, autojump_clock):
    async with open_broker(shm_path, autojump_clock) as (broker, _):
        groups = broker.groups
        await commit(groups, "solo")
        await trio.sleep(RETENTION_S / 2)
        await commit(groups, "solo", topic="other")  # later commits, kept longer
        with structlog.testing.capture_logs() as logs:
            await trio.sleep(RETENTION_S / 2 + CHECK_S)
        assert await committed(groups, "solo") == {("other", 0): 5, ("other", 1): 7} and "solo" in listed(groups)
        (line,) = [x for x in logs if x["event"] == "group_offsets_expired"]
        assert line["topics"] == ["t"] and not line["group_deleted"] and "without group membership" in line["reason"]
        await trio.sleep(RETENTION_S / 2)
        assert await committed(groups, "solo") == {} and "solo" not in listed(groups)


async def test_a_consumer_group_keeps_what_it_subscribes_to(shm_path, autojump_clock):
    async with open_broker(shm_path, autojump_clock) as (broker, nursery):
        groups = broker.groups
        reply, _ = await groups.consumers.heartbeat("cg", Heartbeat("m", 0, rebalance_timeout_ms=5_000,
                                                                    subscribed_topic_names=("t",), owned=()),
                                                    api_version=1)
        epoch = reply.member_epoch

        async def beat() -> None:
            while True:
                await trio.sleep(4)
                r, _ = await groups.consumers.heartbeat("cg", Heartbeat("m", epoch, owned=None), api_version=1)
                assert r.error_code == ErrorCode.none

        nursery.start_soon(beat)
        for topic in ("t", "other"):
            assert await groups.commit("cg", member_id="m", group_instance_id=None, generation_id=epoch,
                                       offsets={(topic, 0): Committed(3, timestamp=groups.now())}) == ErrorCode.none
        await trio.sleep(RETENTION_S + CHECK_S)
        assert await committed(groups, "cg") == {("t", 0): 3} and "cg" in listed(groups)


async def test_a_pass_changes_nothing_early_and_never_touches_a_share_group(shm_path, autojump_clock):
    async with open_broker(shm_path, autojump_clock) as (broker, _):
        groups = broker.groups
        await commit(groups, "solo")
        before = groups.store.path("solo").read_bytes()
        assert await expire_offsets(groups) == 0 and groups.store.path("solo").read_bytes() == before
        # a share group (empty once its member left) stays, whatever the time
        reply, _ = await groups.shares.heartbeat("sg", ShareHeartbeat("m", 0, subscribed_topic_names=("t",)))
        assert reply.error_code == ErrorCode.none
        await groups.shares.heartbeat("sg", ShareHeartbeat("m", -1))
        await trio.sleep(RETENTION_S * 3)
        assert "sg" in listed(groups) and groups.store.path("sg").exists()
        assert "solo" not in listed(groups)
