"""The share groups' admin APIs over a real broker in-process, through its connection and
dispatch (on trio's MockClock): DescribeShareGroupOffsets (90) with start offset, leader
epoch and lag, AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92) refused while
the group has members and applied by the partition's leader once it is empty, the leader's
share-state RPCs (83/84/86/87), and DeleteGroups, ListGroups and GROUP configs for a share
group (Apache's errors throughout)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from kio.schema.alter_share_group_offsets.v0 import request as alter0
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_share_group_offsets.v0 import request as delete0
from kio.schema.delete_share_group_state.v0 import request as dss
from kio.schema.describe_share_group_offsets.v0 import request as describe0
from kio.schema.describe_share_group_offsets.v1 import request as describe1
from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0 import request as iss
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.read_share_group_state.v0 import request as rs

from kaas.broker import Broker
from kaas.domain.groups.share.group import ShareHeartbeat
from kaas.domain.share_partition import Delta, Persisted, ShareLimits
from kaas.errors import KaasError
from kaas.storage import share_state
from kaas.storage.offset_store import Committed
from tests.component.share_calls import acquired, call, fetch_req, produce
from tests.component.test_connection import Client, open_client
from tests.component.test_group_configs import configs_of
from tests.component.test_share_fetch import broker_with_topic

ACCEPT = 1
E = ErrorCode


@asynccontextmanager
async def admin(shm_path, clock) -> AsyncIterator[tuple[Broker, uuid.UUID, Client]]:
    """A broker, topic "q" of 2 partitions (groups "g" and "other" start at the earliest
    offset), and an admin client's connection."""
    async with broker_with_topic(shm_path, clock, partitions=2) as (broker, tid):
        async with trio.open_nursery() as nursery, open_client(broker, nursery) as client:
            yield broker, tid, client
            nursery.cancel_scope.cancel()


def describe(group: str, topics: dict[str, list[int]] | None, version: int = 1) -> Any:
    m = describe1 if version == 1 else describe0
    return m.DescribeShareGroupOffsetsRequest(groups=(m.DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=None if topics is None else tuple(
            m.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(ps)) for t, ps in topics.items())),))


def offsets(resp: Any) -> dict[tuple[str, int], tuple[int, ...]]:
    """(topic, partition) -> (start offset, leader epoch[, lag]) of the only group."""
    (g,) = resp.groups
    assert g.error_code == E.none, g
    return {(t.topic_name, p.partition_index): (p.start_offset, p.leader_epoch, *([p.lag] if hasattr(p, "lag") else []))
            for t in g.topics for p in t.partitions if p.error_code == E.none}


def alter(group: str, topics: dict[str, dict[int, int]]) -> Any:
    return alter0.AlterShareGroupOffsetsRequest(group_id=group, topics=tuple(
        alter0.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=tuple(
            alter0.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=s) for p, s in ps.items()))
        for t, ps in topics.items()))


def delete_offsets(group: str, *topics: str) -> Any:
    return delete0.DeleteShareGroupOffsetsRequest(group_id=group, topics=tuple(
        delete0.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics))


def codes(resp: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.topic_name, p.partition_index): p.error_code for t in resp.responses for p in t.partitions}


async def leave(broker: Broker, group: str, member: str) -> None:
    reply, _ = await broker.groups.shares.heartbeat(group, ShareHeartbeat(member, -1))
    assert reply.error_code == E.none, reply


def has_state(broker: Broker, group: str, partition: int = 0) -> bool:
    return share_state.has_state(broker.layout.partition_dir("q", partition) / share_state.DIR, group)


