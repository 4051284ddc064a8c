"""The history checker: a clean history passes; each kind of fault injected into one is
reported, with the records involved, and nothing else is."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kaas.domain.checker import Read, Write, check


def clean_history(streams: int, per_stream: int, per_txn: int):
    """Each stream's values go to partition = stream, in order, in transactions of per_txn."""
    writes, reads = [], []
    offsets = [0] * streams
    for s in range(streams):
        for i in range(per_stream):
            v = (s, i)
            writes.append(Write(v))
            reads.append(Read(v, partition=s, offset=offsets[s], stream=s, order=i, txn=(s, i // per_txn)))
            offsets[s] += 1
    return writes, reads


histories = st.builds(clean_history, st.integers(1, 4), st.integers(1, 30), st.integers(1, 7))


@given(histories)
def test_clean_history_passes(h):
    writes, reads = h
    rep = check(writes, reads, aborted_txns={("none", 0)})
    assert rep.ok, rep.violations()
    assert rep.reads == len(reads)
    assert rep.violations() == []


@given(histories, st.data())
def test_a_missing_acknowledged_write_is_lost(h, data):
    writes, reads = h
    gone = data.draw(st.sampled_from(reads))
    rep = check(writes, [r for r in reads if r is not gone])
    assert rep.lost == [gone.value]
    assert not (rep.duplicates or rep.aborted_reads or rep.phantoms or rep.non_monotonic)
    assert "lost" in rep.violations()[0]


@given(histories, st.data())
def test_an_unacknowledged_write_may_be_missing(h, data):
    writes, reads = h
    gone = data.draw(st.sampled_from(reads))
    writes = [Write(w.value, acked=w.value != gone.value) for w in writes]
    assert check(writes, [r for r in reads if r is not gone]).ok


@given(histories, st.data())
def test_a_value_read_twice_is_a_duplicate_and_not_also_an_order_fault(h, data):
    writes, reads = h
    again = data.draw(st.sampled_from(reads))
    end = max(r.offset for r in reads if r.partition == again.partition) + 1
    copy = Read(again.value, again.partition, end, again.stream, again.order, txn="retry")
    rep = check(writes, [*reads, copy])
    assert rep.duplicates == {again.value: [again, copy]}
    assert rep.duplicate_count == 1
    assert not (rep.lost or rep.non_monotonic or rep.aborted_reads)
    assert "read 2 times" in rep.violations()[0]


@given(histories, st.data())
def test_records_of_an_aborted_transaction_are_aborted_reads(h, data):
    writes, reads = h
    txn = data.draw(st.sampled_from(sorted({r.txn for r in reads})))
    rep = check(writes, reads, aborted_txns={txn})
    assert rep.aborted_reads == [r for r in reads if r.txn == txn]
    assert not (rep.lost or rep.duplicates or rep.non_monotonic)


@given(histories, st.data())
def test_swapped_offsets_within_a_stream_are_non_monotonic(h, data):
    writes, reads = h
    pairs = [(a, b) for a, b in zip(reads, reads[1:]) if a.stream == b.stream]
    if not pairs:
        return
    a, b = data.draw(st.sampled_from(pairs))
    swapped = [Read(r.value, r.partition, b.offset if r is a else a.offset if r is b else r.offset,
                    r.stream, r.order, r.txn) for r in reads]
    rep = check(writes, swapped)
    assert len(rep.non_monotonic) == 1
    earlier, later = rep.non_monotonic[0]
    assert (earlier.value, later.value) == (b.value, a.value)
    assert not (rep.lost or rep.duplicates)


def test_a_value_nobody_wrote_is_a_phantom():
    writes, reads = clean_history(1, 3, 1)
    ghost = Read("ghost", 0, 3, 0, 3)
    rep = check(writes, [*reads, ghost])
    assert rep.phantoms == [ghost]
    assert "never written" in rep.violations()[0]


def test_ordering_is_per_stream_and_partition():
    # two streams interleaved in one partition, each in its own order: fine
    reads = [Read("a0", 0, 0, "a", 0), Read("b0", 0, 1, "b", 0), Read("a1", 0, 2, "a", 1), Read("b1", 0, 3, "b", 1)]
    writes = [Write(r.value) for r in reads]
    assert check(writes, reads).ok


def test_violations_are_capped_per_kind():
    writes = [Write(i) for i in range(100)]
    rep = check(writes, [])
    assert len(rep.lost) == 100
    assert len(rep.violations(limit=5)) == 5
