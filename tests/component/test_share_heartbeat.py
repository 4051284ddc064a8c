"""ShareGroupHeartbeat (76) over the wire to a real broker in-process (trio's MockClock):
Apache 4.4's checks in its order (group READ, a member id of 1 to 36 characters, topic
DESCRIBE, then the request's own checks, before any group is looked at), a null rack
leaving the member's rack as it is, the retry with the previous epoch after an answer
lost, which the failpoint ``share_heartbeat.before_response`` makes by closing the
connection instead of answering."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from kio.schema.errors import ErrorCode as E
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from kaas import failpoints
from kaas.broker import Broker
from kaas.coord.group.share.runtime import INITIALIZED_INTERVAL_MS
from tests.component.test_connection import Client, open_client
from tests.component.test_share_fetch import broker_with_topic


@asynccontextmanager
async def connected(broker: Broker) -> AsyncIterator[Client]:
    async with trio.open_nursery() as nursery, open_client(broker, nursery) as client:
        yield client
        nursery.cancel_scope.cancel()


def hb(member: str, epoch: int, *, group: str = "g", rack: str | None = None,
       topics: tuple[str, ...] | None = None) -> ShareGroupHeartbeatRequest:
    return ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch, rack_id=rack,
                                      subscribed_topic_names=topics)


async def test_apaches_checks_and_a_null_rack(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, _tid), \
            connected(broker) as client:
        for req, msg in [(hb("m" * 37, 0, topics=("q",)), "Invalid member id in the request."),
                         (hb("", 0, topics=("q",)), "Invalid member id in the request."),
                         (hb("  ", 0, topics=("q",)), "MemberId can't be empty."),
                         (hb("m1", 0, group="", topics=("q",)), "GroupId can't be empty."),
                         (hb("m1", 0, group=" ", topics=("q",)), "GroupId can't be empty."),
                         (hb("m1", 0, rack="", topics=("q",)), "RackId can't be empty."),
                         (hb("m1", 0), "SubscribedTopicNames must be set in first request."),
                         (hb("m1", -2), "MemberEpoch is invalid.")]:
            r = await client.call(req)
            assert (r.error_code, r.error_message, r.member_id) == (E.invalid_request, msg, None), req
        assert not broker.groups.store.path("").exists() and "" not in broker.groups.groups
        assert "g" not in broker.groups.groups or broker.groups.groups["g"].share is None
        r = await client.call(hb("m" * 36, 0, rack="r1", topics=("q",)))
        assert (r.error_code, r.member_epoch) == (E.none, 1)
        r = await client.call(hb("m" * 36, 1))  # rack null: unchanged
        assert r.error_code == E.none
        (d,) = (await client.call(ShareGroupDescribeRequest(group_ids=("g",),
                                                            include_authorized_operations=False))).groups
        assert [(m.member_id, m.rack_id) for m in d.members] == [("m" * 36, "r1")]


@pytest.fixture
def no_failpoints():
    yield
    failpoints.set_in_process({})


async def test_a_lost_answer_and_the_retry_with_the_previous_epoch(shm_path, thread_safe_autojump_clock,
                                                                   no_failpoints):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, _tid):
        async with connected(broker) as client:
            assert (await client.call(hb("m1", 0, topics=("q",)))).member_epoch == 1
            r = await client.call(hb("m1", 1))  # initialized: the partition assigned at epoch 2
            assert (r.member_epoch, [tp.partitions for tp in r.assignment.topic_partitions]) == (2, [(0,)])
            assert (await client.call(hb("m2", 0, topics=("q",)))).member_epoch == 3
            failpoints.set_in_process({"share_heartbeat.before_response": {
                "action": "drop", "count": 1, "match": {"member_epoch": 2, "moved": True}}})
            await client.send(hb("m1", 2))
            assert not await client._fill(4), "the connection closes: no answer"
        g = broker.groups.shares.describe("g")
        assert {m["member_id"]: m["member_epoch"] for m in g["members"]} == {"m1": 3, "m2": 3}
        async with connected(broker) as client:
            r = await client.call(hb("m1", 2))  # the epoch it had: accepted, the current one answered
            assert (r.error_code, r.member_epoch, r.assignment) == (E.none, 3, None)
            r = await client.call(hb("m1", 2, topics=("q",)))  # a full request: the assignment too
            assert (r.error_code, r.member_epoch) == (E.none, 3) and r.assignment is not None
            assert (await client.call(hb("m1", 1))).error_code == E.fenced_member_epoch
        assert broker.groups.shares.describe("g")["group_epoch"] == 3


async def test_a_member_whose_heartbeat_initialized_partitions_comes_back_at_once(shm_path,
                                                                                   thread_safe_autojump_clock):
    """The heartbeat that initializes partitions answers a short interval: the member's
    next heartbeat, which assigns them, comes a moment later, not a whole
    share.heartbeat.interval.ms (5 s) later; every other answer carries the interval."""
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, _tid), \
            connected(broker) as client:
        r = await client.call(hb("m1", 0, topics=("q",)))
        assert (r.error_code, r.member_epoch, r.heartbeat_interval.total_seconds() * 1000) == \
            (E.none, 1, INITIALIZED_INTERVAL_MS)
        assert [tp.partitions for tp in r.assignment.topic_partitions] == []
        r = await client.call(hb("m1", 1))
        assert (r.member_epoch, [tp.partitions for tp in r.assignment.topic_partitions]) == (2, [(0,)])
        assert r.heartbeat_interval.total_seconds() == 5
        r = await client.call(hb("m2", 0, topics=("q",)))  # nothing left to initialize
        assert (r.member_epoch, r.heartbeat_interval.total_seconds()) == (3, 5)