async def test_describe_gives_start_epoch_and_lag_of_each_share_partition(shm_path, thread_safe_autojump_clock):
    async with admin(shm_path, thread_safe_autojump_clock) as (broker, tid, client):
        await produce(broker, "q", 10)
        assert acquired(await call(broker, fetch_req("m1", 0, tid))) == [(0, 9, 1)]
        await call(broker, fetch_req("m1", 1, tid, acks={0: [(0, 3, (ACCEPT,))]}, partitions=()))
        epoch = broker.partitions[("q", 0)].epoch
        # all topics: the one share partition with state; lag = high watermark 10 - start 4
        # - nothing complete past it (4-9 are acquired, not done)
        assert offsets(await client.call(describe("g", None))) == {("q", 0): (4, epoch, 6)}
        # named: a partition without state and an unknown topic are -1s, not errors (Apache)
        got = await client.call(describe("g", {"q": [0, 1], "nope": [0]}))
        assert offsets(got) == {("q", 0): (4, epoch, 6), ("q", 1): (-1, -1, -1), ("nope", 0): (-1, -1, -1)}
        assert {t.topic_name: t.topic_id for t in got.groups[0].topics} == {"q": tid, "nope": None}
        # accept 6-7 out of order: they are done though the start cannot pass 4-5
        await call(broker, fetch_req("m1", 2, tid, acks={0: [(6, 7, (ACCEPT,))]}, partitions=()))
        assert offsets(await client.call(describe("g", None))) == {("q", 0): (4, epoch, 4)}
        assert offsets(await client.call(describe("g", None, version=0))) == {("q", 0): (4, epoch)}
        # the leader's whole state (ReadShareGroupState): what kaas groups describe shows
        r = await client.call(rs.ReadShareGroupStateRequest(group_id="g", topics=(rs.ReadStateData(
            topic_id=tid, partitions=(rs.PartitionData(partition=0, leader_epoch=-1),
                                      rs.PartitionData(partition=1, leader_epoch=-1))),)))
        p0, p1 = r.results[0].partitions
        assert (p0.error_code, p0.start_offset) == (E.none, 4)
        assert [(b.first_offset, b.last_offset, b.delivery_state) for b in p0.state_batches] == \
            [(4, 5, 1), (6, 7, 2), (8, 9, 1)]
        assert (p1.error_code, p1.start_offset, p1.state_batches) == (E.invalid_request, 0, ())  # never initialised
        # an unknown group has nothing to describe
        assert offsets(await client.call(describe("nobody", None))) == {}


async def test_alter_is_refused_with_members_and_restarts_the_share_partition(shm_path, thread_safe_autojump_clock):
    async with admin(shm_path, thread_safe_autojump_clock) as (broker, tid, client):
        await produce(broker, "q", 10)
        assert acquired(await call(broker, fetch_req("m1", 0, tid))) == [(0, 9, 1)]
        r = await client.call(alter("g", {"q": {0: 2}}))
        assert (r.error_code, r.responses) == (E.non_empty_group, ())
        await leave(broker, "g", "m1")
        r = await client.call(alter("g", {"q": {0: 2, 1: 7, 5: 0}, "nope": {0: 1}}))
        assert r.error_code == E.none
        assert codes(r) == {("q", 0): E.none, ("q", 1): E.none, ("q", 5): E.unknown_topic_or_partition,
                            ("nope", 0): E.unknown_topic_or_partition}
        assert offsets(await client.call(describe("g", None))) == {
            ("q", 0): (2, broker.partitions[("q", 0)].epoch, 8), ("q", 1): (7, broker.partitions[("q", 1)].epoch, 0)}
        # the released records of m1 are gone with the old state: a new member starts at 2
        assert acquired(await call(broker, fetch_req("m2", 0, tid))) == [(2, 9, 1)]
        # -1 (Apache's uninitialised) removes the state: share.auto.offset.reset applies again
        await leave(broker, "g", "m2")
        assert codes(await client.call(alter("g", {"q": {0: -1}}))) == {("q", 0): E.none}
        assert not has_state(broker, "g") and has_state(broker, "g", 1)
        assert acquired(await call(broker, fetch_req("m3", 0, tid))) == [(0, 9, 1)]


async def test_alter_before_the_first_member_makes_the_share_group(shm_path, thread_safe_autojump_clock):
    """Apache 4.2+ (KAFKA-19662): AlterShareGroupOffsets to a group id no group has makes
    an empty share group, its altered partitions initialized; the first member is assigned
    them on its first heartbeat and starts at the new offsets. A group of another type is
    still GROUP_ID_NOT_FOUND."""
    async with admin(shm_path, thread_safe_autojump_clock) as (broker, tid, client):
        await produce(broker, "q", 10)
        r = await client.call(alter("fresh", {"q": {0: 6}}))
        assert (r.error_code, codes(r)) == (E.none, {("q", 0): E.none})
        assert broker.groups.store.path("fresh").exists()
        d = broker.groups.shares.describe("fresh")
        assert (d["group_state"], d["group_epoch"], d["members"]) == ("Empty", 0, [])
        assert broker.groups.groups["fresh"].share.initialized == {str(tid): frozenset({0})}
        listed = (await client.call(ListGroupsRequest(states_filter=(), types_filter=("share",)))).groups
        assert ("fresh", "share", "Empty") in {(g.group_id, g.group_type, g.group_state) for g in listed}
        assert offsets(await client.call(describe("fresh", {"q": [0]}))) == {
            ("q", 0): (6, broker.partitions[("q", 0)].epoch, 4)}
        # a member joining later: partition 0 (initialized) assigned at once, read from 6
        reply, _ = await broker.groups.shares.heartbeat("fresh", ShareHeartbeat("m1", 0, subscribed_topic_names=("q",)))
        assert (reply.error_code, reply.assignment) == (E.none, {str(tid): frozenset({0})})
        assert acquired(await call(broker, fetch_req("m1", 0, tid, group="fresh"))) == [(6, 9, 1)]
        # an existing group of another type: not a share group
        await broker.groups.commit("classic", member_id="", group_instance_id=None, generation_id=-1,
                                   offsets={("q", 0): Committed(1, -1, "", 0)})
        r = await client.call(alter("classic", {"q": {0: 2}}))
        assert (r.error_code, r.error_message) == (E.group_id_not_found, "Group classic is not a share group.")


