"""PartitionLog retention of the active segment, as Apache's UnifiedLog does: when every
record of the whole log is past retention.ms and durable, an empty segment is rolled at
the log end and every old segment deleted; the log start moves to the log end, appends
continue there, and producer state, aborted transactions and the LSO stay consistent."""

from __future__ import annotations

import pytest

from kaas.domain.producer_state import Append, Duplicate
from kaas.errors import KaasError
from kaas.storage.partition_log import LogConfig, PartitionLog
from tests.component.test_partition_log import (
    TXN_PID,
    Appended,
    _txn_scenario,
    check_all,
    make,
    marker,
    open_log,
    put,
)

DAY = 86_400_000
NOW = 1_700_000_000_000
CFG = LogConfig(segment_bytes=1024, index_interval_bytes=200, fsync=False, retention_ms=DAY)


def old_log(tmp_path, n: int = 20) -> tuple[PartitionLog, list[Appended]]:
    log = PartitionLog(tmp_path, CFG, clock=lambda: NOW)
    log.open(1)
    model: list[Appended] = []
    for i in range(n):
        raw, h = make(n=2, vsize=80, ts=NOW - 3 * DAY + i)
        put(log, model, raw, h)
    assert len(log.segments) >= (3 if n >= 20 else 1) and log.active.size > 0
    return log, model


def test_whole_old_log_is_deleted_and_appends_continue_at_the_log_end(tmp_path):
    log, model = old_log(tmp_path)
    before, end = list(log.segments), log.log_end_offset
    assert log.apply_retention(NOW) == len(before) - 1  # the active one is not durable yet
    assert log.segments == [before[-1]]
    log.sync()
    assert log.apply_retention(NOW) == 1
    assert log.log_start_offset == log.log_end_offset == end
    assert len(log.segments) == 1 and log.active.base_offset == end and log.active.size == 0
    assert not any(s.path.exists() for s in before)
    assert bytes(log.read(end, 1 << 20, end).records) == b""
    assert log.offset_for_timestamp(0) is None
    raw, h = make(n=3, ts=NOW)
    a = put(log, model, raw, h)
    assert a.base == end
    check_all(log, model, start=end)
    log.close()
    log = PartitionLog(tmp_path, CFG, clock=lambda: NOW)
    log.open()
    assert (log.log_start_offset, log.log_end_offset) == (end, end + 3)
    check_all(log, model, start=end)
    assert log.apply_retention(NOW) == 0  # the new record is recent
    log.close()


def test_an_empty_log_at_the_log_end_stays(tmp_path):
    log, _ = old_log(tmp_path)
    log.sync()
    log.apply_retention(NOW)
    segs = list(log.segments)
    assert log.apply_retention(NOW + 10 * DAY) == 0  # the only segment is empty: never deleted
    assert log.segments == segs
    log.close()


def test_a_recent_record_in_the_active_segment_keeps_it(tmp_path):
    log, model = old_log(tmp_path)
    raw, h = make(n=1, ts=NOW - 1000)
    put(log, model, raw, h)
    log.sync()
    kept = log.active
    assert log.apply_retention(NOW) >= 1
    assert log.segments == [kept] and log.log_start_offset == kept.base_offset
    check_all(log, model, start=kept.base_offset)
    log.close()


def test_producer_state_survives_and_a_retry_is_still_a_duplicate(tmp_path):
    # Apache keeps the producer state when segments go: a retry of the last batch is
    # still answered as a duplicate, and the next sequence is still expected.
    log, model = old_log(tmp_path, n=5)
    raw, h = make(n=2, ts=NOW - 3 * DAY, pid=77, pepoch=0, seq=0)
    last = put(log, model, raw, h)
    log.sync()
    end = log.log_end_offset
    log.apply_retention(NOW)
    assert log.log_start_offset == end
    for reopen in (False, True):
        if reopen:
            log.close()
            log = PartitionLog(tmp_path, CFG, clock=lambda: NOW)
            log.open()
        assert log.producers.check(77, 0, 0, 2, False) == Duplicate(last.base, last.max_ts)
        assert isinstance(log.producers.check(77, 0, 2, 1, False), Append)
    log.close()


def test_aborted_index_is_dropped_and_an_open_transaction_clamps_the_lso(tmp_path):
    log = PartitionLog(tmp_path, CFG, clock=lambda: NOW)
    log.open(1)
    model: list[Appended] = []
    _txn_scenario(log, model)  # timestamps 1000: long past retention
    raw, h = make(n=2, ts=1000, pid=TXN_PID, pepoch=0, seq=12, txn=True)
    first_open = put(log, model, raw, h).base  # a transaction left open
    assert log.last_stable_offset() == first_open
    log.sync()
    end = log.log_end_offset
    assert log.apply_retention(NOW) >= 1
    assert log.log_start_offset == end
    assert log.aborted_in(0, end) == []
    # Apache clamps the first unstable offset to the log start; the LSO never falls below it
    assert log.last_stable_offset() == end
    m = marker(log, model, pid=TXN_PID, pepoch=0, commit=True)
    assert m.base == end
    assert log.last_stable_offset() == log.log_end_offset == end + 1
    log.close()
    log = open_log(tmp_path, CFG)
    assert log.log_start_offset == end and log.last_stable_offset() == end + 1
    log.close()


def test_a_deposed_leader_does_not_roll_or_delete(tmp_path):
    log, _ = old_log(tmp_path)
    log.sync()
    newer = open_log(tmp_path, CFG, epoch=2)  # the manifest now carries epoch 2
    try:
        with pytest.raises(KaasError, match="no longer owns"):
            log.apply_retention(NOW)
        assert newer.log_end_offset == log.log_end_offset
        assert all(s.path.exists() for s in log.segments)
    finally:
        newer.close()
        log.close()
