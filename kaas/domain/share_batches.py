"""How a ShareFetch answer groups the records it acquired (the request's ``BatchSize``).

Apache 4.4 (``SharePartition.createBatches``): records delivered for the first time are
acquired as one range from the first to the last offset taken, then, in the default
``batch_optimized`` mode and when the range holds more than ``BatchSize`` offsets, cut
at the log's batch boundaries: a new acquired batch starts at the first log batch whose
base offset is ``BatchSize`` or more past the start of the current one. A log batch is
never cut, so an acquired batch may exceed ``BatchSize`` by one log batch less one
record; in ``record_limit`` mode nothing is cut. Records delivered again keep the ranges
their state gives them. Apache acquires once, when the answer is due; kaas may acquire a
partition's records in steps while an answer waits for ``MinBytes``: it joins the steps
(``join_acquired``) and cuts the whole, as that one acquisition would be cut.

Pure: ranges in, ranges out.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["join_acquired", "split_acquired"]

Acquired = tuple[int, int, int]  # (first offset, last offset, delivery count)


def split_acquired(acquired: Sequence[Acquired], bases: Sequence[int], batch_size: int) -> list[Acquired]:
    """``acquired`` with each first delivery (delivery count 1) cut as Apache cuts it.

    Args:
        acquired: the ranges acquired, in offset order.
        bases: the base offsets of the log batches read, in order.
        batch_size: the request's ``BatchSize``; 0 or less cuts nothing (Apache's own
            arithmetic would answer an empty range for it).
    """
    if batch_size <= 0:
        return list(acquired)
    out: list[Acquired] = []
    for first, last, count in acquired:
        if count != 1 or last - first + 1 <= batch_size:
            out.append((first, last, count))
            continue
        start = first
        for base in bases:
            if base > last:
                break
            if base > start and base - start >= batch_size:
                out.append((start, base - 1, count))
                start = base
        out.append((start, last, count))
    return out



def join_acquired(before: Sequence[Acquired], after: Sequence[Acquired]) -> list[Acquired]:
    """``before`` then ``after`` (a later acquisition from the same partition for the same
    answer), a first delivery that continues the last one joined to it: what one
    acquisition would have taken, to be cut by ``split_acquired``."""
    out = list(before)
    for first, last, count in after:
        if out and count == 1 and out[-1][2] == 1 and out[-1][1] + 1 == first:
            out[-1] = (out[-1][0], last, 1)
        else:
            out.append((first, last, count))
    return out