async def test_delete_offsets_removes_the_state_of_empty_groups(shm_path, thread_safe_autojump_clock):
    async with admin(shm_path, thread_safe_autojump_clock) as (broker, tid, client):
        await produce(broker, "q", 4)
        await call(broker, fetch_req("m1", 0, tid, acks={}))
        await call(broker, fetch_req("m1", 1, tid, acks={0: [(0, 3, (ACCEPT,))]}, partitions=()))
        r = await client.call(delete_offsets("g", "q"))
        assert (r.error_code, r.responses) == (E.non_empty_group, ())
        await leave(broker, "g", "m1")
        r = await client.call(delete_offsets("g", "q", "nope"))
        assert r.error_code == E.none
        assert {t.topic_name: (t.error_code, t.topic_id) for t in r.responses} == {
            "q": (E.none, tid), "nope": (E.unknown_topic_or_partition, None)}
        assert not has_state(broker, "g")
        assert offsets(await client.call(describe("g", None))) == {}
        # nothing left to delete: Apache's UNKNOWN_TOPIC_OR_PARTITION
        r = await client.call(delete_offsets("g", "q"))
        assert [(t.topic_name, t.error_code) for t in r.responses] == [("q", E.unknown_topic_or_partition)]
        # the next member starts where share.auto.offset.reset says (earliest)
        assert acquired(await call(broker, fetch_req("m2", 0, tid))) == [(0, 3, 1)]


async def test_delete_groups_of_a_share_group_takes_its_share_state(shm_path, thread_safe_autojump_clock):
    async with admin(shm_path, thread_safe_autojump_clock) as (broker, tid, client):
        await produce(broker, "q", 3)
        await call(broker, fetch_req("m1", 0, tid))
        await call(broker, fetch_req("m1", 0, tid, group="other", partitions=(0, 1)))
        listed = (await client.call(ListGroupsRequest(states_filter=(), types_filter=("share",)))).groups
        assert sorted((g.group_id, g.group_type, g.group_state) for g in listed) == [
            ("g", "share", "Stable"), ("other", "share", "Stable")]
        r = await client.call(DeleteGroupsRequest(groups_names=("g",)))
        assert [(x.group_id, x.error_code) for x in r.results] == [("g", E.non_empty_group)]
        await leave(broker, "g", "m1")
        r = await client.call(DeleteGroupsRequest(groups_names=("g", "g-unknown")))
        assert [(x.group_id, x.error_code) for x in r.results] == [("g", E.none), ("g-unknown", E.group_id_not_found)]
        assert not has_state(broker, "g") and has_state(broker, "other")
        listed = (await client.call(ListGroupsRequest(states_filter=(), types_filter=("share",)))).groups
        assert [g.group_id for g in listed] == ["other"]
        # its group configs stay, as Apache keeps them
        assert (await configs_of(client, "g"))["share.auto.offset.reset"][0] == "earliest"


async def test_the_share_state_rpcs_are_the_leaders_and_for_brokers(shm_path, thread_safe_autojump_clock):
    async with admin(shm_path, thread_safe_autojump_clock) as (broker, tid, client):
        await produce(broker, "q", 5)
        r = await client.call(iss.InitializeShareGroupStateRequest(group_id="x", topics=(iss.InitializeStateData(
            topic_id=tid, partitions=(iss.PartitionData(partition=0, state_epoch=0, start_offset=3),
                                      iss.PartitionData(partition=9, state_epoch=0, start_offset=3))),
            iss.InitializeStateData(topic_id=uuid.uuid4(), partitions=(
                iss.PartitionData(partition=0, state_epoch=0, start_offset=3),)))))
        assert [[(p.partition, p.error_code) for p in t.partitions] for t in r.results] == [
            [(0, E.none), (9, E.unknown_topic_or_partition)], [(0, E.unknown_topic_or_partition)]]
        assert acquired(await call(broker, fetch_req("m", 0, tid, group="x"))) == [(3, 4, 1)]
        r = await client.call(dss.DeleteShareGroupStateRequest(group_id="x", topics=(dss.DeleteStateData(
            topic_id=tid, partitions=(dss.PartitionData(partition=0), dss.PartitionData(partition=1))),)))
        assert [(p.partition, p.error_code) for p in r.results[0].partitions] == [(0, E.none), (1, E.none)]
        assert not has_state(broker, "x")


