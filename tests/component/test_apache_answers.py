"""Answers ``make diff`` found different from Apache Kafka 4.4's, over the wire to a real
in-process broker (each was an entry of compat/diff/explanations.json): Metadata by topic id
at v10-12, DescribeCluster for controller endpoints, DescribeTopicPartitions' authorized
operations, CreateTopics naming a topic twice, JoinGroup/Heartbeat with an empty group id,
a JoinGroup refused for its session timeout, LeaveGroup of no group, and ReadShareGroupState
of a partition never initialised."""

from __future__ import annotations

import uuid

import trio
from kio.schema.errors import ErrorCode as E

from kaas.clock import TrioClock
from kaas.wire import codec
from kaas.wire.build import build
from tests.component.test_connection import open_broker_in, open_client

ALL_TOPIC_OPS = 3576  # every topic operation: the authoriser is off
UNKNOWN_ID = uuid.UUID("00000000-0000-0000-0000-0000000000aa")


def req(api_key: int, version: int, body: dict) -> object:
    return build(codec.request_class(api_key, version), body)


def join(version: int, group: str, session_timeout: int = 10_000) -> object:
    return req(11, version, {
        "group_id": group, "session_timeout": session_timeout, "rebalance_timeout": 10_000, "member_id": "",
        "group_instance_id": None, "protocol_type": "consumer", "reason": None,
        "protocols": [{"name": "range", "metadata": bytes.fromhex("000000000001000464672d61ffffffff")}]})


async def test_metadata_by_topic_id(shm_path, thread_safe_autojump_clock):
    """v10-11 carry topic ids but may not use them: the request is refused, INVALID_REQUEST
    per topic with its id echoed (not a closed connection); v12 looks the id up and
    answers UNKNOWN_TOPIC_ID with the id it was asked."""
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        broker.topics.create("t", 1)
        for version in (10, 11):
            r = await client.call(req(3, version, {
                "topics": [{"topic_id": UNKNOWN_ID, "name": None}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}))
            assert [(t.error_code, t.name, t.topic_id) for t in r.topics] == [(E.invalid_request, "", UNKNOWN_ID)]
            assert r.brokers == ()
        r = await client.call(req(3, 12, {
            "topics": [{"topic_id": UNKNOWN_ID, "name": None}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}))
        assert [(t.error_code, t.name, t.topic_id) for t in r.topics] == [(E.unknown_topic_id, None, UNKNOWN_ID)]
        known = broker.topics.get("t").topic_id
        r = await client.call(req(3, 12, {
            "topics": [{"topic_id": known, "name": None}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}))
        assert [(t.error_code, t.name, t.topic_id) for t in r.topics] == [(E.none, "t", known)]


async def test_describe_cluster_endpoint_types_and_topic_operations(shm_path, thread_safe_autojump_clock):
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        for version in (1, 2):
            for endpoint_type, code in ((2, E.mismatched_endpoint_type), (7, E.unsupported_endpoint_type)):
                r = await client.call(req(60, version, {"include_cluster_authorized_operations": False,
                                                        "endpoint_type": endpoint_type,
                                                        "include_fenced_brokers": False}))
                assert (r.error_code, r.cluster_id, r.brokers) == (code, "", ())
            r = await client.call(req(60, version, {"include_cluster_authorized_operations": False,
                                                    "endpoint_type": 1, "include_fenced_brokers": False}))
            assert r.error_code == E.none and r.cluster_id == broker.settings.cluster_id and r.brokers
        broker.topics.create("t", 2)
        r = await client.call(req(75, 0, {"topics": [{"name": "t"}, {"name": "absent"}],
                                          "response_partition_limit": 2000, "cursor": None}))
        assert {t.name: (t.error_code, t.topic_authorized_operations) for t in r.topics} == \
            {"t": (E.none, ALL_TOPIC_OPS), "absent": (E.unknown_topic_or_partition, ALL_TOPIC_OPS)}


async def test_create_topics_answers_a_name_named_twice_once(shm_path, thread_safe_autojump_clock):
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        topic = {"name": "dup", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
        r = await client.call(req(19, 7, {"topics": [topic, topic, {**topic, "name": "single"}],
                                          "timeout": 0, "validate_only": False}))
        assert sorted((t.name, t.error_code) for t in r.topics) == [("dup", E.invalid_request), ("single", E.none)]
        broker.topics.refresh()
        assert broker.topics.get("dup") is None and broker.topics.get("single") is not None


async def test_group_edge_answers(shm_path, thread_safe_autojump_clock):
    """An empty group id is INVALID_GROUP_ID (not NOT_COORDINATOR, which clients retry
    forever); a join refused for its session timeout leaves no group; LeaveGroup v3+ of no
    group answers NONE with UNKNOWN_MEMBER_ID per member (v0-2: at the top)."""
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        for version in (0, 6, 7):
            r = await client.call(join(version, ""))
            assert r.error_code == E.invalid_group_id
            assert r.protocol_name == (None if version >= 7 else "")
        r = await client.call(req(12, 4, {"group_id": "", "generation_id": 1, "member_id": "m-1",
                                          "group_instance_id": None}))
        assert r.error_code == E.invalid_group_id
        r = await client.call(join(7, "refused", session_timeout=1))
        assert r.error_code == E.invalid_session_timeout
        r = await client.call(req(15, 5, {"groups": ["refused"], "include_authorized_operations": False}))
        assert r.groups[0].group_state == "Dead"
        r = await client.call(req(16, 4, {"states_filter": []}))
        assert "refused" not in {g.group_id for g in r.groups}
        r = await client.call(req(13, 5, {"group_id": "nobody", "members": [
            {"member_id": "m-1", "group_instance_id": None, "reason": None}]}))
        assert r.error_code == E.none
        assert [(m.member_id, m.error_code) for m in r.members] == [("m-1", E.unknown_member_id)]
        r = await client.call(req(13, 2, {"group_id": "nobody", "member_id": "m-1"}))
        assert r.error_code == E.unknown_member_id


async def test_read_share_state_of_a_partition_never_initialised(shm_path, thread_safe_autojump_clock):
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        broker.topics.create("t", 1)
        topic_id = broker.topics.get("t").topic_id
        while not broker.admin.serves_topic("t", 1):  # the partition's leader answers for its share state
            await trio.sleep(0.01)
        r = await client.call(req(84, 0, {"group_id": "sg", "topics": [
            {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": 0}]}]}))
        p = r.results[0].partitions[0]
        assert (p.error_code, p.start_offset, p.state_batches) == (E.invalid_request, 0, ())
