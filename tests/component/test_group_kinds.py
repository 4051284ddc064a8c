"""The group kinds at their coordinator (``kaas.coord.group.kinds``): a group is of one
kind, loaded again as that kind from its file, and a request of another kind's protocol
is answered as docs/groups.rst ("Group kinds") says, on a real ``Broker`` (trio's
MockClock)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as E

from kaas.coord.group import GroupCoordinator
from kaas.coord.group.kinds import ClassicKind, ConsumerKind, ShareKind
from kaas.domain.groups.consumer.heartbeat import LEAVE_EPOCH, Heartbeat
from kaas.domain.groups.share.group import ShareHeartbeat
from kaas.errors import KaasError
from kaas.storage.offset_store import Committed
from tests.component.test_share_fetch import broker_with_topic

SUBSCRIPTION = b"\x00\x01\x00\x00\x00\x01\x00\x01q\xff\xff\xff\xff"  # ConsumerProtocolSubscription v1: ["q"]


async def join_classic(groups: GroupCoordinator, group: str, member: str = ""):
    return await groups.join(group, member_id=member, group_instance_id=None, client_id="c", client_host="h",
                             session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocol_type="consumer",
                             protocols=[("range", SUBSCRIPTION)], require_known_member=False)


async def classic_requests_to(groups: GroupCoordinator, group: str) -> dict[str, E]:
    """What SyncGroup, Heartbeat, LeaveGroup and OffsetCommit answer ``group``."""
    sync = await groups.sync(group, member_id="m", group_instance_id=None, generation_id=1, assignments=[],
                             protocol_type=None, protocol_name=None)
    leave = await groups.leave(group, [("m", None)])
    commit = await groups.commit(group, member_id="", group_instance_id=None, generation_id=-1,
                                 offsets={("q", 0): Committed(1)})
    return {"sync": sync.error_code, "heartbeat": groups.heartbeat(group, "m", None, 1),
            "leave": leave.members[0].error_code, "commit": commit}


async def test_a_share_group_refuses_the_other_kinds_protocols(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, _tid):
        groups = broker.groups
        reply, _ = await groups.shares.heartbeat("g", ShareHeartbeat("s1", 0, subscribed_topic_names=("q",)))
        assert reply.error_code == E.none and isinstance(groups.groups["g"].kind, ShareKind)
        with pytest.raises(KaasError) as exc:
            await join_classic(groups, "g")
        assert exc.value.code == E.group_id_not_found
        assert await classic_requests_to(groups, "g") == {
            "sync": E.unknown_member_id, "heartbeat": E.unknown_member_id, "leave": E.unknown_member_id,
            "commit": E.group_id_not_found}
        cg, _ = await groups.consumers.heartbeat("g", Heartbeat("c1", 0, rebalance_timeout_ms=5_000,
                                                                subscribed_topic_names=("q",), owned=()),
                                                 api_version=1)
        assert cg.error_code == E.group_id_not_found
        assert groups.describe("g")["not_found"] == "Group g is not a classic group."
        assert [(g["group_type"], g["protocol_type"]) for g in groups.list_groups()] == [("share", "share")]
        # a new coordinator loads it from its file as a share group still
        groups.unload("g")
        assert "g" not in groups.groups and isinstance(groups.entry("g").kind, ShareKind)


async def test_an_empty_consumer_group_becomes_classic_and_a_full_one_stays(shm_path, thread_safe_autojump_clock):
    async with broker_with_topic(shm_path, thread_safe_autojump_clock) as (broker, _tid):
        groups = broker.groups
        reply, _ = await groups.consumers.heartbeat("g", Heartbeat("c1", 0, rebalance_timeout_ms=5_000,
                                                                   subscribed_topic_names=("q",), owned=()),
                                                    api_version=1)
        assert reply.error_code == E.none and isinstance(groups.groups["g"].kind, ConsumerKind)
        share, _ = await groups.shares.heartbeat("g", ShareHeartbeat("s1", 0, subscribed_topic_names=("q",)))
        assert share.error_code == E.group_id_not_found
        left, _ = await groups.consumers.heartbeat("g", Heartbeat("c1", LEAVE_EPOCH), api_version=1)
        assert left.error_code == E.none and groups.groups["g"].consumer.is_empty()
        assert await classic_requests_to(groups, "g") == {
            "sync": E.unknown_member_id, "heartbeat": E.unknown_member_id, "leave": E.unknown_member_id,
            "commit": E.none}
        first = await join_classic(groups, "g")  # the empty consumer group becomes a classic one
        assert first.error_code == E.none and isinstance(groups.groups["g"].kind, ClassicKind)
        assert groups.groups["g"].group.members.keys() == {first.member_id}
