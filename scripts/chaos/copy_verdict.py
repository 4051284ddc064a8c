"""The ``apache-eos`` scenario's verdict (pure): was every input message copied exactly once,
and in order?

The copiers (Apache's ``TransactionalMessageCopier``) write each record to the output
partition of the same number as its input partition, one input partition at a time, the
offsets committed in the same transaction: so the committed output partition ``p`` must be
exactly the input partition ``p``, value for value, in order. The output is judged by its
offsets: a consumer that reads a record twice (a rebalance before its commit: at-least-once
reading) shows the same offset twice, which is no duplicate in the topic; the same value at
two offsets is.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import NamedTuple

EXAMPLES = 5  # values listed per kind of anomaly


class Read(NamedTuple):
    """One record as a consumer of the output reported it."""

    partition: int
    offset: int
    value: str


def copy_verdict(inputs: dict[int, list[str]], reads: list[Read]) -> dict:
    """``inputs``: each input partition's values in offset order; ``reads``: the output
    records as consumed (in any order, re-reads allowed). Answers the counts, a few examples
    of each anomaly, and ``ok``."""
    by_offset: dict[tuple[int, int], str] = {}
    conflicts: list[tuple[int, int, str, str]] = []
    for r in reads:
        seen = by_offset.setdefault((r.partition, r.offset), r.value)
        if seen != r.value:
            conflicts.append((r.partition, r.offset, seen, r.value))
    out: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for (p, o), v in by_offset.items():
        out[p].append((o, v))
    counts = Counter(by_offset.values())
    wanted = {v for vs in inputs.values() for v in vs}
    dups = sorted((v for v, c in counts.items() if c > 1), key=_num)
    lost = sorted(wanted - counts.keys(), key=_num)
    unexpected = sorted(counts.keys() - wanted, key=_num)
    misordered = []
    for p in sorted(set(inputs) | set(out)):
        got = [v for _, v in sorted(out.get(p, []))]
        if got != inputs.get(p, []):
            misordered.append(p)
    result = {
        "input": len(wanted),
        "output": len(by_offset),
        "output_values": len(counts),
        "duplicates": sum(counts[v] - 1 for v in dups),
        "lost": len(lost),
        "unexpected": len(unexpected),
        "conflicting_offsets": len(conflicts),
        "reread": len(reads) - len(by_offset),
        "partitions_not_equal_to_input": misordered,
        "examples": {"duplicates": dups[:EXAMPLES], "lost": lost[:EXAMPLES], "unexpected": unexpected[:EXAMPLES],
                     "conflicting_offsets": [list(c) for c in conflicts[:EXAMPLES]]},
    }
    result["ok"] = not (dups or lost or unexpected or conflicts or misordered)
    return result


def _num(v: str) -> tuple[int, str]:
    """Sort VerifiableProducer's integer values numerically, anything else after them."""
    return (int(v), "") if v.isdigit() else (1 << 62, v)
