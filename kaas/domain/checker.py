"""A Jepsen-style history checker for exactly-once runs (pure: no I/O, no clock).

Inputs are three histories gathered by a harness:

- the writes: every value a producer tried to write, with whether the producer saw it
  acknowledged (a committed transaction, or a successful idempotent send);
- the transactions a producer aborted (deliberately or because the client had to);
- the consumed log: what a read_committed consumer read back, each record with its
  partition, offset, the value, the producer stream it belongs to and that stream's
  order for it, and the transaction that wrote it.

``check`` reports every violation with the records involved:

- lost: an acknowledged value never read;
- duplicate: a value read more than once;
- aborted read: a record of an aborted transaction visible;
- phantom: a value read that nobody wrote;
- non-monotonic: within one (producer stream, partition), a record at a higher offset
  that comes earlier in the stream's order than one before it (first copies only: a
  later copy of a value is a duplicate, not also an ordering fault).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Read:
    """One record read back."""

    value: Hashable
    partition: int
    offset: int
    stream: Hashable = None
    """The producer stream the record belongs to (ordering is checked within it)."""
    order: int = 0
    """The record's position in its stream's order."""
    txn: Hashable = None
    """The transaction that wrote it, if any."""


@dataclass(frozen=True, slots=True)
class Write:
    """One value a producer tried to write."""

    value: Hashable
    acked: bool = True


@dataclass
class Report:
    lost: list[Hashable] = field(default_factory=list)
    duplicates: dict[Hashable, list[Read]] = field(default_factory=dict)
    aborted_reads: list[Read] = field(default_factory=list)
    phantoms: list[Read] = field(default_factory=list)
    non_monotonic: list[tuple[Read, Read]] = field(default_factory=list)
    """(earlier record, later record whose order went backwards)."""
    reads: int = 0

    @property
    def duplicate_count(self) -> int:
        """Extra copies: a value read three times counts two."""
        return sum(len(rs) - 1 for rs in self.duplicates.values())

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicates or self.aborted_reads or self.phantoms or self.non_monotonic)

    def violations(self, limit: int = 20) -> list[str]:
        """Human-readable lines naming the violating records (at most ``limit`` per kind)."""
        out: list[str] = []

        def where(r: Read) -> str:
            return f"p{r.partition}@{r.offset} (stream {r.stream!r} #{r.order}, txn {r.txn!r})"

        for v in sorted(self.lost, key=repr)[:limit]:
            out.append(f"lost: {v!r} was acknowledged and never read")
        for v, rs in sorted(self.duplicates.items(), key=lambda kv: repr(kv[0]))[:limit]:
            out.append(f"duplicate: {v!r} read {len(rs)} times at " + ", ".join(where(r) for r in rs))
        for r in self.aborted_reads[:limit]:
            out.append(f"aborted read: {r.value!r} at {where(r)}")
        for r in self.phantoms[:limit]:
            out.append(f"phantom: {r.value!r} at {where(r)} was never written")
        for a, b in self.non_monotonic[:limit]:
            out.append(f"non-monotonic: {b.value!r} at {where(b)} after {a.value!r} at {where(a)}")
        return out


def check(writes: Iterable[Write], reads: Iterable[Read], aborted_txns: Iterable[Hashable] = ()) -> Report:
    """Check a history; see the module docstring for what each violation means."""
    written: dict[Hashable, bool] = {}
    for w in writes:
        written[w.value] = written.get(w.value, False) or w.acked
    aborted = set(aborted_txns)
    rep = Report()
    seen: dict[Hashable, list[Read]] = defaultdict(list)
    per_stream: dict[tuple[Hashable, int], list[Read]] = defaultdict(list)
    for r in reads:
        rep.reads += 1
        seen[r.value].append(r)
        if r.value not in written:
            rep.phantoms.append(r)
        if r.txn is not None and r.txn in aborted:
            rep.aborted_reads.append(r)
        per_stream[(r.stream, r.partition)].append(r)
    rep.lost = [v for v, acked in written.items() if acked and v not in seen]
    rep.duplicates = {v: rs for v, rs in seen.items() if len(rs) > 1}
    for rs in per_stream.values():
        rs.sort(key=lambda r: r.offset)
        high: Read | None = None
        firsts: set[Hashable] = set()
        for r in rs:
            if r.value in firsts:
                continue  # a re-read copy is a duplicate, reported as such
            firsts.add(r.value)
            if high is not None and r.order < high.order:
                rep.non_monotonic.append((high, r))
            if high is None or r.order >= high.order:
                high = r
    return rep
