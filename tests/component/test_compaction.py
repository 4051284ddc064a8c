"""The log cleaner on a real partition directory: keyed records, tombstones, transactions
and idempotent producers written through PartitionLog, cleaned, read back, reopened; a
crash (an error) at each step of a pass; retention against the cleanup policy; an idle
active segment rolled by segment.ms."""

from __future__ import annotations

import os

import pytest

from kaas import failpoints
from kaas.domain.producer_state import Duplicate
from kaas.storage import cleaner
from kaas.storage.partition_log import LogConfig, PartitionLog
from kaas.wire import batch as wb
from kaas.wire import records as wr

from .test_partition_log import abandon, open_log

NOW = 10_000_000
CFG = LogConfig(segment_bytes=600, index_interval_bytes=100, fsync=True, retention_ms=-1, delete=False,
                compact=True, min_cleanable_dirty_ratio=0.0, delete_retention_ms=1000)


@pytest.fixture(autouse=True)
def _disarm():
    failpoints.set_in_process({})
    yield
    failpoints.set_in_process({})


def put(log, records, *, ts=NOW, pid=-1, epoch=-1, seq=-1, txn=False):
    raw = wb.build_batch(attributes=wb.ATTR_TRANSACTIONAL if txn else 0, base_timestamp=ts, max_timestamp=ts,
                         producer_id=pid, producer_epoch=epoch, base_sequence=seq, records=records)
    h = wb.validate_produce(raw, 1 << 20)
    if pid >= 0:
        d = log.producers.check(pid, epoch, seq, h.records_count, txn)
        if isinstance(d, Duplicate):
            return d
    return log.append(raw, h)


def marker(log, pid, epoch, commit, ts=NOW):
    raw = wb.control_batch(producer_id=pid, producer_epoch=epoch, commit=commit, coordinator_epoch=0, timestamp=ts)
    return log.append(raw, wb.parse_header(raw))


def clean(log: PartitionLog, now: int = NOW) -> cleaner.Prepared | None:
    """One pass as the broker runs it, synchronously."""
    job = log.clean_job(now)
    if job is None:
        return None
    with log.cleaning_pass():
        prep = cleaner.prepare(job)
        state = log.next_cleaner_state(prep)
        cleaner.commit(log, prep, state)
        log.apply_clean(prep, state)
        return prep


