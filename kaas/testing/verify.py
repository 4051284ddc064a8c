"""Verdicts on exactly-once processing: ``exactly_once(config, input, output, group=...)``.

An application consumed ``input`` and produced ``output`` with transactions (KIP-447:
offsets committed in the transaction). Once it stopped, ``exactly_once`` reads both back
and judges:

- the history, by ``kaas.domain.checker`` (the checker ``scripts/eos_harness`` uses):
  every input record owed (below the group's committed offset) in the output exactly once
  (``lost``, ``duplicates``), nothing of an aborted transaction (``aborted_reads``, when
  the caller tags transactions), nothing nobody sent (``phantoms``), each input
  partition's order kept (``non_monotonic``);
- the group's committed offsets against the input's end offsets (every input record
  consumed and committed);
- the transactions still open on the output after ``open_txn_wait`` seconds (a
  transaction must end: by commit, abort or its timeout);
- the transactional read anomalies of a read_committed consumer (librdkafka) against the
  output's log as the brokers hold it (``kaas.testing.anomalies``: aborted, uncommitted,
  skipped, fractured, inconsistent and out-of-order reads), through a raw Fetch of every
  batch and marker.

Output records are matched to input records by ``output_id(record)`` and
``input_id(record)`` (default: the value bytes, for an application that copies values),
or by ``origin(record)`` giving the input's (id, partition, offset) straight from an
output record.

Needs confluent-kafka (the reader whose view is judged).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kaas.domain import checker
from kaas.domain.checker import Read, Report, Write, check
from kaas.testing.anomalies import Anomaly, Record, check_reads

__all__ = ["Anomaly", "Origin", "Read", "Record", "Report", "Verdict", "VerifyError", "Write", "check",
           "committed_offsets", "end_offsets", "exactly_once", "read_topic", "wait_transactions_complete"]

OPEN_TXN_WAIT_S = 45.0


class VerifyError(Exception):
    """A topic could not be read back (ListOffsets or Fetch kept failing)."""


@dataclass(frozen=True, slots=True)
class Origin:
    """The input record an output record came from: its identity and place."""

    id: Hashable
    partition: int
    offset: int


@dataclass
class Verdict:
    """What ``exactly_once`` found. ``ok`` when nothing is wrong; ``violations()`` in words."""

    report: Report
    committed: dict[int, int]
    input_ends: dict[int, int]
    open_transactions: dict[int, tuple[int, int]] = field(default_factory=dict)
    anomalies: list[Anomaly] = field(default_factory=list)
    uncopied: int = 0
    output_records: int = 0
    open_txn_wait_s: float = 0.0
    complete: bool = True
    records: list[Record] = field(default_factory=list)
    """The output as the reader returned it."""

    @property
    def duplicates(self) -> dict[Hashable, list[Read]]:
        return self.report.duplicates

    @property
    def lost(self) -> list[Hashable]:
        return self.report.lost

    @property
    def offsets_match(self) -> bool:
        return self.committed == self.input_ends

    @property
    def ok(self) -> bool:
        return (self.report.ok and not self.open_transactions and not self.anomalies
                and (self.offsets_match or not self.complete))

    def violations(self, limit: int = 20) -> list[str]:
        out = self.report.violations(limit)
        if self.complete and not self.offsets_match:
            out.append(f"copy incomplete: committed offsets {self.committed} != input end offsets "
                       f"{self.input_ends} ({self.uncopied} values not copied)")
        if self.open_transactions:
            out.append(f"transactions still open on the output after {self.open_txn_wait_s:.1f} s "
                       f"(partition: (LSO, HW)) {self.open_transactions}; read to the LSO")
        out += [str(a) for a in self.anomalies]
        return out

    def assert_ok(self) -> None:
        """Raises: AssertionError: naming every violation."""
        if not self.ok:
            raise AssertionError("exactly-once violated:\n  " + "\n  ".join(self.violations()))


# ----------------------------------------------------------------------------- reading


def _conf(config: Mapping[str, Any], **more: Any) -> dict[str, Any]:
    return {**config, "reconnect.backoff.max.ms": 1000, **more}


def end_offsets(config: Mapping[str, Any], topic: str, timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    """Each partition's (last stable offset, high watermark), asked afresh (ListOffsets
    read_committed and read_uncommitted). LSO < HW while a transaction is open there."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(_conf(config))
    parts = admin.list_topics(topic, timeout=timeout).topics[topic].partitions
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    req = {TopicPartition(topic, p): latest for p in parts}
    got = {}
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        futs = admin.list_offsets(req, isolation_level=level, request_timeout=timeout)
        got[level] = {tp.partition: f.result(timeout).offset for tp, f in futs.items()}
    return {p: (got[IsolationLevel.READ_COMMITTED][p], got[IsolationLevel.READ_UNCOMMITTED][p]) for p in sorted(parts)}


