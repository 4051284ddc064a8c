"""``kaas.domain.txn_add``: how a partition leader and a group coordinator answer what the
transaction coordinator said (Apache 4.4's AddPartitionsToTxnManager, ReplicaManager and
coordinator runtime, read from the 4.4.0 bytecode)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as E

from kaas.domain import txn_add
from kaas.domain.txn_add import Operation

codes = st.sampled_from(list(E))
ops = st.sampled_from(list(Operation))


def test_operation_by_request_version():
    assert [txn_add.produce_operation(v).name for v in range(3, 14)] == \
        ["DEFAULT_ERROR"] * 8 + ["GENERIC_ERROR_SUPPORTED"] + ["ADD_PARTITION"] * 2
    assert [txn_add.txn_offset_commit_operation(v).name for v in range(0, 7)] == \
        ["DEFAULT_ERROR"] * 4 + ["GENERIC_ERROR_SUPPORTED"] + ["ADD_PARTITION"] * 2
    assert [op.adds for op in Operation] == [False, False, True]


def test_coordinator_answers_as_the_leader_reports_them():
    for op in Operation:
        assert txn_add.from_coordinator(E.producer_fenced, op) == E.invalid_producer_epoch
        assert txn_add.from_coordinator(E.none, op) == E.none
    assert txn_add.from_coordinator(E.transaction_abortable, Operation.DEFAULT_ERROR) == E.invalid_txn_state
    assert txn_add.from_coordinator(E.transaction_abortable, Operation.GENERIC_ERROR_SUPPORTED) == \
        E.transaction_abortable
    assert txn_add.from_coordinator(E.transaction_abortable, Operation.ADD_PARTITION) == E.transaction_abortable
    assert txn_add.from_request(E.cluster_authorization_failed) == E.invalid_txn_state
    assert txn_add.from_request(E.not_coordinator) == E.not_coordinator


def test_produce_answers():
    add, verify = Operation.ADD_PARTITION, Operation.GENERIC_ERROR_SUPPORTED
    assert txn_add.produce_answer(E.invalid_txn_state, add) == (E.invalid_txn_state, txn_add.NOT_ADDED)
    for code in (E.network_exception, E.coordinator_load_in_progress, E.coordinator_not_available,
                 E.not_coordinator):
        answer, message = txn_add.produce_answer(code, add)
        assert answer == E.not_enough_replicas
        assert message == ("Unable to verify the partition has been added to the transaction. "
                           f"Underlying error: {code.name.upper()}")
    assert txn_add.produce_answer(E.concurrent_transactions, add) == (E.concurrent_transactions, None)
    assert txn_add.produce_answer(E.concurrent_transactions, verify)[0] == E.not_enough_replicas
    assert txn_add.produce_answer(E.invalid_producer_epoch, add) == (E.invalid_producer_epoch, None)


def test_group_answers():
    assert txn_add.group_answer(E.network_exception) == E.coordinator_load_in_progress
    for code in (E.unknown_topic_or_partition, E.not_enough_replicas, E.request_timed_out):
        assert txn_add.group_answer(code) == E.coordinator_not_available
    for code in (E.not_leader_or_follower, E.kafka_storage_error):
        assert txn_add.group_answer(code) == E.not_coordinator
    for code in (E.message_too_large, E.record_list_too_large, E.invalid_fetch_size):
        assert txn_add.group_answer(code) == E.unknown_server_error
    for code in (E.none, E.invalid_producer_epoch, E.concurrent_transactions, E.coordinator_not_available,
                 E.not_coordinator, E.transaction_abortable, E.invalid_producer_id_mapping):
        assert txn_add.group_answer(code) == code


@given(codes, ops, st.integers(min_value=0, max_value=10_000))
def test_only_an_add_told_concurrent_is_retried_and_only_within_the_bound(code, op, elapsed_ms):
    retried = txn_add.retry_concurrent(code, op, elapsed_ms)
    assert retried == (op.adds and code == E.concurrent_transactions and elapsed_ms < txn_add.RETRY_MAX_MS)


@given(codes, ops)
def test_no_answer_shows_a_fenced_or_a_brokers_own_error(code, op):
    """Whatever the coordinator said, the producer never sees PRODUCER_FENCED (it expects
    INVALID_PRODUCER_EPOCH from a leader) nor the broker's CLUSTER_AUTHORIZATION_FAILED,
    and a client below v11 never sees TRANSACTION_ABORTABLE."""
    answer, message = txn_add.produce_answer(txn_add.from_coordinator(txn_add.from_request(code), op), op)
    assert answer not in (E.producer_fenced, E.cluster_authorization_failed)
    if op is Operation.DEFAULT_ERROR:
        assert answer != E.transaction_abortable
    if answer == E.none:
        assert message is None