async def test_a_corrupt_share_state_is_described_unknown_and_repaired_by_alter(shm_path, thread_safe_autojump_clock):
    async with admin(shm_path, thread_safe_autojump_clock) as (broker, tid, client):
        await produce(broker, "q", 3)
        await call(broker, fetch_req("m1", 0, tid))
        await leave(broker, "g", "m1")
        snap = share_state.snapshot_path(broker.layout.partition_dir("q", 0) / share_state.DIR, "g")
        snap.write_bytes(b"garbage")
        broker.shares.close()  # a new leader's memory: the files are the state
        # the leader answers KAFKA_STORAGE_ERROR; Apache describes what it cannot read as -1
        assert offsets(await client.call(describe("g", None))) == {("q", 0): (-1, -1, -1)}
        assert snap.read_bytes() == b"garbage"  # never reset by a read
        # an operator's new start offset replaces it
        assert codes(await client.call(alter("g", {"q": {0: 1}}))) == {("q", 0): E.none}
        assert acquired(await call(broker, fetch_req("m2", 0, tid))) == [(1, 2, 1)]


async def test_a_share_group_has_no_committed_offsets(shm_path, thread_safe_autojump_clock):
    async with admin(shm_path, thread_safe_autojump_clock) as (broker, tid, client):
        await call(broker, fetch_req("m1", 0, tid))  # "g" is a share group with a member
        groups = broker.groups
        assert await groups.commit("g", member_id="", group_instance_id=None, generation_id=-1,
                                   offsets={("q", 0): Committed(1)}) == E.group_id_not_found
        with pytest.raises(KaasError) as err:
            await groups.fetch("g", [("q", 0)], False)
        assert err.value.code == E.group_id_not_found
        assert (await groups.delete_offsets("g", [("q", 0)]))[0] == E.group_id_not_found
        assert groups.groups["g"].offsets is None or not groups.groups["g"].offsets.offsets


async def test_authorisation_of_the_share_admin_apis(tmp_path):
    """Apache's operations: DESCRIBE on the group and topics (90), READ (91), DELETE on the
    group and READ on topics (92), CLUSTER_ACTION for the share-state RPCs."""
    from kaas.domain.acl import Operation as Op
    from tests.component.test_acls import ADMIN, ALICE, G, creation, grant, open_broker
    from tests.component.test_acls import open_client as client_as

    async with open_broker(tmp_path) as (broker, nursery), client_as(broker, nursery, ADMIN) as root, \
            client_as(broker, nursery, ALICE) as alice:
        meta, (err, _m) = await broker.admin.create_topic("q", 1, {})
        assert err == E.none and meta is not None
        (g,) = (await alice.call(describe("g", {"q": [0]}))).groups
        assert g.error_code == E.group_authorization_failed
        assert (await alice.call(alter("g", {"q": {0: 1}}))).error_code == E.group_authorization_failed
        assert (await alice.call(delete_offsets("g", "q"))).error_code == E.group_authorization_failed
        await grant(root, creation(G, "g", Op.DESCRIBE), creation(G, "g", Op.READ), creation(G, "g", Op.DELETE))
        (g,) = (await alice.call(describe("g", {"q": [0]}))).groups
        assert [(p.error_code, p.start_offset) for t in g.topics for p in t.partitions] == \
            [(E.topic_authorization_failed, -1)]
        # no such group: made (Apache 4.2+ asks its coordinator with no topic allowed, too)
        r = await alice.call(alter("g", {"q": {0: 1}}))
        assert (r.error_code, codes(r)) == (E.none, {("q", 0): E.topic_authorization_failed})
        assert broker.groups.shares.describe("g")["group_state"] == "Empty"
        reply, _ = await broker.groups.shares.heartbeat("g", ShareHeartbeat("m", 0, subscribed_topic_names=("q",)))
        await leave(broker, "g", reply.member_id or "")
        r = await alice.call(alter("g", {"q": {0: 1}}))
        assert (r.error_code, codes(r)) == (E.none, {("q", 0): E.topic_authorization_failed})
        r = await alice.call(delete_offsets("g", "q"))
        assert [(t.topic_name, t.error_code) for t in r.responses] == [("q", E.topic_authorization_failed)]
        r = await alice.call(rs.ReadShareGroupStateRequest(group_id="g", topics=(rs.ReadStateData(
            topic_id=meta.topic_id, partitions=(rs.PartitionData(partition=0, leader_epoch=-1),)),)))
        assert r.results[0].partitions[0].error_code == E.cluster_authorization_failed
        r = await root.call(rs.ReadShareGroupStateRequest(group_id="g", topics=(rs.ReadStateData(
            topic_id=meta.topic_id, partitions=(rs.PartitionData(partition=0, leader_epoch=-1),)),)))
        assert (r.results[0].partitions[0].error_code, r.results[0].partitions[0].start_offset) == \
            (E.invalid_request, 0)  # allowed; the state was never initialised


