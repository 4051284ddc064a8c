"""Helpers shared by the transaction API handlers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError

if TYPE_CHECKING:
    from kaas.broker import Broker
    from kaas.coord.txn import TxnCoordinator


def coordinator(broker: Broker) -> TxnCoordinator:
    """``broker.txn``.

    Raises:
        KaasError: COORDINATOR_NOT_AVAILABLE when no coordinator is installed.
    """
    txn = broker.txn
    if txn is None:
        raise KaasError(ErrorCode.coordinator_not_available, "no transaction coordinator")
    return txn


def partition_exists(broker: Broker, topic: str, partition: int) -> bool:
    """True when ``topic`` exists (re-reading the topic files once) and has ``partition``."""
    meta = broker.topics.get(topic)
    if meta is None:
        broker.topics.refresh()
        meta = broker.topics.get(topic)
    return meta is not None and 0 <= partition < meta.partitions
