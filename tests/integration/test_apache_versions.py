"""The version steps up to Apache Kafka 4.4's ranges, each exercised over the wire with kio
requests of the new version (no Python client speaks most of them): what each new version
means, as Apache's broker answers it.

One broker for the module; every test names its own topics, groups and transactional ids.
"""

from __future__ import annotations

import uuid

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode

from kaas.client import WireClient
from tests.fixtures import broker_fixture
from tests.kafka import create_topic, uniq

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

vbroker = broker_fixture(scope="module", name="versions",
                         extra=["--num-partitions", "1", "--group-initial-rebalance-delay-ms", "0"],
                         doc="One broker for the version-step tests.")

PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH = 0, 1, 2, 3, 8, 9
FIND_COORDINATOR, JOIN_GROUP, DESCRIBE_GROUPS = 10, 11, 15
INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28


def _wc(broker) -> WireClient:
    return WireClient("127.0.0.1", broker.port)


def _batch(values: list[bytes], *, pid: int = -1, epoch: int = -1, seq: int = -1,
           transactional: bool = False) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i, v in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=v, headers=[])
    return bytes(b.build())


def _topic_id(wc: WireClient, topic: str) -> uuid.UUID:
    r = wc.call(METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    assert r.topics[0].error_code == 0
    return r.topics[0].topic_id


def _produce(wc: WireClient, topic: str, values: list[bytes], partition: int = 0) -> None:
    r = wc.call(PRODUCE, 11, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": _batch(values)}]}]})
    assert r.responses[0].partition_responses[0].error_code == 0


def test_metadata_v13_has_a_top_level_error_code(vbroker):
    topic = uniq("md13")
    create_topic(vbroker.bootstrap, topic, 2)
    with _wc(vbroker) as wc:
        tid = _topic_id(wc, topic)
        r = wc.call(METADATA, 13, {"topics": [{"name": None, "topic_id": tid}, {"name": "no-such-topic-v13"}],
                                   "allow_auto_topic_creation": False})
    assert r.error_code == ErrorCode.none
    assert (r.topics[0].name, r.topics[0].topic_id, len(r.topics[0].partitions)) == (topic, tid, 2)
    assert r.topics[1].error_code == ErrorCode.unknown_topic_or_partition


def test_describe_groups_v6_answers_group_id_not_found(vbroker):
    topic, group = uniq("dg6"), uniq("dg6-group")
    create_topic(vbroker.bootstrap, topic)
    with _wc(vbroker) as wc:
        missing = uniq("dg6-missing")
        r6 = wc.call(DESCRIBE_GROUPS, 6, {"groups": [missing], "include_authorized_operations": False})
        r5 = wc.call(DESCRIBE_GROUPS, 5, {"groups": [missing], "include_authorized_operations": False})
        # a group known by its committed offsets (no member): Empty, found, at every version
        c = wc.call(OFFSET_COMMIT, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                       "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                           {"partition_index": 0, "committed_offset": 0,
                                            "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        assert c.topics[0].partitions[0].error_code == 0
        known = wc.call(DESCRIBE_GROUPS, 6, {"groups": [group], "include_authorized_operations": False})
    g6, g5 = r6.groups[0], r5.groups[0]
    assert (g6.error_code, g6.error_message, g6.group_state) == (
        ErrorCode.group_id_not_found, f"Group {missing} not found.", "Dead")
    assert (g5.error_code, g5.group_state) == (ErrorCode.none, "Dead")
    assert (known.groups[0].error_code, known.groups[0].group_state) == (ErrorCode.none, "Empty")


def test_list_offsets_v8_to_v11_tiered_specs(vbroker):
    """Nothing is tiered in kaas (Apache's answers with remote storage off): earliest-local
    (-4) is the log start offset, latest-tiered (-5) and earliest-pending-upload (-6) find
    nothing; the v10 timeout is accepted."""
    topic = uniq("lo11")
    create_topic(vbroker.bootstrap, topic)
    with _wc(vbroker) as wc:
        _produce(wc, topic, [b"a", b"b", b"c"])
        d = wc.call(21, 2, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 1}]}],
                            "timeout": 5000})
        assert d.topics[0].partitions[0].error_code == 0

        def ask(version: int, ts: int) -> tuple[int, int, int, int]:
            body = {"replica_id": -1, "isolation_level": 0, "timeout": 1000, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}]}]}
            p = wc.call(LIST_OFFSETS, version, body).topics[0].partitions[0]
            return p.error_code, p.offset, p.timestamp, p.leader_epoch

        for v in (8, 9, 10, 11):
            code, offset, _, epoch = ask(v, -4)
            assert (code, offset) == (0, 1) and epoch >= 0, v
            assert ask(v, -2)[:2] == (0, 1)
            assert ask(v, -1)[:2] == (0, 3)
        for v in (9, 10, 11):
            assert ask(v, -5) == (0, -1, -1, -1), v
        assert ask(11, -6) == (0, -1, -1, -1)
        assert ask(11, -3)[:3] == (0, 2, 1_700_000_000_002)


