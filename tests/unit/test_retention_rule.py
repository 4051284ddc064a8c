"""domain.retention: which of the oldest segments retention deletes (Apache's
UnifiedLog.deletableSegments with the retention.bytes and retention.ms predicates)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kaas.domain.retention import SegmentView, deletable, size_breached, time_breached

DAY = 86_400_000
NOW = 1_700_000_000_000


def log_of(*segs: tuple[int, int, int]) -> list[SegmentView]:
    return [SegmentView(*s) for s in segs]


# ------------------------------------------------------------------ examples


def test_time_deletes_the_active_segment_when_all_its_records_are_old():
    segs = log_of((0, 100, NOW - 3 * DAY), (10, 100, NOW - 2 * DAY))
    assert time_breached(segs, log_end=20, high_watermark=20, now_ms=NOW, retention_ms=DAY) == 2


def test_time_keeps_an_active_segment_with_one_recent_record():
    segs = log_of((0, 100, NOW - 3 * DAY), (10, 100, NOW - 1000))
    assert time_breached(segs, log_end=20, high_watermark=20, now_ms=NOW, retention_ms=DAY) == 1


def test_the_predicate_is_strictly_greater():
    segs = log_of((0, 100, NOW - DAY), (10, 100, NOW - DAY - 1))
    assert time_breached(segs, log_end=20, high_watermark=20, now_ms=NOW, retention_ms=DAY) == 0
    assert time_breached(segs, log_end=20, high_watermark=20, now_ms=NOW + 1, retention_ms=DAY) == 2


def test_an_empty_active_segment_is_never_deleted():
    segs = log_of((0, 100, 0), (10, 0, 0))
    assert time_breached(segs, log_end=10, high_watermark=10, now_ms=NOW, retention_ms=0) == 1
    assert time_breached(log_of((10, 0, 0)), log_end=10, high_watermark=10, now_ms=NOW, retention_ms=0) == 0


def test_nothing_at_or_past_the_high_watermark_goes():
    segs = log_of((0, 100, 0), (10, 100, 0), (20, 100, 0))
    old = {"now_ms": NOW, "retention_ms": DAY}
    assert time_breached(segs, log_end=30, high_watermark=29, **old) == 2  # the active holds 29
    assert time_breached(segs, log_end=30, high_watermark=19, **old) == 1
    assert time_breached(segs, log_end=30, high_watermark=9, **old) == 0
    assert time_breached(segs, log_end=30, high_watermark=30, **old) == 3


def test_deletion_stops_at_the_first_kept_segment():
    # a future timestamp in the middle keeps everything after it too
    segs = log_of((0, 100, 0), (10, 100, NOW + DAY), (20, 100, 0))
    assert time_breached(segs, log_end=30, high_watermark=30, now_ms=NOW, retention_ms=DAY) == 1


def test_negative_settings_turn_a_policy_off():
    segs = log_of((0, 100, 0), (10, 100, 0))
    assert time_breached(segs, log_end=20, high_watermark=20, now_ms=NOW, retention_ms=-1) == 0
    assert size_breached(segs, log_end=20, high_watermark=20, retention_bytes=-1) == 0


def test_size_deletes_oldest_while_the_excess_covers_them():
    segs = log_of((0, 100, 0), (10, 100, 0), (20, 100, 0))
    assert size_breached(segs, log_end=30, high_watermark=30, retention_bytes=150) == 1
    assert size_breached(segs, log_end=30, high_watermark=30, retention_bytes=100) == 2
    assert size_breached(segs, log_end=30, high_watermark=30, retention_bytes=301) == 0


def test_size_zero_deletes_the_active_segment_too_as_apache_does():
    segs = log_of((0, 100, 0), (10, 100, 0))
    assert size_breached(segs, log_end=20, high_watermark=20, retention_bytes=0) == 2
    assert size_breached(segs, log_end=20, high_watermark=19, retention_bytes=0) == 1


def test_time_runs_over_what_size_left():
    segs = log_of((0, 100, NOW), (10, 100, 0), (20, 100, NOW))
    # size deletes the first (recent, but the excess covers it), time the second
    assert deletable(segs, log_end=30, high_watermark=30, now_ms=NOW, retention_ms=DAY, retention_bytes=200) == 2
    assert deletable(segs, log_end=30, high_watermark=30, now_ms=NOW, retention_ms=DAY, retention_bytes=-1) == 0


# ------------------------------------------------------------------ properties


@st.composite
def logs(draw):
    n = draw(st.integers(0, 8))
    base, segs = draw(st.integers(0, 1000)), []
    for i in range(n):
        count = draw(st.integers(0 if i == n - 1 else 1, 50))  # only the active may be empty
        size = 0 if count == 0 else draw(st.integers(1, 5000))
        segs.append(SegmentView(base, size, draw(st.integers(-1, NOW + DAY))))
        base += count
    log_end = base
    start = segs[0].base_offset if segs else log_end
    hw = draw(st.integers(start, log_end))
    return segs, log_end, hw


settings_ = st.fixed_dictionaries({"now_ms": st.integers(0, NOW + 2 * DAY),
                                   "retention_ms": st.integers(-1, 3 * DAY),
                                   "retention_bytes": st.integers(-1, 40_000)})


@given(logs(), settings_)
def test_only_segments_below_the_high_watermark_go_and_never_an_empty_active(log, cfg):
    segs, log_end, hw = log
    n = deletable(segs, log_end=log_end, high_watermark=hw, **cfg)
    assert 0 <= n <= len(segs)
    for i in range(n):
        upper = segs[i + 1].base_offset if i + 1 < len(segs) else log_end
        assert upper <= hw
    if segs and segs[-1].size == 0:
        assert n < len(segs)


@given(logs(), settings_)
def test_every_deleted_segment_is_old_or_over_size(log, cfg):
    segs, log_end, hw = log
    n = deletable(segs, log_end=log_end, high_watermark=hw, **cfg)
    by_size = size_breached(segs, log_end=log_end, high_watermark=hw, retention_bytes=cfg["retention_bytes"])
    assert by_size <= n
    total = sum(s.size for s in segs)
    if by_size:
        assert total - sum(s.size for s in segs[:by_size]) >= cfg["retention_bytes"] >= 0
    for s in segs[by_size:n]:
        assert cfg["retention_ms"] >= 0 and cfg["now_ms"] - s.largest_timestamp > cfg["retention_ms"]


@given(logs(), settings_)
def test_the_first_kept_segment_fails_a_condition(log, cfg):
    segs, log_end, hw = log
    n = time_breached(segs, log_end=log_end, high_watermark=hw, now_ms=cfg["now_ms"], retention_ms=cfg["retention_ms"])
    if n < len(segs):
        kept = segs[n]
        upper = segs[n + 1].base_offset if n + 1 < len(segs) else log_end
        last_empty = n == len(segs) - 1 and kept.size == 0
        too_young = cfg["retention_ms"] < 0 or cfg["now_ms"] - kept.largest_timestamp <= cfg["retention_ms"]
        assert upper > hw or last_empty or too_young


@given(logs(), settings_, st.integers(0, DAY))
def test_time_is_monotonic_in_the_clock_and_the_high_watermark(log, cfg, later):
    segs, log_end, hw = log
    kw = {"log_end": log_end, "retention_ms": cfg["retention_ms"]}
    n = time_breached(segs, high_watermark=hw, now_ms=cfg["now_ms"], **kw)
    assert time_breached(segs, high_watermark=hw, now_ms=cfg["now_ms"] + later, **kw) >= n
    assert time_breached(segs, high_watermark=log_end, now_ms=cfg["now_ms"], **kw) >= n


@given(logs())
def test_a_whole_old_committed_log_goes_unless_its_active_is_empty(log):
    segs, log_end, _ = log
    n = time_breached(segs, log_end=log_end, high_watermark=log_end, now_ms=NOW + 2 * DAY, retention_ms=0)
    if segs:
        assert n == (len(segs) - 1 if segs[-1].size == 0 else len(segs))