def wait_transactions_complete(config: Mapping[str, Any], topic: str, deadline: float,
                               say: Callable[[str], None] | None = None) -> tuple[dict[int, tuple[int, int]], float]:
    """Poll until no transaction is open on any partition of ``topic`` (LSO == HW
    everywhere), at most until ``deadline`` (``time.monotonic()``). Returns the last answer
    and the seconds waited. ListOffsets errors while a leader moves are retried.

    Raises:
        VerifyError: ListOffsets still failed at ``deadline``.
    """
    t0 = time.monotonic()
    ends: dict[int, tuple[int, int]] = {}
    said = False
    while True:
        try:
            ends = end_offsets(config, topic)
            if all(lso == hw for lso, hw in ends.values()):
                break
        except Exception as exc:  # noqa: BLE001 - a leader moving: ask again
            if time.monotonic() >= deadline:
                raise VerifyError(f"ListOffsets on {topic} kept failing: {exc}") from None
        if time.monotonic() >= deadline:
            break
        if say is not None and not said and time.monotonic() - t0 > 1.0:
            open_parts = {p: e for p, e in ends.items() if e[0] != e[1]}
            say(f"  verify: waiting for transactions still open on {topic} (partition: (LSO, HW)) {open_parts}")
            said = True
        time.sleep(0.25)
    return ends, time.monotonic() - t0


def read_topic(config: Mapping[str, Any], topic: str, isolation: str = "read_committed",
               targets: Mapping[int, int] | None = None, timeout: float = 60.0,
               group: str | None = None) -> list[Record]:
    """Every record of ``topic`` from offset 0 through a confluent-kafka consumer, in the
    order it returned them: up to ``targets`` (partition: offset, e.g. the LSOs), or to each
    partition's first end of partition.

    Raises:
        VerifyError: not read through within ``timeout`` s.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer(_conf(config, **{"group.id": group or f"kaas-verify-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "isolation.level": isolation,
                                  "enable.partition.eof": True}))
    try:
        parts = sorted(targets) if targets is not None else sorted(c.list_topics(topic, timeout=10).topics[topic]
                                                                    .partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Record] = []
        done = {p for p in parts if targets is not None and targets[p] <= 0}
        deadline = time.monotonic() + timeout
        while len(done) < len(parts):
            if time.monotonic() > deadline:
                raise VerifyError(f"{topic}: partitions {sorted(set(parts) - done)} not read through in {timeout} s")
            for m in c.consume(2000, 0.5):
                err, partition, offset = m.error(), m.partition(), m.offset()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and targets is None and partition is not None:
                        done.add(partition)
                    continue
                assert partition is not None and offset is not None
                out.append(Record(partition, offset, m.key(), m.value(), timestamp=m.timestamp()[1]))
            if targets is not None:
                for tp in c.position([TopicPartition(topic, p) for p in parts if p not in done]):
                    if tp.offset >= targets[tp.partition]:
                        done.add(tp.partition)
        return out
    finally:
        c.close()


def committed_offsets(config: Mapping[str, Any], group: str, topic: str, partitions: Sequence[int],
                      attempts: int = 30) -> dict[int, int]:
    """The group's committed offset of each partition (-1001: none); asked again while the
    coordinator answers errors, per partition or for the whole request (still moving:
    NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    moving = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
              KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError._TRANSPORT}

    c = Consumer(_conf(config, **{"group.id": group, "enable.auto.commit": False}))
    try:
        committed: dict[int, int] = {}
        for attempt in range(attempts):
            try:
                got = c.committed([TopicPartition(topic, p) for p in partitions], 30)
            except KafkaException as exc:
                if attempt == attempts - 1 or exc.args[0].code() not in moving:
                    raise
                time.sleep(1)
                continue
            committed = {tp.partition: tp.offset for tp in got}
            if not any(tp.error for tp in got):
                break
            time.sleep(1)
        return committed
    finally:
        c.close()


