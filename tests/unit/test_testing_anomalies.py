"""kaas.testing.anomalies: a read_committed reader judged against a topic's log. A faithful
reader (exactly the committed and plain records below its end, in offset order) has no
anomaly on any log; each kind of wrong read is named as its kind."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kaas.testing.anomalies import Batch, Record, check_reads, statuses

COMMIT, ABORT = 1, 0


def data(p: int, off: int, pid: int, values: list[bytes], txn: bool = True) -> Batch:
    return Batch(p, off, pid, txn, records=tuple(Record(p, off + i, None, v, pid, txn) for i, v in enumerate(values)))


def marker(p: int, off: int, pid: int, kind: int) -> Batch:
    return Batch(p, off, pid, True, control=kind)


LOG = [
    data(0, 0, 7, [b"a", b"b"]),       # pid 7: committed
    data(0, 2, 8, [b"x"]),             # pid 8: aborted
    marker(0, 3, 7, COMMIT),
    marker(0, 4, 8, ABORT),
    data(0, 5, 9, [b"p"], txn=False),  # plain
    data(0, 6, 7, [b"c"]),             # open
]


def rec(p: int, off: int, value: bytes) -> Record:
    return Record(p, off, None, value)


def test_statuses_follow_each_producers_next_marker():
    got = {k: s for k, (s, _r) in statuses(LOG).items()}
    assert got == {(0, 0): "committed", (0, 1): "committed", (0, 2): "aborted", (0, 5): "plain", (0, 6): "open"}


def test_a_faithful_read_has_no_anomaly():
    assert check_reads(LOG, [rec(0, 0, b"a"), rec(0, 1, b"b"), rec(0, 5, b"p")], ends={0: 6}) == []


def test_each_wrong_read_is_named():
    reads = [rec(0, 1, b"b"), rec(0, 0, b"a"), rec(0, 2, b"x"), rec(0, 5, b"q"), rec(0, 6, b"c"), rec(0, 9, b"z")]
    kinds = {a.kind: [(r.partition, r.offset) for r in a.records] for a in check_reads(LOG, reads, ends={0: 7})}
    assert kinds == {"aborted-read": [(0, 2)], "uncommitted-read": [(0, 6)], "inconsistent-read": [(0, 5), (0, 9)],
                     "nonmonotonic-poll": [(0, 0)]}


def test_skipped_and_fractured_reads():
    log = [data(0, 0, 7, [b"t1-a"]), data(1, 0, 7, [b"t1-b"]), marker(0, 1, 7, COMMIT), marker(1, 1, 7, COMMIT)]
    anomalies = check_reads(log, [rec(0, 0, b"t1-a")], ends={0: 2, 1: 2}, txn_of=lambda r: r.value[:2])
    assert [(a.kind, [(r.partition, r.offset) for r in a.records]) for a in anomalies] == [
        ("fractured-read", [(1, 0)]), ("poll-skip", [(1, 0)])]
    assert "fractured-read: a committed transaction returned in part (b't1') at p1@0" == str(anomalies[0])


@st.composite
def logs(draw):
    """A random log of one partition: producers' transactional runs closed (or not) by markers."""
    out, off, open_ = [], 0, {}
    for _ in range(draw(st.integers(0, 25))):
        pid = draw(st.integers(1, 3))
        if open_.get(pid) and draw(st.booleans()):
            out.append(marker(0, off, pid, draw(st.sampled_from([COMMIT, ABORT]))))
            open_[pid] = False
            off += 1
            continue
        n = draw(st.integers(1, 3))
        txn = draw(st.booleans())
        out.append(data(0, off, pid, [f"{off + i}".encode() for i in range(n)], txn=txn))
        open_[pid] = open_.get(pid) or txn
        off += n
    return out


@given(logs(), st.data())
def test_faithful_readers_never_have_anomalies_and_a_dropped_record_is_a_skip(log, draw):
    st_ = statuses(log)
    pending = [k for k, (s, _r) in st_.items() if s == "open"]
    lso = min((o for _p, o in pending), default=max((o + 1 for _p, o in st_), default=0))
    visible = [r for (p, o), (s, r) in sorted(st_.items()) if s in ("committed", "plain") and o < lso]
    reads = [Record(r.partition, r.offset, r.key, r.value) for r in visible]
    assert check_reads(log, reads, ends={0: lso}) == []
    if reads:
        dropped = draw.draw(st.sampled_from(reads))
        kinds = [a.kind for a in check_reads(log, [r for r in reads if r != dropped], ends={0: lso})]
        assert kinds == ["poll-skip"]
