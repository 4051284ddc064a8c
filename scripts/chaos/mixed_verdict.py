"""The ``mixed-tv`` scenario's verdict (pure): one topic written by transaction.version 1
producers (librdkafka) and transaction.version 2 copiers (Apache's Java client), judged
record by record.

The TV1 producers' values name their transaction and its size (``tv1_value``); each
producer reports every transaction's outcome: ``committed``, ``aborted`` or ``unknown`` (a
fatal error left it undecided). The TV2 copiers copy the seed values (``seed_value``) into
the same partitions. A read of the topic (read_committed) is judged by
``kaas.domain.checker.check`` (lost, duplicates, aborted reads, phantoms, order within a
producer and partition) and, for the TV1 transactions, as wholes: a transaction of which
some records are visible and some not is torn, whatever its outcome. Reads are taken by
offset: a consumer re-reading a record is no duplicate, the same value at two offsets is.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from kaas.domain import checker

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
EXAMPLES = 5  # values listed per kind of anomaly
SEED_STREAM = "seed"


class Txn(NamedTuple):
    """One TV1 transaction as its producer saw it: how many records, and how it ended."""

    size: int
    outcome: str


class Rec(NamedTuple):
    """One record as read back."""

    partition: int
    offset: int
    value: str


def tv1_value(producer: str, txn: int, i: int, size: int) -> str:
    """Record ``i`` of the ``size`` records of transaction ``txn`` of TV1 producer ``producer``."""
    return f"tv1:{producer}:{txn}:{i}:{size}"


def seed_value(k: int) -> str:
    """The seed's ``k``-th value (``eos_harness.topics.seed`` writes it to partition
    ``k % P``, the ``k // P``-th there)."""
    return str(k)


def _parse(value: str, partitions: int) -> tuple[object, int, object]:
    """(stream, order, transaction) of a value; an unknown value is its own stream."""
    parts = value.split(":")
    if parts[0] == "tv1" and len(parts) == 5:
        producer, txn, i = parts[1], int(parts[2]), int(parts[3])
        return producer, txn * 1_000_000 + i, (producer, txn)
    if value.isdigit():
        return SEED_STREAM, int(value) // partitions, None
    return value, 0, None


def judge(reads: list[Rec], txns: dict[tuple[str, int], Txn], seed: int, partitions: int) -> dict:
    """Judge one read of the shared topic (or of a copy of it). ``txns``: every TV1
    transaction by (producer, number); ``seed``: how many seed values the TV2 copiers owe
    (each exactly once, in its partition's order). Answers the counts, examples and ``ok``."""
    by_offset: dict[tuple[int, int], str] = {}
    for r in reads:
        by_offset.setdefault((r.partition, r.offset), r.value)
    writes = [checker.Write(tv1_value(p, t, i, x.size), acked=x.outcome == COMMITTED)
              for (p, t), x in txns.items() for i in range(x.size)]
    writes += [checker.Write(seed_value(k)) for k in range(seed)]
    got = []
    for (p, o), v in sorted(by_offset.items()):
        stream, order, txn = _parse(v, partitions)
        got.append(checker.Read(v, p, o, stream=stream, order=order, txn=txn))
    aborted = {k for k, x in txns.items() if x.outcome == ABORTED}
    report = checker.check(writes, got, aborted)
    torn = torn_transactions(by_offset.values(), txns)
    tv1_seen = sum(1 for v in by_offset.values() if v.startswith("tv1:"))
    result = {
        "records": len(by_offset), "tv1_records": tv1_seen, "seed_records": len(by_offset) - tv1_seen,
        "lost": len(report.lost), "duplicates": report.duplicate_count, "aborted_reads": len(report.aborted_reads),
        "phantoms": len(report.phantoms), "order_violations": len(report.non_monotonic), "torn": len(torn),
        "examples": {"torn": [f"{p}:{t} ({n} of {txns[(p, t)].size} records, {txns[(p, t)].outcome})"
                              for (p, t), n in torn[:EXAMPLES]],
                     "violations": report.violations(EXAMPLES)},
    }
    result["ok"] = report.ok and not torn
    return result


def torn_transactions(values, txns: dict[tuple[str, int], Txn]) -> list[tuple[tuple[str, int], int]]:
    """The TV1 transactions of which some records but not all are among ``values`` (each
    distinct record counted once), with how many are; in transaction order."""
    seen: Counter[tuple[str, int]] = Counter()
    for v in set(values):
        parts = v.split(":")
        if parts[0] == "tv1" and len(parts) == 5:
            seen[(parts[1], int(parts[2]))] += 1
    return sorted((k, n) for k, n in seen.items() if k in txns and 0 < n < txns[k].size)


def aborted_in_log(reads: list[Rec], txns: dict[tuple[str, int], Txn]) -> int:
    """How many records of aborted TV1 transactions a read_uncommitted read found in the log
    (distinct offsets): the aborts the read_committed readers and copiers had to skip."""
    aborted = {k for k, x in txns.items() if x.outcome == ABORTED}
    found = 0
    for _off, v in {(r.partition, r.offset): r.value for r in reads}.items():
        parts = v.split(":")
        if parts[0] == "tv1" and len(parts) == 5 and (parts[1], int(parts[2])) in aborted:
            found += 1
    return found


def outcomes(txns: dict[tuple[str, int], Txn]) -> dict[str, dict[str, int]]:
    """Each TV1 producer's transactions by outcome."""
    out: dict[str, dict[str, int]] = {}
    for (p, _t), x in txns.items():
        counts = out.setdefault(p, {COMMITTED: 0, ABORTED: 0, UNKNOWN: 0})
        counts[x.outcome] += 1
    return out


def kills_by_point(faults: list[str], points: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """From the chaos's log (``scenarios.Chaos._endtxn_step``'s lines): per EndTxn failpoint,
    how often it was armed, how often a coordinator crashed at it and how often it did not
    fire in time."""
    out = {p: {"armed": 0, "crashes": 0, "not_fired": 0} for p in points}
    for line in faults:
        for p in points:
            if line == f"armed {p} (crash) on every broker":
                out[p]["armed"] += 1
            elif line.startswith("broker ") and line.endswith(f" crashed at {p}"):
                out[p]["crashes"] += 1
            elif line.startswith(f"{p} did not fire"):
                out[p]["not_fired"] += 1
    return out


def version_violations(versions: dict[str, dict], tv1_ids: list[str], tv2_ids: list[str]) -> list[str]:
    """The transactional ids whose last transaction (``transaction_version`` of their slot
    file entry, ``versions``) did not run under the version their client should negotiate."""
    bad = []
    for ids, want in ((tv1_ids, 1), (tv2_ids, 2)):
        for tid in ids:
            got = versions.get(tid, {}).get("transaction_version")
            if got != want:
                bad.append(f"{tid}: transaction.version {got}, expected {want}")
    return bad
