"""Transactional read anomalies, Elle-style: what a read_committed consumer returned,
judged against the topic's log as the brokers hold it (data batches and the transaction
markers that close them). Pure: no I/O.

Only what Kafka's transactions promise is judged (Kafka does not promise serializable
ordering between transactions, so a cycle of write orders across partitions, Elle's G0, is
no anomaly here; and a consume-transform-produce output records no reads, so Elle's
G1c and G2 have nothing to work on):

- ``aborted-read`` (Elle's G1a): a record of a transaction its marker aborted was returned;
- ``uncommitted-read``: a record of a transaction not yet closed by a marker was returned
  (read_committed stops at the last stable offset);
- ``poll-skip``: a committed (or non-transactional) record below the reader's end was not
  returned;
- ``inconsistent-read``: the reader returned, at an offset, a value other than the log's,
  or an offset where the log has no data record;
- ``nonmonotonic-poll``: within a partition the reader's offsets did not increase;
- ``fractured-read`` (read atomicity): given each record's transaction (``txn_of``), a
  committed transaction was returned in part.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

COMMITTED, ABORTED, OPEN, PLAIN = "committed", "aborted", "open", "plain"
LIMIT = 10  # violating records named per anomaly kind


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a topic: where it is, and its key and value bytes."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int = -1
    transactional: bool = False
    timestamp: int = -1


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch of the log: a data batch's records, or a control batch's marker
    (``control``: 0 abort, 1 commit)."""

    partition: int
    base_offset: int
    producer_id: int
    transactional: bool
    control: int | None = None
    records: tuple[Record, ...] = ()


@dataclass
class Anomaly:
    kind: str
    records: list[Record] = field(default_factory=list)
    detail: str = ""

    def __str__(self) -> str:
        where = ", ".join(f"p{r.partition}@{r.offset}" for r in self.records[:LIMIT])
        more = f" (+{len(self.records) - LIMIT} more)" if len(self.records) > LIMIT else ""
        return f"{self.kind}: {self.detail}{' at ' if where else ''}{where}{more}"


def statuses(batches: Iterable[Batch]) -> dict[tuple[int, int], tuple[str, Record]]:
    """Each data record's standing, by (partition, offset): ``committed`` or ``aborted`` by
    its producer's next marker in that partition, ``open`` without one yet, ``plain`` when
    not transactional."""
    out: dict[tuple[int, int], tuple[str, Record]] = {}
    pending: dict[tuple[int, int], list[Record]] = defaultdict(list)  # (partition, producer) -> records
    for b in sorted(batches, key=lambda b: (b.partition, b.base_offset)):
        if b.control is not None:
            verdict = COMMITTED if b.control == 1 else ABORTED
            for r in pending.pop((b.partition, b.producer_id), []):
                out[(r.partition, r.offset)] = (verdict, r)
            continue
        for r in b.records:
            if b.transactional:
                pending[(b.partition, b.producer_id)].append(r)
            else:
                out[(r.partition, r.offset)] = (PLAIN, r)
    for records in pending.values():
        for r in records:
            out[(r.partition, r.offset)] = (OPEN, r)
    return out


def check_reads(batches: Iterable[Batch], reads: Sequence[Record], ends: dict[int, int] | None = None,
                txn_of: Callable[[Record], Hashable] | None = None) -> list[Anomaly]:
    """The anomalies of ``reads`` (records a read_committed consumer returned, in the order
    it returned them) against the log ``batches``. ``ends``: how far the reader read each
    partition (exclusive; default: past its last returned record)."""
    log = statuses(batches)
    found: dict[str, Anomaly] = {}

    def add(kind: str, r: Record, detail: str) -> None:
        found.setdefault(kind, Anomaly(kind, detail=detail)).records.append(r)

    last: dict[int, int] = {}
    returned: set[tuple[int, int]] = set()
    for r in reads:
        if r.offset <= last.get(r.partition, -1):
            add("nonmonotonic-poll", r, "offsets went backwards within a partition")
        last[r.partition] = max(r.offset, last.get(r.partition, -1))
        returned.add((r.partition, r.offset))
        standing = log.get((r.partition, r.offset))
        if standing is None:
            add("inconsistent-read", r, "returned where the log has no data record")
            continue
        status, logged = standing
        if status == ABORTED:
            add("aborted-read", r, "records of aborted transactions returned (G1a)")
        elif status == OPEN:
            add("uncommitted-read", r, "records of transactions not yet committed returned")
        if logged.value != r.value or logged.key != r.key:
            add("inconsistent-read", r, "a value other than the log's returned")
    reach = ends if ends is not None else {p: o + 1 for p, o in last.items()}
    for (p, o), (status, logged) in sorted(log.items()):
        if status in (COMMITTED, PLAIN) and o < reach.get(p, 0) and (p, o) not in returned:
            add("poll-skip", logged, "committed records below the reader's end not returned")
    if txn_of is not None:
        members: dict[Hashable, list[Record]] = defaultdict(list)
        for status, logged in log.values():
            if status == COMMITTED:
                members[txn_of(logged)].append(logged)
        for txn, rs in members.items():
            seen = [r for r in rs if (r.partition, r.offset) in returned]
            if seen and len(seen) < len(rs):
                for r in rs:
                    if (r.partition, r.offset) not in returned:
                        add("fractured-read", r, f"a committed transaction returned in part ({txn!r})")
    order = ("aborted-read", "uncommitted-read", "fractured-read", "poll-skip", "inconsistent-read",
             "nonmonotonic-poll")
    return [found[k] for k in order if k in found]
