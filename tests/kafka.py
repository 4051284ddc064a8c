"""Kafka client helpers shared by the integration tests (confluent-kafka, real processes).

One copy each of what the test modules used to write for themselves: a unique name, topic
creation, a read of partitions to their end, the values of messages, a transactional
producer. Module-specific clients stay in their modules.
"""

from __future__ import annotations

import itertools
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# The transaction reaper/reconcile tick shortened (KAAS_TXN_SWEEP_MS) so it fits a test.
SWEEP_ENV = {"KAAS_TXN_SWEEP_MS": "500"}


def ids_in_one_slot(n: int, prefix: str) -> list[str]:
    """``n`` transactional ids ``<prefix>-<i>`` of one transaction slot (one slot file,
    one coordinator)."""
    from kaas.domain.routing import txn_slot

    by_slot: dict[int, list[str]] = {}
    for i in itertools.count():
        ids = by_slot.setdefault(txn_slot(f"{prefix}-{i}"), [])
        ids.append(f"{prefix}-{i}")
        if len(ids) == n:
            return ids
    raise AssertionError("unreachable")


def uniq(prefix: str) -> str:
    """``prefix`` and 8 random hex digits: a topic, group or transactional id of one test."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, *, config: dict[str, str] | None = None,
                 timeout: float = 10.0) -> None:
    """CreateTopics with replication factor 1 through a new AdminClient; waits for the answer.

    Raises:
        KafkaException: the broker refused, or no answer within ``timeout`` s.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    kwargs = {} if config is None else {"config": config}
    admin.create_topics([NewTopic(name, partitions, 1, **kwargs)])[name].result(timeout)


def read_to_end(bootstrap: str, topic: str, partitions: int | list[int], isolation: str,
                timeout: float = 20.0, conf: dict | None = None) -> list:
    """Every message up to the end (the LSO for read_committed) of the partitions.

    Args:
        partitions: how many (0..n-1), or which.
        isolation: ``read_committed`` or ``read_uncommitted``.
        conf: more client settings (e.g. a secure cluster's ``client.properties``).

    Raises:
        AssertionError: an error message, or no EOF on every partition within ``timeout`` s.
    """
    parts = list(range(partitions)) if isinstance(partitions, int) else list(partitions)
    c = Consumer({"bootstrap.servers": bootstrap, **(conf or {}), "group.id": f"reader-{uuid.uuid4()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out, eof = [], set()
    deadline = time.monotonic() + timeout
    try:
        while len(eof) < len(parts) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    continue
                raise AssertionError(m.error())
            out.append(m)
    finally:
        c.close()
    assert len(eof) == len(parts), f"no EOF on every partition of {topic} within {timeout}s"
    return out


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(low, high) watermarks of a partition, asked of its leader (not cached)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uniq("watermarks")})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=5, cached=False)
    finally:
        c.close()


def values(msgs) -> list[bytes]:
    return [m.value() for m in msgs]


def txn_producer(bootstrap: str, txn_id: str, **conf) -> Producer:
    """A transactional Producer (linger 5 ms); ``conf`` adds or overrides settings."""
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **conf})
