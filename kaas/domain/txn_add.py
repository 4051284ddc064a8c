"""What a partition leader and a group coordinator make of the transaction coordinator's
answer when they add a partition or a group to a transaction, or verify it is there
(KIP-890): the rules of Apache 4.4's ``AddPartitionsToTxnManager``, its ``ReplicaManager``
and its coordinator runtime, as pure functions of error codes and request versions.

Which operation a request asks for follows from its version alone (Apache does not look at
the finalized ``transaction.version`` here; the client only sends these versions once it
is finalized at 2):

==========================  ========  ===============  ==============
operation                   Produce   TxnOffsetCommit  what it does
==========================  ========  ===============  ==============
``DEFAULT_ERROR``           3-10      0-3              verify only
``GENERIC_ERROR_SUPPORTED`` 11        4                verify only; the
                                                       client knows 90
``ADD_PARTITION``           12-13     5-6              add (TV2)
==========================  ========  ===============  ==============

No I/O, no clock: the callers pass the elapsed time.
"""

from __future__ import annotations

import enum

from kio.schema.errors import ErrorCode

__all__ = ["RETRY_BACKOFF_MS", "RETRY_MAX_MS", "Operation", "group_answer", "from_coordinator",
           "from_request", "produce_answer", "produce_operation", "retry_concurrent",
           "txn_offset_commit_operation"]

# Apache's add.partitions.to.txn.retry.backoff.ms and .backoff.max.ms (defaults)
RETRY_BACKOFF_MS = 20
RETRY_MAX_MS = 100

_VERIFY_FAILED = "Unable to verify the partition has been added to the transaction. Underlying error: "
NOT_ADDED = "Partition was not added to the transaction"


class Operation(enum.Enum):
    """Apache's ``TransactionSupportedOperation``."""

    DEFAULT_ERROR = "default"
    GENERIC_ERROR_SUPPORTED = "generic"
    ADD_PARTITION = "add"

    @property
    def adds(self) -> bool:
        """The leader adds the partition (VerifyOnly false): transaction.version 2, where
        the coordinator bumps the epoch at every EndTxn (``supportsEpochBump``)."""
        return self is Operation.ADD_PARTITION


def produce_operation(version: int) -> Operation:
    if version > 11:
        return Operation.ADD_PARTITION
    return Operation.GENERIC_ERROR_SUPPORTED if version > 10 else Operation.DEFAULT_ERROR


def txn_offset_commit_operation(version: int) -> Operation:
    if version > 4:
        return Operation.ADD_PARTITION
    return Operation.GENERIC_ERROR_SUPPORTED if version > 3 else Operation.DEFAULT_ERROR


def from_request(code: ErrorCode) -> ErrorCode:
    """A request-level error of the coordinator's answer, for every partition it carried:
    the client is never shown CLUSTER_AUTHORIZATION_FAILED (the broker's own right)."""
    return ErrorCode.invalid_txn_state if code == ErrorCode.cluster_authorization_failed else code


def from_coordinator(code: ErrorCode, op: Operation) -> ErrorCode:
    """A partition's error in the coordinator's answer, as the leader reports it: producers
    expect INVALID_PRODUCER_EPOCH for a fenced epoch, and a client of the first versions
    does not know TRANSACTION_ABORTABLE."""
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if code == ErrorCode.transaction_abortable and op is Operation.DEFAULT_ERROR:
        return ErrorCode.invalid_txn_state
    return code


def retry_concurrent(code: ErrorCode, op: Operation, elapsed_ms: int) -> bool:
    """Does the leader ask the coordinator again (after ``RETRY_BACKOFF_MS``)? Only an add
    told CONCURRENT_TRANSACTIONS (the last transaction's markers are still being written)
    within ``RETRY_MAX_MS`` of its first try."""
    return op.adds and code == ErrorCode.concurrent_transactions and elapsed_ms < RETRY_MAX_MS


def produce_answer(code: ErrorCode, op: Operation) -> tuple[ErrorCode, str | None]:
    """The Produce answer (code, message) for a partition whose verification or add failed
    with ``code`` (already through ``from_coordinator``). Errors older clients would not
    retry become NOT_ENOUGH_REPLICAS, which they retry without a metadata refresh; a TV2
    client retries CONCURRENT_TRANSACTIONS itself."""
    if code == ErrorCode.invalid_txn_state:
        return code, NOT_ADDED
    if code in (ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
                ErrorCode.coordinator_not_available, ErrorCode.not_coordinator) \
            or (code == ErrorCode.concurrent_transactions and not op.adds):
        return ErrorCode.not_enough_replicas, _VERIFY_FAILED + code.name.upper()
    return code, None


def group_answer(code: ErrorCode) -> ErrorCode:
    """The TxnOffsetCommit answer for a group whose add or verification failed with
    ``code`` (already through ``from_coordinator``): Apache's coordinator runtime turns
    the errors of its own log writes into the coordinator errors clients act on."""
    if code == ErrorCode.network_exception:
        return ErrorCode.coordinator_load_in_progress
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return code