def test_offset_commit_and_fetch_v10_by_topic_id(vbroker):
    topic, group = uniq("oc10"), uniq("oc10-group")
    create_topic(vbroker.bootstrap, topic, 2)
    unknown = uuid.uuid4()
    with _wc(vbroker) as wc:
        tid = _topic_id(wc, topic)
        c = wc.call(OFFSET_COMMIT, 10, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                        "group_instance_id": None, "topics": [
                                            {"topic_id": tid, "partitions": [
                                                {"partition_index": 1, "committed_offset": 7,
                                                 "committed_leader_epoch": -1, "committed_metadata": "m"}]},
                                            {"topic_id": unknown, "partitions": [
                                                {"partition_index": 0, "committed_offset": 1,
                                                 "committed_leader_epoch": -1, "committed_metadata": None}]}]})
        assert [(t.topic_id, t.partitions[0].error_code) for t in c.topics] == [
            (tid, ErrorCode.none), (unknown, ErrorCode.unknown_topic_id)]
        f = wc.call(OFFSET_FETCH, 10, {"require_stable": False, "groups": [
            {"group_id": group, "member_id": None, "member_epoch": -1,
             "topics": [{"topic_id": tid, "partition_indexes": [0, 1]},
                        {"topic_id": unknown, "partition_indexes": [0]}]}]})
        every = wc.call(OFFSET_FETCH, 10, {"require_stable": False, "groups": [
            {"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}]})
        # the offsets are the group's, whatever version reads them
        by_name = wc.call(OFFSET_FETCH, 9, {"require_stable": False, "groups": [
            {"group_id": group, "member_id": None, "member_epoch": -1,
             "topics": [{"name": topic, "partition_indexes": [1]}]}]})
    g = f.groups[0]
    assert g.error_code == 0
    answers = {t.topic_id: [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions]
               for t in g.topics}
    assert answers == {tid: [(0, -1, 0), (1, 7, 0)], unknown: [(0, -1, ErrorCode.unknown_topic_id)]}
    assert [(t.topic_id, [(p.partition_index, p.committed_offset, p.metadata) for p in t.partitions])
            for t in every.groups[0].topics] == [(tid, [(1, 7, "m")])]
    assert by_name.groups[0].topics[0].partitions[0].committed_offset == 7


def test_find_coordinator_v4_to_v6_batched_and_share_keys(vbroker):
    topic = uniq("fc6")
    create_topic(vbroker.bootstrap, topic)
    with _wc(vbroker) as wc:
        tid = _topic_id(wc, topic)
        groups = wc.call(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g-a", "g-b"]})
        txns = wc.call(FIND_COORDINATOR, 5, {"key_type": 1, "coordinator_keys": ["t-a"]})
        share = wc.call(FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [
            f"sg:{tid}:0", f"sg:{uuid.uuid4()}:0", "no-colons"]})
        old_share = wc.call(FIND_COORDINATOR, 5, {"key_type": 2, "coordinator_keys": [f"sg:{tid}:0"]})
    assert [(c.key, c.error_code, c.node_id, c.port) for c in groups.coordinators] == [
        ("g-a", 0, 0, vbroker.port), ("g-b", 0, 0, vbroker.port)]
    assert [(c.key, c.error_code, c.node_id) for c in txns.coordinators] == [("t-a", 0, 0)]
    assert [(c.error_code, c.node_id) for c in share.coordinators] == [
        (ErrorCode.none, 0), (ErrorCode.coordinator_not_available, -1), (ErrorCode.invalid_request, -1)]
    assert old_share.coordinators[0].error_code == ErrorCode.invalid_request


def test_transactional_versions_up_to_the_tv1_maximum(vbroker):
    """InitProducerId v5, AddOffsetsToTxn v4, TxnOffsetCommit v4, EndTxn v4: the versions
    of transaction.version 1. A transactional Produce v11 to a partition its transaction
    does not hold answers TRANSACTION_ABORTABLE (v10: INVALID_TXN_STATE), as Apache's."""
    topic, txn_id, group = uniq("tv1"), uniq("tv1-txn"), uniq("tv1-group")
    create_topic(vbroker.bootstrap, topic, 2)
    with _wc(vbroker) as wc:
        ip = wc.call(INIT_PRODUCER_ID, 5, {"transactional_id": txn_id, "transaction_timeout": 60000,
                                           "producer_id": -1, "producer_epoch": -1})
        assert ip.error_code == 0
        pid, epoch = ip.producer_id, ip.producer_epoch
        ap = wc.call(ADD_PARTITIONS, 3, {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                                         "v3_and_below_producer_epoch": epoch,
                                         "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
        assert ap.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0

        def produce(version: int, partition: int, seq: int) -> int:
            r = wc.call(PRODUCE, version, {"transactional_id": txn_id, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": _batch(
                    [b"x"], pid=pid, epoch=epoch, seq=seq, transactional=True)}]}]})
            return r.responses[0].partition_responses[0].error_code

        assert produce(11, 0, 0) == ErrorCode.none
        assert produce(11, 1, 0) == ErrorCode.transaction_abortable
        assert produce(10, 1, 0) == ErrorCode.invalid_txn_state
        ao = wc.call(ADD_OFFSETS, 4, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                      "group_id": group})
        assert ao.error_code == 0
        to = wc.call(TXN_OFFSET_COMMIT, 4, {"transactional_id": txn_id, "group_id": group, "producer_id": pid,
                                            "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                                            "group_instance_id": None, "topics": [
                                                {"name": topic, "partitions": [
                                                    {"partition_index": 0, "committed_offset": 1,
                                                     "committed_leader_epoch": -1, "committed_metadata": None}]}]})
        assert to.topics[0].partitions[0].error_code == 0
        end = wc.call(END_TXN, 4, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                   "committed": True})
        assert end.error_code == 0
        f = wc.call(OFFSET_FETCH, 9, {"require_stable": True, "groups": [
            {"group_id": group, "member_id": None, "member_epoch": -1,
             "topics": [{"name": topic, "partition_indexes": [0]}]}]})
    p = f.groups[0].topics[0].partitions[0]
    assert (p.error_code, p.committed_offset) in ((ErrorCode.none, 1), (ErrorCode.unstable_offset_commit, -1))


