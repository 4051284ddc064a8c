"""OffsetCommit and TxnOffsetCommit to a group that does not exist, over the wire to a
real in-process broker, every version kaas serves: Apache 4.4's answers
(``OffsetMetadataManager.validateOffsetCommit`` and ``validateTransactionalOffsetCommit``).
A generation (member epoch) >= 0 is GROUP_ID_NOT_FOUND where the version knows that
error (OffsetCommit v9+, TxnOffsetCommit v6+), ILLEGAL_GENERATION before, and the group
is not made; a negative generation makes a simple group and commits."""

from __future__ import annotations

import pytest
import trio
from kio.schema.errors import ErrorCode as E

from kaas.clock import TrioClock
from kaas.handlers import offset_commit, txn_offset_commit
from kaas.wire import codec
from kaas.wire.build import build
from tests.component.test_connection import open_broker_in, open_client


def offset_commit_req(version: int, group: str, generation: int, topic_id: object = None) -> object:
    """A commit of t-0 (by name, or from v10 by ``topic_id``)."""
    return build(codec.request_class(offset_commit.API_KEY, version), {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": "m1" if generation >= 0 else "",
        "group_instance_id": None, "retention_time": -1, "topics": [{"name": "t", "topic_id": topic_id, "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1, "committed_metadata": ""}]}]})


def txn_offset_commit_req(version: int, group: str, generation: int, pid: int, epoch: int) -> object:
    return build(codec.request_class(txn_offset_commit.API_KEY, version), {
        "transactional_id": "x", "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": generation, "member_id": "m1", "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 6, "committed_leader_epoch": -1, "committed_metadata": ""}]}]})


@pytest.mark.parametrize("version", range(offset_commit.VERSIONS[0], offset_commit.VERSIONS[1] + 1))
async def test_offset_commit_with_a_generation_to_no_group(shm_path, thread_safe_autojump_clock, version):
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        broker.topics.create("t", 1)
        tid = broker.topics.get("t").topic_id

        def req(group: str, generation: int) -> object:
            return offset_commit_req(version, group, generation, tid)

        for generation in (0, 3):
            r = await client.call(req("nobody", generation))
            want = E.group_id_not_found if version >= 9 else E.illegal_generation
            assert r.topics[0].partitions[0].error_code == want
            assert "nobody" not in broker.groups.groups and not broker.groups.store.path("nobody").exists()
        # a read of the group (which may keep an empty group in memory) does not make it one
        broker.groups.entry("nobody")
        r = await client.call(req("nobody", 1))
        assert r.topics[0].partitions[0].error_code == (E.group_id_not_found if version >= 9 else E.illegal_generation)
        # a negative generation makes a simple group, and commits
        r = await client.call(req("simple", -1))
        assert r.topics[0].partitions[0].error_code == E.none
        assert broker.groups.store.path("simple").exists()
        await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("version", range(3, txn_offset_commit.VERSIONS[1] + 1))
async def test_txn_offset_commit_with_a_generation_to_no_group(shm_path, thread_safe_autojump_clock, version):
    """TxnOffsetCommit v3+ carries a generation: >= 0 to no group is ILLEGAL_GENERATION
    below v6 (GROUP_ID_NOT_FOUND from v6, which kaas does not serve yet)."""
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        broker.topics.create("t", 1)
        # a transaction that added the group (TxnOffsetCommit is verified against it first)
        init = await client.call(build(codec.request_class(22, 4), {
            "transactional_id": "x", "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}))
        assert init.error_code == E.none
        unadded = await client.call(txn_offset_commit_req(version, "nobody", 2, init.producer_id, init.producer_epoch))
        # KIP-890, as Apache: v4 only allows the answer TRANSACTION_ABORTABLE; v5 (TV2) adds
        # the group itself, and then finds the generation wrong
        assert unadded.topics[0].partitions[0].error_code == (
            E.illegal_generation if version >= 5 else E.transaction_abortable if version >= 4
            else E.invalid_txn_state)
        added = await client.call(build(codec.request_class(25, 3), {
            "transactional_id": "x", "producer_id": init.producer_id, "producer_epoch": init.producer_epoch,
            "group_id": "nobody"}))
        assert added.error_code == E.none
        r = await client.call(txn_offset_commit_req(version, "nobody", 2, init.producer_id, init.producer_epoch))
        assert r.topics[0].partitions[0].error_code == \
            (E.group_id_not_found if version >= 6 else E.illegal_generation)
        assert not broker.groups.store.path("nobody").exists()
