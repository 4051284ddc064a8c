"""What a classic member hears while the coordinator cannot write the group (its write
lease lapsed, or it is still joining the cluster): Heartbeat answers NONE and SyncGroup
REBALANCE_IN_PROGRESS, as Apache's coordinator does while loading a group, because
aiokafka and kafka-python fail the consumer on COORDINATOR_LOAD_IN_PROGRESS from either
(a chaos pause of the coordinator broke aiokafka's EOS example on it). Offset commits
still get COORDINATOR_LOAD_IN_PROGRESS, which every client retries."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers import heartbeat, offset_commit, sync_group
from kaas.handlers.context import Context
from kaas.wire import codec
from kaas.wire.build import build
from tests.clocks import SteppedWall
from tests.component.test_coordinator_disk_faults import started_broker


def ctx(broker, api_key: int, version: int) -> Context:
    return Context(broker=broker, api_key=api_key, api_version=version, correlation_id=1, client_id="t",
                   peer="test")


async def test_a_lapsed_lease_is_not_an_error_a_classic_member_must_handle(tmp_path):
    broker = await started_broker(tmp_path, SteppedWall(1_000_000), group_initial_rebalance_delay_ms=0)
    groups = broker.groups
    join = await groups.join("g", member_id="", group_instance_id=None, client_id="c", client_host="h",
                             session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocol_type="consumer",
                             protocols=[("range", b"")], require_known_member=False)
    member, gen = join.member_id, join.generation_id

    hb_req = build(codec.request_class(12, 4), {"group_id": "g", "generation_id": gen, "member_id": member,
                                                 "group_instance_id": None})
    sync_req = build(codec.request_class(14, 5), {
        "group_id": "g", "generation_id": gen, "member_id": member, "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range", "assignments": []})
    commit_req = build(codec.request_class(8, 8), {
        "group_id": "g", "generation_id_or_member_epoch": gen, "member_id": member, "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                 "committed_leader_epoch": -1, "committed_metadata": ""}]}]})

    broker.cluster.lease_until = 0.0  # the write lease ran out (a paused or starved broker)
    with pytest.raises(KaasError) as raised:
        groups.heartbeat("g", member, None, gen)
    assert raised.value.code == ErrorCode.coordinator_load_in_progress

    hb = codec.decode_response(12, 4, bytes(codec.encode_response(
        12, 4, 1, await heartbeat.handle(ctx(broker, 12, 4), hb_req)))[4:])[1]
    assert hb.error_code == ErrorCode.none
    sync = await sync_group.handle(ctx(broker, 14, 5), sync_req)
    assert sync["error_code"] == ErrorCode.rebalance_in_progress and sync["assignment"] == b""
    commit = await offset_commit.handle(ctx(broker, 8, 8), commit_req)
    assert commit["topics"][0]["partitions"][0]["error_code"] == ErrorCode.coordinator_load_in_progress

    # once the lease is renewed the member is served as before: its generation still stands
    broker.cluster.lease_until = float("inf")
    sync = await sync_group.handle(ctx(broker, 14, 5), sync_req)
    assert sync["error_code"] == ErrorCode.none
    assert groups.heartbeat("g", member, None, gen) == ErrorCode.none