def test_removing_a_share_state_as_a_leader_of_an_epoch(tmp_path):
    """``share_state.remove``: journals then snapshot; refused (nothing removed) when a later
    leader wrote a journal; a crash after the journals leaves the snapshot alone, a
    consistent older state a retry removes. ``groups`` names every group with state."""
    from kaas.storage.share_state import NewerWriter, ShareJournal, journal_path, snapshot_path

    d = tmp_path / "share"
    long_id = "g" * 300  # too long for a file name: a digest name, the id read from the snapshot
    for group, start in (("a/1", 3), (long_id, 5)):
        j = ShareJournal(d, group, 4, fsync=False)
        j.begin(Persisted(start, start))
        j.close()
    assert share_state.groups(d) == sorted(["a/1", long_id])
    later = journal_path(d, "a/1", 7, 0)
    later.write_bytes(b"")
    with pytest.raises(NewerWriter):
        share_state.remove(d, "a/1", 4, fsync=False)
    assert share_state.has_state(d, "a/1") and snapshot_path(d, "a/1").exists()
    later.unlink()
    journal_path(d, "a/1", 4, 0).unlink()  # as if a crash came between the two steps
    loaded, _ = share_state.load_window(d, "a/1", ShareLimits())
    assert loaded is not None and (loaded.start, loaded.end) == (3, 3)
    share_state.remove(d, "a/1", 4, fsync=False)
    assert not share_state.has_state(d, "a/1") and share_state.groups(d) == [long_id]
    share_state.remove(d, "a/1", 4, fsync=False)  # nothing left: no error


def test_inspect_shares_reports_what_a_load_would_refuse(tmp_path):
    """``kaas inspect shares`` judges the files as a leader's load does (``replay``): a
    group whose journals have no snapshot is reported corrupt with its journals listed,
    the others are shown with their window."""
    from kaas.storage.paths import Layout
    from kaas.storage.share_state import ShareJournal, snapshot_path
    from kaas.tools.inspect_data._shares import shares_view

    d = Layout(tmp_path).partition_dir("q", 0) / share_state.DIR
    for group, start in (("ok", 3), ("torn", 5)):
        j = ShareJournal(d, group, 4, fsync=False)
        j.begin(Persisted(start, start))
        j.append(Delta(start + 1, start + 1))
        j.close()
    snapshot_path(d, "torn").unlink()
    view = {g["group"]: g for g in shares_view(tmp_path, "q", 0, None)["groups"]}
    ok, torn = view["ok"], view["torn"]
    assert (ok["error"], ok["start"], ok["end"], ok["journal_from"]) == (None, 4, 4, [4, 0])
    assert torn["error"] is not None and torn["error"].endswith("journals without a snapshot")
    assert (torn["start"], torn["snapshot"], [j["epoch"] for j in torn["journals"]]) == (None, None, [4])


def test_a_digest_named_snapshot_names_its_group_only_when_it_checks_out(tmp_path):
    """``share_state.groups`` reads the id of a group too long for a file name from its
    snapshot, checked as a load checks it: one whose checksum fails is given by its file
    name (the load reports it corrupt)."""
    from kaas.storage.paths import encode_name
    from kaas.storage.share_state import ShareJournal, snapshot_path

    d = tmp_path / "share"
    long_id = "g" * 300
    j = ShareJournal(d, long_id, 1, fsync=False)
    j.begin(Persisted(0, 0))
    j.close()
    assert share_state.groups(d) == [long_id]
    snap = snapshot_path(d, long_id)
    data = bytearray(snap.read_bytes())
    data[-1] ^= 0xFF
    snap.write_bytes(bytes(data))
    assert share_state.groups(d) == [encode_name(long_id)]