def read_all(log: PartitionLog, committed: bool = True) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) as a read_committed (or uncommitted) consumer sees them, walking
    batches with the aborted ranges the log hands out."""
    out = []
    off = log.log_start_offset
    limit = log.last_stable_offset() if committed else log.log_end_offset
    while off < limit:
        res = log.read(off, 1 << 20, limit)
        if not res.records:
            break
        data = bytes(res.records)
        skip: dict[int, int] = {pid: first for pid, first in log.aborted_in(off, res.next_offset)} if committed else {}
        for pos, h in wb.iter_headers(data):
            assert wb.crc_ok(data, pos, h)
            if h.is_control:
                if wb.control_type(data, pos, h) == wb.CONTROL_ABORT:
                    skip.pop(h.producer_id, None)
                continue
            if committed and h.producer_id in skip and h.base_offset >= skip[h.producer_id]:
                continue
            for r in wr.records(data[pos:pos + h.size], h):
                value = None if r.tombstone else _value(r.raw)
                out.append((h.base_offset + r.offset_delta, r.key, value))
        off = res.next_offset
    return out


def _value(raw: bytes) -> bytes:
    # key and value of a record built by wb.build_batch: walk its varints
    view = memoryview(raw)
    _, p = wb.read_varint(view, 0)
    p += 1
    _, p = wb.read_varint(view, p)
    _, p = wb.read_varint(view, p)
    klen, p = wb.read_varint(view, p)
    p += max(klen, 0)
    vlen, p = wb.read_varint(view, p)
    return bytes(view[p:p + vlen])


def latest(rows):
    out = {}
    for off, k, v in rows:
        out[k] = (off, v)
    return out


def fill(log, n=60, keys=6):
    for i in range(n):
        put(log, [(f"k{i % keys}".encode(), f"v{i}".encode() * 5)])


def test_cleaning_keeps_the_latest_value_per_key_at_its_offset(tmp_path):
    log = open_log(tmp_path / "p", CFG)
    fill(log)
    before = read_all(log)
    segments = len(log.segments)
    prep = clean(log)
    assert prep is not None and prep.records_removed > 0
    after = read_all(log)
    assert latest(after) == latest(before)
    cleaned_end = prep.job.segments[-1].end_offset
    in_range = [r for r in after if r[0] < cleaned_end]
    assert len({k for _, k, _ in in_range}) == len(in_range)  # one record per key was cleaned to
    assert in_range == sorted(latest([r for r in before if r[0] < cleaned_end]).values() and
                              [(o, k, v) for k, (o, v) in latest([r for r in before if r[0] < cleaned_end]).items()])
    assert len(log.segments) <= segments
    # appends go on at the next offset; a reopen (recovery) reads the same
    put(log, [(b"k0", b"new")])
    log.close()
    again = open_log(tmp_path / "p", CFG)
    assert latest(read_all(again))[b"k0"][1] == b"new"
    assert {k: v for k, v in latest(read_all(again)).items() if k != b"k0"} == \
        {k: v for k, v in latest(before).items() if k != b"k0"}
    state = cleaner.read_state(tmp_path / "p")
    assert state["cleaned"] and state["clean_offset"] > 0


def test_a_cleaned_segment_without_its_summary_is_not_cut_at_its_gaps(tmp_path):
    log = open_log(tmp_path / "p", CFG)
    fill(log)
    clean(log)
    want = read_all(log)
    abandon(log)
    for name in os.listdir(tmp_path / "p"):
        if name.endswith(".idx"):
            os.unlink(tmp_path / "p" / name)  # recovery must scan the cleaned segments
    again = open_log(tmp_path / "p", CFG)
    assert read_all(again) == want
    assert again.recoveries == []


def test_transactions_aborted_records_go_and_markers_stay_while_their_data_does(tmp_path):
    log = open_log(tmp_path / "p", CFG)
    pid = 1 << 40
    seq = 0
    for i in range(8):
        commit = i % 3 != 1
        put(log, [(b"a", f"t{i}".encode()), (b"b", f"t{i}".encode())], pid=pid, epoch=0, seq=seq, txn=True)
        seq += 2
        marker(log, pid, 0, commit)
        put(log, [(b"c", f"plain{i}".encode() * 20)])
    put(log, [(b"z", b"roll" * 100)])
    before = read_all(log)
    aborted_before = list(log.aborted)
    clean(log, NOW + 10)  # tombstone/marker horizon not passed: markers with data stay
    after = read_all(log)
    assert latest(after) == latest(before)
    assert all(not v.startswith(b"t1") and v not in (b"t4", b"t7") for _, _, v in after if v)
    # the aborted index lost only entries whose marker went, and no aborted record is readable
    uncommitted = read_all(log, committed=False)
    assert not [r for r in uncommitted if r[2] in (b"t1", b"t4", b"t7")]
    assert set(log.aborted) <= set(aborted_before)
    # past the horizon, the emptied markers go too, and the index with them
    clean(log, NOW + 10_000)
    assert latest(read_all(log)) == latest(before)
    for marker_off, _pid, _first in log.aborted:
        assert any(h.base_offset == marker_off for h, _ in log.batches())
    abandon(log)
    again = open_log(tmp_path / "p", CFG)
    assert latest(read_all(again)) == latest(before)
    assert again.aborted == log.aborted


def test_tombstones_go_after_the_horizon_and_take_the_key_with_them(tmp_path):
    log = open_log(tmp_path / "p", CFG)
    fill(log, 30, 3)
    put(log, [(b"k1", None)])  # delete k1
    fill(log, 12, 3)
    put(log, [(b"k2", None)])
    put(log, [(b"x", b"roll" * 200)])
    put(log, [(b"y", b"roll" * 200)])
    clean(log, NOW + 10)
    got = latest(read_all(log))
    assert got[b"k2"][1] is None  # the tombstone stays within delete.retention.ms
    clean(log, NOW + 10_000)
    got = latest(read_all(log))
    assert b"k2" not in got  # gone, and no older k2 came back
    assert got[b"k1"][1] is not None  # k1 was written again after its tombstone


def test_idempotent_retry_after_cleaning_is_still_a_duplicate(tmp_path):
    log = open_log(tmp_path / "p", CFG)
    pid = 2 << 40
    for i in range(20):
        put(log, [(b"same", f"v{i}".encode() * 10)], pid=pid, epoch=0, seq=i)
    put(log, [(b"other", b"x" * 300)])
    put(log, [(b"other", b"y" * 300)])
    clean(log)
    abandon(log)
    os.unlink(tmp_path / "p" / "producer-state.snapshot")  # rebuilt from the cleaned log alone
    again = open_log(tmp_path / "p", CFG)
    d = put(again, [(b"same", b"v19" * 10)], pid=pid, epoch=0, seq=19)
    assert isinstance(d, Duplicate)


@pytest.mark.parametrize("point", ["cleaner.before_copy", "cleaner.after_commit_file", "cleaner.after_swap"])
def test_a_crash_at_any_step_leaves_the_old_or_the_new_set(tmp_path, point):
    log = open_log(tmp_path / "p", CFG)
    fill(log)
    want = latest(read_all(log))
    files_before = sorted(os.listdir(tmp_path / "p"))
    failpoints.set_in_process({point: {"action": "error"}})
    with pytest.raises(OSError):
        clean(log)
    failpoints.set_in_process({})
    abandon(log)  # SIGKILL at that step
    again = open_log(tmp_path / "p", CFG)
    names = os.listdir(tmp_path / "p")
    assert not [n for n in names if n.endswith(cleaner.SUFFIX) or n == cleaner.COMMIT_FILE]
    assert latest(read_all(again)) == want
    if point == "cleaner.before_copy":
        assert {n for n in files_before if n.endswith(".log")} <= set(names)  # the old set, untouched
        assert again.open_notes and "dropped" in again.open_notes[0] or not again.open_notes
    else:
        assert again.open_notes and "completed" in again.open_notes[0]
    # and it cleans again later as if nothing happened
    clean(again)
    assert latest(read_all(again)) == want


def test_a_deposed_leader_does_not_swap(tmp_path):
    log = open_log(tmp_path / "p", CFG)
    fill(log)
    job = log.clean_job(NOW)
    prep = cleaner.prepare(job)
    newer = PartitionLog(tmp_path / "p", CFG)
    newer.open()  # a takeover: the manifest carries a newer epoch
    with pytest.raises(Exception) as exc:
        cleaner.commit(log, prep, log.next_cleaner_state(prep))
    assert "no longer the leader" in str(exc.value)
    assert not [n for n in os.listdir(tmp_path / "p") if n.endswith(cleaner.SUFFIX)]


def test_retention_follows_the_cleanup_policy(tmp_path):
    old = 1000
    compact_only = LogConfig(segment_bytes=300, fsync=False, retention_ms=1000, delete=False, compact=True)
    both = LogConfig(segment_bytes=300, fsync=False, retention_ms=1000, delete=True, compact=True)
    for cfg, expect_deleted in ((compact_only, False), (both, True)):
        path = tmp_path / f"p{int(cfg.delete)}"
        log = open_log(path, cfg)
        for i in range(20):
            put(log, [(f"k{i}".encode(), b"v" * 50)], ts=old)
        assert (log.apply_retention(NOW) > 0) is expect_deleted


def test_an_idle_active_segment_rolls_after_segment_ms(tmp_path):
    cfg = LogConfig(segment_ms=1000, fsync=False, compact=True, delete=False)
    log = open_log(tmp_path / "p", cfg)
    assert not log.maybe_roll_idle(log.active.created_ms + 5000)  # empty: nothing to roll
    put(log, [(b"k", b"v")])
    assert not log.maybe_roll_idle(log.active.created_ms + 10)
    assert log.maybe_roll_idle(log.active.created_ms + 1000)
    assert len(log.segments) == 2 and log.segments[-1].size == 0


def test_inspect_log_shows_cleaned_segments_and_the_dirty_ratio(tmp_path):
    import json

    from click.testing import CliRunner

    from kaas.cli import cli

    log = PartitionLog(tmp_path / "data" / "t" / "0", CFG)
    log.open()
    fill(log)
    clean(log)
    fill(log, 20)
    log.roll()
    log.close()
    res = CliRunner().invoke(cli, ["inspect", "log", "t", "0", "--data", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert any(s["cleaned"] for s in out["segments"]) and not out["segments"][-1]["cleaned"]
    assert 0 < out["cleaner"]["dirty_ratio"] < 1 and out["cleaner"]["clean_offset"] > 0
    human = CliRunner().invoke(cli, ["inspect", "log", "t", "0", "--data", str(tmp_path)]).stdout
    assert "Cleaner: clean offset" in human and "dirty ratio" in human