def test_fetch_v13_to_v18_by_topic_id(vbroker):
    """Fetch names topics by id from v13; v15's ReplicaState, v17's directory id and v18's
    high watermark are follower fields, decoded and (for a consumer's fetch) unused."""
    topic = uniq("fetch18")
    create_topic(vbroker.bootstrap, topic)
    unknown = uuid.uuid4()
    with _wc(vbroker) as wc:
        _produce(wc, topic, [b"one", b"two"])
        tid = _topic_id(wc, topic)
        for v in (13, 14, 15, 16, 17, 18):
            r = wc.call(FETCH, v, {"max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                                   "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                                   "topics": [{"topic_id": tid, "partitions": [
                                                  {"partition": 0, "fetch_offset": 1, "partition_max_bytes": 1 << 20}]},
                                              {"topic_id": unknown, "partitions": [
                                                  {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}]})
            known, missing = r.responses
            p = known.partitions[0]
            assert (known.topic_id, p.error_code, p.high_watermark) == (tid, ErrorCode.none, 2), v
            assert p.records, v  # the batch holding offset 1
            assert (missing.topic_id, missing.partitions[0].error_code) == (unknown, ErrorCode.unknown_topic_id), v
            assert getattr(r, "node_endpoints", ()) == ()  # (v16+: only with a leader hint)


def test_join_group_v9_static_leader_rejoin_skips_the_assignment(vbroker):
    """JoinGroup v8 carries a Reason; v9's SkipAssignment tells a static leader that
    rejoins a Stable group unchanged that it leads, without a new assignment (KIP-814)."""
    group = uniq("jg9")
    protocols = [{"name": "range", "metadata": b"\x00\x01"}]

    def join(wc: WireClient, version: int) -> object:
        return wc.call(JOIN_GROUP, version, {"group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000,
                                             "member_id": "", "group_instance_id": "static-1",
                                             "protocol_type": "consumer", "protocols": protocols,
                                             "reason": "version test"})

    with _wc(vbroker) as wc:
        first = join(wc, 8)
        assert (first.error_code, first.leader, first.skip_assignment if hasattr(first, "skip_assignment") else False
                ) == (0, first.member_id, False)
        s = wc.call(14, 5, {"group_id": group, "generation_id": first.generation_id, "member_id": first.member_id,
                            "group_instance_id": "static-1", "protocol_type": "consumer", "protocol_name": "range",
                            "assignments": [{"member_id": first.member_id, "assignment": b"A"}]})
        assert (s.error_code, s.assignment) == (0, b"A")
        again = join(wc, 9)
        old_style = join(wc, 8)
    assert again.error_code == 0 and again.member_id != first.member_id
    assert (again.generation_id, again.leader, again.skip_assignment) == (first.generation_id, again.member_id, True)
    assert [m.member_id for m in again.members] == [again.member_id]
    # before v9: told the leader as it was (the replaced id), no members
    assert (old_style.error_code, old_style.leader, old_style.members) == (0, again.member_id, ())


def test_add_partitions_to_txn_v4_v5_broker_form(vbroker):
    """The broker form: several transactions, added or only verified (KIP-890 part 1's
    check): a partition outside the transaction is TRANSACTION_ABORTABLE in v5 and
    INVALID_TXN_STATE in v4."""
    topic, a, b = uniq("apt5"), uniq("apt5-a"), uniq("apt5-b")
    create_topic(vbroker.bootstrap, topic, 3)
    with _wc(vbroker) as wc:
        pids = {}
        for txn_id in (a, b):
            ip = wc.call(INIT_PRODUCER_ID, 5, {"transactional_id": txn_id, "transaction_timeout": 60000,
                                               "producer_id": -1, "producer_epoch": -1})
            pids[txn_id] = (ip.producer_id, ip.producer_epoch)

        def txn(txn_id: str, partitions: list[int], verify: bool) -> dict:
            pid, epoch = pids[txn_id]
            return {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                    "verify_only": verify, "topics": [{"name": topic, "partitions": partitions}]}

        def codes(r) -> dict:
            assert r.error_code == 0
            return {(x.transactional_id, p.partition_index): p.partition_error_code
                    for x in r.results_by_transaction for t in x.topic_results for p in t.results_by_partition}

        added = wc.call(ADD_PARTITIONS, 5, {"transactions": [txn(a, [0, 1], False), txn(b, [2], False)]})
        assert set(codes(added).values()) == {ErrorCode.none}
        v5 = wc.call(ADD_PARTITIONS, 5, {"transactions": [txn(a, [0, 2], True), txn(b, [2], True)]})
        assert codes(v5) == {(a, 0): ErrorCode.none, (a, 2): ErrorCode.transaction_abortable,
                             (b, 2): ErrorCode.none}
        v4 = wc.call(ADD_PARTITIONS, 4, {"transactions": [txn(b, [0], True)]})
        assert codes(v4) == {(b, 0): ErrorCode.invalid_txn_state}
        for txn_id in (a, b):
            pid, epoch = pids[txn_id]
            assert wc.call(END_TXN, 4, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                        "committed": False}).error_code == 0


def test_txn_offset_commit_outside_the_transaction_is_abortable_from_v4(vbroker):
    """TxnOffsetCommit for a group not added by AddOffsetsToTxn: INVALID_TXN_STATE up to v3,
    TRANSACTION_ABORTABLE from v4 (KIP-890 part 1), as Apache 4.4 answers (make diff)."""
    topic, txn_id = uniq("toc4"), uniq("toc4-t")
    create_topic(vbroker.bootstrap, topic, 1)
    with _wc(vbroker) as wc:
        ip = wc.call(INIT_PRODUCER_ID, 5, {"transactional_id": txn_id, "transaction_timeout": 60000,
                                           "producer_id": -1, "producer_epoch": -1})

        def commit(version: int) -> ErrorCode:
            r = wc.call(TXN_OFFSET_COMMIT, version, {
                "transactional_id": txn_id, "group_id": uniq("toc4-g"), "producer_id": ip.producer_id,
                "producer_epoch": ip.producer_epoch, "generation_id": -1, "member_id": "",
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                           "committed_leader_epoch": -1}]}]})
            return r.topics[0].partitions[0].error_code

        assert [commit(v) for v in (0, 3, 4)] == [ErrorCode.invalid_txn_state, ErrorCode.invalid_txn_state,
                                                  ErrorCode.transaction_abortable]
