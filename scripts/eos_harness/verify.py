"""The exactly-once check: read the output back (read_committed) once no transaction is
open on it, and check the history with ``kaas.domain.checker``.

No click and no process handling here: a failure the caller must report is a
``VerifyError``.
"""

from __future__ import annotations

import json
import time
import uuid

from kaas.domain import checker

from .config import HarnessConfig, security, verify_group

OPEN_TXN_WAIT_S = 45.0  # verify: how long to wait for the output's open transactions to complete



class VerifyError(Exception):
    """The output could not be read back (ListOffsets kept failing)."""


def end_offsets(admin, topic: str, partitions: int, timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    """Each partition's (last stable offset, high watermark): two fresh ListOffsets answers
    (through ``admin``, an AdminClient), read_committed and read_uncommitted. LSO < HW while
    a transaction is open there."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    req = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    got = {}
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        futs = admin.list_offsets(req, isolation_level=level, request_timeout=timeout)
        got[level] = {tp.partition: f.result(timeout).offset for tp, f in futs.items()}
    return {p: (got[IsolationLevel.READ_COMMITTED][p], got[IsolationLevel.READ_UNCOMMITTED][p])
            for p in range(partitions)}


def wait_transactions_complete(bootstrap: str, topic: str, partitions: int, deadline: float,
                               echo=None, conf: dict | None = None) -> tuple[dict[int, tuple[int, int]], float]:
    """Poll until no transaction is open on any partition of ``topic`` (LSO == HW
    everywhere), at most until ``deadline``. Returns the last answer and the seconds waited.
    ListOffsets errors while a leader moves are retried.

    Raises:
        VerifyError: ListOffsets still failed at ``deadline``.
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**(conf or {}), "bootstrap.servers": bootstrap, "reconnect.backoff.max.ms": 1000})
    t0 = time.monotonic()
    ends: dict[int, tuple[int, int]] = {}
    said = False
    while True:
        try:
            ends = end_offsets(admin, topic, partitions)
            if all(lso == hw for lso, hw in ends.values()):
                break
        except Exception as exc:  # noqa: BLE001 — a leader moving: ask again
            ends = ends or {}
            if time.monotonic() >= deadline:
                raise VerifyError(f"ListOffsets on {topic} kept failing: {exc}") from None
        if time.monotonic() >= deadline:
            break
        if echo is not None and not said and time.monotonic() - t0 > 1.0:
            open_parts = {p: e for p, e in ends.items() if e[0] != e[1]}
            echo(f"  verify: waiting for transactions still open on {topic} (partition: (LSO, HW)) "
                 f"{open_parts}", err=True)
            said = True
        time.sleep(0.25)
    return ends, time.monotonic() - t0


def read_output(bootstrap: str, topic: str, partitions: int, isolation: str, deadline: float,
                targets: dict[int, int] | None = None, conf: dict | None = None, group: str | None = None) -> list:
    """Read every partition of ``topic`` from offset 0. A partition is done at its first EOF
    or, given ``targets``, once the consumer's position reaches its target offset (librdkafka
    reports EOF only once per assignment, so a read that must reach a known offset checks
    the position rather than waiting for a second EOF)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**(conf or {}), "bootstrap.servers": bootstrap, "group.id": group or f"verify-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    done: set[int] = {p for p, t in (targets or {}).items() if t <= 0}
    while len(done) < partitions and time.monotonic() < deadline:
        for m in c.consume(2000, 0.5):
            if m.error():
                if m.error().code() == m.error()._PARTITION_EOF:
                    done.add(m.partition())
                continue
            out.append((m.partition(), m.offset(), json.loads(m.value()), m.timestamp()[1]))
        if targets:
            for tp in c.position([TopicPartition(topic, p) for p in range(partitions) if p not in done]):
                if tp.offset >= targets.get(tp.partition, 0):
                    done.add(tp.partition)
    c.close()
    return out


def verify(cfg: HarnessConfig, aborted_tags: set[str], echo=None) -> dict:
    """Read the output back (read_committed) and check the history with ``kaas.domain.checker``:
    every seeded value exactly once, nothing of an aborted transaction, each input
    partition's order kept in the output, and the group's offsets at the input end. First
    waits (``OPEN_TXN_WAIT_S`` at most) for the transactions still open on the output to
    complete; one that does not is a violation."""
    from confluent_kafka import Consumer, TopicPartition

    deadline = time.monotonic() + cfg.timeout
    ends_out, waited = wait_transactions_complete(cfg.bootstrap, cfg.output, cfg.output_partitions,
                                                  min(deadline, time.monotonic() + OPEN_TXN_WAIT_S), echo,
                                                  conf=security(cfg, "verifier"))
    still_open = {p: e for p, e in ends_out.items() if e[0] != e[1]}
    recs = read_output(cfg.bootstrap, cfg.output, cfg.output_partitions, "read_committed", deadline,
                       targets={p: lso for p, (lso, _hw) in ends_out.items()}, conf=security(cfg, "verifier"),
                       group=verify_group(cfg))
    reads = []
    max_latency = 0
    for part, off, v, ts in recs:
        reads.append(checker.Read(int(v["v"]), part, off, stream=f"in-{v['ip']}", order=v["io"], txn=v["tag"]))
        if ts > 0 and v["ts"] > 0:
            max_latency = max(max_latency, ts - v["ts"])
    # the group's committed offsets and the input's ends: the harness's own check, as the admin
    c = Consumer({**security(cfg), "bootstrap.servers": cfg.bootstrap, "group.id": cfg.group,
                  "enable.auto.commit": False})
    tps = [TopicPartition(cfg.input, p) for p in range(cfg.input_partitions)]
    committed: dict[int, int] = {}
    for _ in range(30):  # a coordinator still moving answers per-partition errors: ask again
        got = c.committed(tps, 30)
        committed = {tp.partition: tp.offset for tp in got}
        if not any(tp.error for tp in got):
            break
        time.sleep(1)
    ends = {p: c.get_watermark_offsets(TopicPartition(cfg.input, p), timeout=30)[1]
            for p in range(cfg.input_partitions)}
    c.close()
    # Value i was seeded to input partition i % P at offset i // P. Only values below the
    # group's committed offset are owed in the output; the rest were not copied yet (a run
    # that timed out), which is reported as such rather than as lost.
    n_parts = cfg.input_partitions
    owed = [i // n_parts < max(committed.get(i % n_parts, 0), 0) for i in range(cfg.messages)]
    writes = [checker.Write(i, acked=owed[i]) for i in range(cfg.messages)]
    report = checker.check(writes, reads, aborted_tags)
    violations = report.violations()
    uncopied = owed.count(False)
    if committed != ends:
        violations.append(f"copy incomplete: committed offsets {committed} != input end offsets {ends} "
                          f"({uncopied} values not copied)")
    if still_open:
        violations.append(f"transactions still open on the output after {waited:.1f} s (partition: (LSO, HW)) "
                          f"{still_open}; read to the LSO")
    return {"output_records": len(recs), "open_txn_wait_s": round(waited, 2), "open_txns_left": len(still_open),
            "duplicates": report.duplicate_count, "losses": len(report.lost),
            "order_violations": len(report.non_monotonic), "aborted_visible": len(report.aborted_reads),
            "uncopied": uncopied,
            "phantoms": len(report.phantoms), "offsets_match": committed == ends,
            "committed_offsets": committed, "input_ends": ends, "max_e2e_latency_ms": max_latency,
            "violations": violations}