# ----------------------------------------------------------------------------- the verdict


def exactly_once(config: Mapping[str, Any], input: str, output: str, *, group: str,
                 input_id: Callable[[Record], Hashable] = lambda r: r.value,
                 output_id: Callable[[Record], Hashable] = lambda r: r.value,
                 origin: Callable[[Record], Origin] | None = None, expected: Sequence[Origin] | None = None,
                 txn_of: Callable[[Record], Hashable] | None = None, aborted: Collection[Hashable] = (),
                 complete: bool = True, log_check: bool = True, timeout: float = 120.0,
                 open_txn_wait: float = OPEN_TXN_WAIT_S, reader_config: Mapping[str, Any] | None = None,
                 reader_group: str | None = None, say: Callable[[str], None] | None = None) -> Verdict:
    """Judge an application that copied ``input`` to ``output`` exactly once as consumer
    group ``group`` (see the module docstring). Call it once the application stopped.

    Args:
        config: a confluent-kafka config for the cluster (``Cluster.client_config()``),
            used for the group's offsets and the ends (the admin's rights on a secure cluster).
        input_id, output_id: the identity shared by an input record and its output.
        origin: instead, the input record of an output record, straight from it.
        expected: the input records (default: ``input`` read back).
        txn_of, aborted: each output record's transaction and the transactions the
            application aborted (then reads of them are ``aborted_reads``, and partly read
            committed ones ``fractured-read``).
        complete: the group must have consumed the whole input (committed == end).
        log_check: judge the reader against the output's log (``kaas.testing.anomalies``).
        reader_config: the reader's config (default ``config``), e.g. a least-privilege user.
    """
    reader = dict(reader_config or config)
    deadline = time.monotonic() + timeout
    ends_out, waited = wait_transactions_complete(config, output, min(deadline, time.monotonic() + open_txn_wait), say)
    still_open = {p: e for p, e in ends_out.items() if e[0] != e[1]}
    lso = {p: e[0] for p, e in ends_out.items()}
    outs = read_topic(reader, output, "read_committed", targets=lso, timeout=max(1.0, deadline - time.monotonic()),
                      group=reader_group)
    in_ends = {p: hw for p, (_lso, hw) in end_offsets(config, input).items()}
    committed = committed_offsets(config, group, input, sorted(in_ends))
    if expected is None:
        expected = [Origin(input_id(r), r.partition, r.offset)
                    for r in read_topic(config, input, "read_committed", timeout=max(1.0, deadline - time.monotonic()))]
    by_id = {o.id: o for o in expected}
    owed = {o.id: o.offset < max(committed.get(o.partition, 0), 0) for o in expected}
    reads = []
    for r in outs:
        src = origin(r) if origin is not None else by_id.get(output_id(r))
        value = src.id if src is not None else ("unmatched", output_id(r))
        reads.append(checker.Read(value, r.partition, r.offset, stream=None if src is None else f"in-{src.partition}",
                                  order=-1 if src is None else src.offset,
                                  txn=None if txn_of is None else txn_of(r)))
    report = check([Write(i, acked=a) for i, a in owed.items()], reads, aborted)
    anomalies: list[Anomaly] = []
    if log_check:
        from kaas.testing.rawlog import read_log

        anomalies = check_reads(read_log(reader, output, ends={p: hw for p, (_l, hw) in ends_out.items()}), outs,
                                ends=lso, txn_of=txn_of)
    return Verdict(report=report, committed=committed, input_ends=in_ends, open_transactions=still_open,
                   anomalies=anomalies, uncopied=sum(1 for a in owed.values() if not a), output_records=len(outs),
                   open_txn_wait_s=round(waited, 2), complete=complete, records=outs)
