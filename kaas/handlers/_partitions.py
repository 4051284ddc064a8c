"""What Metadata and DescribeTopicPartitions say about one partition."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kaas.broker import Broker
    from kaas.domain.replicas import View
    from kaas.storage.topics import TopicMeta


def partition_row(broker: Broker, view: View, meta: TopicMeta, index: int) -> dict[str, object]:
    """Leader, leader epoch, replicas, ISR and offline replicas of ``meta``'s partition
    ``index`` (LEADER_NOT_AVAILABLE while it has no live leader, or its leader has not
    opened it yet; the replicas still listed)."""
    leader, epoch = broker.served_leader(meta.name, index)
    rs = broker.replicas(view, meta, index, leader)
    return {
        "error_code": ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available,
        "partition_index": index, "leader_id": leader, "leader_epoch": epoch,
        "replica_nodes": rs.replicas, "isr_nodes": rs.isr, "offline_replicas": rs.offline,
    }
