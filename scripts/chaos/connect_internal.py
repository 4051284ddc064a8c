"""Reads of the Connect workers' compacted internal topics for the ``connect`` scenario, as
a worker reads them at start-up: every partition from its start to its end, ``read_committed``
(the end: the high watermark when the read began, reached once the end-of-partition event
says so). Each read is a ``connect_verdict.Round``: the connectors and task configurations
the config topic holds (its latest record per key), the ``SequenceSource`` tasks' stored
offsets (``["seq", {"task": t}]`` -> ``{"next": n}``), the records read per topic.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable

from .connect_verdict import Round
from .connect_workers import PARTITIONS, TOPICS

ROUND_EVERY_S = 5.0
ROUND_TIMEOUT_S = 60.0
SOURCE = "seq"


def read_round(c) -> Round:
    """One read of the three topics with the consumer ``c`` (``reader``); not ``ok`` if
    any did not reach its end in ``ROUND_TIMEOUT_S``."""
    from confluent_kafka import KafkaException

    at, t0 = time.time(), time.monotonic()
    r = Round(at=at, ok=False)
    try:
        records = _read_all(c, at)
    except (KafkaException, TimeoutError) as exc:
        r.error = str(exc)[:200]
        return r
    finally:
        r.seconds = round(time.monotonic() - t0, 2)
    configs = _latest(records[TOPICS["config"]])
    r.connectors = sorted(k[len("connector-"):] for k in configs if k.startswith("connector-"))
    r.task_configs = sorted(k[len("task-"):] for k in configs if k.startswith("task-"))
    for key, value in _latest(records[TOPICS["offset"]]).items():
        name, partition = json.loads(key)
        if name == SOURCE:
            r.source_offsets[int(partition["task"])] = int(json.loads(value)["next"])
    r.records = {t: len(v) for t, v in records.items()}
    r.ok = True
    return r


def reader(bootstrap: str):
    """The consumer the rounds read with (no group: each round assigns every partition)."""
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": "connect-internal-verifier",
                     "enable.auto.commit": False, "isolation.level": "read_committed", "enable.partition.eof": True,
                     "log_level": 2, "reconnect.backoff.max.ms": 1000})


def _read_all(c, began: float) -> dict[str, list[tuple[str, bytes | None]]]:
    from confluent_kafka import KafkaError, TopicPartition

    tps = [TopicPartition(TOPICS[k], p) for k, n in PARTITIONS.items() for p in range(n)]
    deadline = time.monotonic() + ROUND_TIMEOUT_S
    c.assign([TopicPartition(tp.topic, tp.partition, 0) for tp in tps])  # from the start (the topics known first)
    ends = {(tp.topic, tp.partition): _high_watermark(c, tp, deadline) for tp in tps}
    reached = {k: e == 0 for k, e in ends.items()}
    out: dict[str, list[tuple[str, bytes | None]]] = {t: [] for t in TOPICS.values()}
    while not all(reached.values()):
        if time.monotonic() > deadline:
            left = sorted(f"{t}-{p}" for (t, p), ok in reached.items() if not ok)
            raise TimeoutError(f"not at the end of {left} {ROUND_TIMEOUT_S:.0f} s after {time.ctime(began)}")
        for m in c.consume(500, 0.5):
            err = m.error()
            key = (m.topic(), m.partition())
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF and m.offset() >= ends[key]:
                    reached[key] = True
                continue
            out[m.topic()].append(((m.key() or b"").decode(), m.value()))
    return out


def _high_watermark(c, tp, deadline: float) -> int:
    from confluent_kafka import KafkaException

    while True:
        try:
            return int(c.get_watermark_offsets(tp, timeout=5, cached=False)[1])
        except KafkaException:
            if time.monotonic() > deadline:
                raise


def _latest(records: list[tuple[str, bytes | None]]) -> dict[str, bytes]:
    """The compacted view: each key's latest value, a tombstone removing it."""
    view: dict[str, bytes] = {}
    for k, v in records:
        if v is None:
            view.pop(k, None)
        else:
            view[k] = v
    return view


class InternalReader:
    """A round every ``ROUND_EVERY_S`` from a thread of its own, and a last one at the end."""

    def __init__(self, bootstrap: str) -> None:
        self.c = reader(bootstrap)
        self.rounds: list[Round] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="connect-internal", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(ROUND_EVERY_S):
            self.rounds.append(read_round(self.c))

    def close(self, final: bool) -> list[Round]:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(ROUND_TIMEOUT_S + 30)
        if final:
            self.rounds.append(read_round(self.c))
        self.c.close()
        return self.rounds


def cleanup_policies(bootstrap: str, topics: Iterable[str]) -> dict[str, str]:
    """Each topic's ``cleanup.policy``, as DescribeConfigs answers it."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    out = {}
    for t in topics:
        res = ConfigResource("topic", t)
        out[t] = admin.describe_configs([res], request_timeout=30)[res].result(60)["cleanup.policy"].value
    return out
