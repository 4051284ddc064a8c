"""PartitionLog on a failing disk: ENOSPC, EIO and short writes injected through the
storage seam's failpoints at appends, rolls, fsyncs and state writes.

The rule under test (issue 17, Apache's and PostgreSQL's after "fsyncgate"): nothing is
ever appended after bytes of unknown state, a batch whose write or fsync failed is never
acknowledged, a failed fsync is never retried as if it had succeeded, and a reopen through
recovery gives back every acknowledged batch at its offset with nothing unreadable between.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kaas import failpoints
from kaas.errors import KaasError
from kaas.storage import atomic
from kaas.storage.partition_log import RECOVERY_FILE, LogConfig, PartitionLog
from kaas.wire import batch as wb

from .test_partition_log import Appended, abandon, check_all, make, open_log, put

FSYNC = LogConfig(segment_bytes=1024, index_interval_bytes=200, fsync=True, retention_ms=-1)


@pytest.fixture(autouse=True)
def _disarm():
    failpoints.set_in_process({})
    yield
    failpoints.set_in_process({})


def _scratch() -> Path:
    """A directory on tmpfs when there is one (fsync is cheap there), else on /tmp."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="kaas-faults-", dir=base))


def _store(log: PartitionLog, model: list[Appended], raw: bytes, h: wb.BatchHeader) -> bool:
    """Append; on KAFKA_STORAGE_ERROR nothing may have changed. Returns whether it landed."""
    before = log.log_end_offset
    try:
        put(log, model, raw, h)
    except KaasError as exc:
        assert exc.code == ErrorCode.kafka_storage_error
        if log.failed is None:  # (a roll before the write may have succeeded)
            assert log.log_end_offset == log.active.next_offset == before
            assert os.stat(log.active.path).st_size == log.active.size  # no torn bytes left
        return False
    return True


def _segment_bytes(log: PartitionLog) -> int:
    return sum(os.stat(s.path).st_size for s in log.segments)


# ----------------------------------------------------------------------------- appends


@pytest.mark.parametrize("spec", [
    {"action": "error", "errno": "ENOSPC"},
    {"action": "error", "errno": "EIO"},
    {"action": "short", "fraction": 0.4},
])
def test_failed_append_is_cut_back_and_the_next_batch_lands_after_good_bytes(tmp_path, spec):
    """The issue's reproduction in miniature: a write that ran out of space left part of
    a batch; the next batch must not be written after those bytes."""
    log = open_log(tmp_path / "p", FSYNC)
    model: list[Appended] = []
    for _ in range(3):
        put(log, model, *make(n=2, vsize=50))
    failpoints.set_in_process({"append.write": dict(spec, count=1)})
    assert not _store(log, model, *make(n=2, vsize=300))
    assert log.failed is None  # cut back and fsynced: still writable
    for _ in range(3):
        put(log, model, *make(n=2, vsize=50))
    log.sync()
    check_all(log, model)
    for _pos, h in wb.iter_headers(open(log.active.path, "rb").read()):
        assert h.magic == 2
    abandon(log)  # SIGKILL
    again = open_log(tmp_path / "p", FSYNC)
    check_all(again, model)
    assert again.recoveries == []  # nothing torn was left to cut


def test_append_whose_cut_back_fails_takes_the_log_offline_until_reopened(tmp_path):
    log = open_log(tmp_path / "p", FSYNC)
    model: list[Appended] = []
    put(log, model, *make(n=3))
    log.sync()
    failpoints.set_in_process({"append.write": {"action": "short", "count": 1},
                               "append.fsync": {"action": "error", "errno": "EIO", "count": 1}})
    assert not _store(log, model, *make(n=2, vsize=400))
    assert log.failed is not None
    failpoints.set_in_process({})
    with pytest.raises(KaasError) as exc:  # refused, though the disk works again
        log.append(*make())
    assert exc.value.code == ErrorCode.kafka_storage_error
    with pytest.raises(KaasError):
        log.sync()
    log.close()  # gives the files up without writing summaries, snapshot or manifest
    again = open_log(tmp_path / "p", FSYNC)
    assert again.failed is None
    check_all(again, model)
    put(again, model, *make(n=2))
    check_all(again, model)


@pytest.mark.parametrize("errno_name", ["EIO", "ENOSPC"])
def test_failed_fsync_is_never_retried_as_success(tmp_path, errno_name):
    log = open_log(tmp_path / "p", FSYNC)
    model: list[Appended] = []
    put(log, model, *make(n=2))
    assert log.sync() == 2
    put(log, model, *make(n=2))
    failpoints.set_in_process({"append.fsync": {"action": "error", "errno": errno_name, "count": 1}})
    with pytest.raises(OSError):
        log.sync()
    assert log.durable_offset == 2 and log.failed
    # The disk "works" again, but the state of the bytes after offset 2 is unknown: no
    # sync may now report them durable.
    with pytest.raises(KaasError):
        log.sync()
    assert log.durable_offset == 2
    log.close()
    again = open_log(tmp_path / "p", FSYNC)
    assert again.log_end_offset == 4  # the page cache still had them: recovery verified each
    check_all(again, model)


@pytest.mark.parametrize("target", ["idx", "snapshot", "roll_fsync"])
def test_failed_roll_refuses_the_batch_and_leaves_the_log_usable(tmp_path, target):
    log = open_log(tmp_path / "p", FSYNC)
    model: list[Appended] = []
    while log.active.size < FSYNC.segment_bytes:
        put(log, model, *make(n=1, vsize=100))
    segments = len(log.segments)
    spec = {"idx": {"state.write": {"action": "error", "errno": "ENOSPC", "path": ".idx", "count": 1}},
            "snapshot": {"state.fsync": {"action": "error", "errno": "EIO", "path": "producer-state", "count": 1}},
            "roll_fsync": {"append.fsync": {"action": "error", "errno": "EIO", "count": 1}}}[target]
    failpoints.set_in_process(spec)
    assert not _store(log, model, *make(n=1, vsize=100))
    assert len(log.segments) == segments
    assert not [n for n in os.listdir(log.path) if n.endswith(".tmp")]
    if target == "roll_fsync":
        assert log.failed  # an fsync failed: only a reopen brings it back
        log.close()
        log = open_log(tmp_path / "p", FSYNC)
    for _ in range(5):
        put(log, model, *make(n=1, vsize=100))
    check_all(log, model)
    log.close()
    check_all(open_log(tmp_path / "p", FSYNC), model)


def test_failed_manifest_write_leaves_delete_records_and_retention_undone(tmp_path):
    cfg = LogConfig(segment_bytes=300, index_interval_bytes=200, fsync=True, retention_bytes=600,
                    retention_ms=-1)
    log = open_log(tmp_path / "p", cfg)
    model: list[Appended] = []
    for _ in range(12):
        put(log, model, *make(n=1, vsize=100))
    manifest = (tmp_path / "p" / "manifest.json").read_bytes()
    segments = [s.name for s in log.segments]
    failpoints.set_in_process({"state.write": {"action": "error", "errno": "ENOSPC", "path": "manifest"}})
    with pytest.raises(OSError):
        log.delete_records(5)
    with pytest.raises(OSError):
        log.apply_retention(0)
    assert log.log_start_offset == 0
    assert [s.name for s in log.segments] == segments
    assert (tmp_path / "p" / "manifest.json").read_bytes() == manifest
    failpoints.set_in_process({})
    assert log.apply_retention(0) > 0
    assert log.log_start_offset == log.segments[0].base_offset > 0


# ----------------------------------------------------------------------------- recovery tells


def test_recovery_records_every_cut_and_keeps_a_journal(tmp_path):
    log = open_log(tmp_path / "p", FSYNC)
    model: list[Appended] = []
    for _ in range(4):
        put(log, model, *make(n=1, vsize=40))
    log.sync()
    good = log.active.size
    active = log.active.path
    abandon(log)
    with open(active, "ab") as f:
        f.write(b"\x00" * 7 + b"xtorn-bytes-of-a-failed-append")
    again = open_log(tmp_path / "p", FSYNC)
    check_all(again, model)
    [cut] = again.recoveries
    assert cut["segment"] == active.name and cut["action"] == "truncated"
    assert (cut["from_byte"], cut["to_byte"]) == (good, good + 37)
    assert cut["from_offset"] == 4 and cut["reason"]
    journal = atomic.read_json(tmp_path / "p" / RECOVERY_FILE)
    assert journal["entries"][-1]["from_byte"] == good
    again.close()
    third = open_log(tmp_path / "p", FSYNC)
    assert third.recoveries == []  # nothing new to cut; the journal keeps the old entry
    assert len(atomic.read_json(tmp_path / "p" / RECOVERY_FILE)["entries"]) == 1


def test_recovery_journal_write_failure_is_reported_not_fatal(tmp_path):
    log = open_log(tmp_path / "p", FSYNC)
    model: list[Appended] = []
    put(log, model, *make(n=1))
    active = log.active.path
    abandon(log)
    with open(active, "ab") as f:
        f.write(b"\x01\x02\x03")
    failpoints.set_in_process({"state.write": {"action": "error", "errno": "ENOSPC", "path": RECOVERY_FILE}})
    again = open_log(tmp_path / "p", FSYNC)
    assert again.recoveries and again.recovery_journal_error
    check_all(again, model)


# ----------------------------------------------------------------------------- property


_FAULTS = {
    "none": {},
    "write_enospc": {"append.write": {"action": "error", "errno": "ENOSPC", "count": 1}},
    "write_eio": {"append.write": {"action": "error", "errno": "EIO", "count": 1}},
    "write_short": {"append.write": {"action": "short", "fraction": 0.3, "count": 1}},
    "short_then_cut_fails": {"append.write": {"action": "short", "count": 1},
                             "append.fsync": {"action": "error", "errno": "EIO", "count": 1}},
    "fsync_eio": {"append.fsync": {"action": "error", "errno": "EIO", "count": 1}},
    "idx_enospc": {"state.write": {"action": "short", "path": ".idx", "count": 1}},
    "snapshot_eio": {"state.fsync": {"action": "error", "errno": "EIO", "path": "producer-state", "count": 1}},
    "rename_enospc": {"state.rename": {"action": "error", "errno": "ENOSPC", "count": 1}},
}

_op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4), st.integers(1, 300), st.sampled_from(sorted(_FAULTS))),
    st.tuples(st.just("sync"), st.sampled_from(["none", "fsync_eio"])),
    st.tuples(st.just("crash")),
    st.tuples(st.just("close")),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_op, min_size=1, max_size=40))
def test_acknowledged_batches_survive_any_fault_sequence(ops):
    """Random appends, rolls (small segments), syncs, crashes and clean closes with faults
    injected at appends, fsyncs and state writes. A batch counts as acknowledged once a
    sync that began after its append succeeded (acks=all). After a final crash and reopen
    every acknowledged batch is read back at its offset byte for byte, and the log from
    its start is a dense run of valid batches (nothing unreadable between them)."""
    root = _scratch()
    try:
        path = root / "p"
        log = open_log(path, FSYNC)
        appended: dict[int, bytes] = {}  # base offset -> stored bytes of batches that landed
        acked: dict[int, bytes] = {}
        pending: dict[int, bytes] = {}  # landed, not yet covered by a successful sync
        for op in ops:
            if log.failed is not None or op[0] in ("crash", "close"):
                failpoints.set_in_process({})
                if op[0] == "close" and log.failed is None:
                    log.close()
                else:
                    abandon(log)
                log = open_log(path, FSYNC)
                # Whatever is back is whole: pending batches may or may not have survived.
                appended = {b: d for b, d in appended.items() if b < log.log_end_offset}
                pending = {b: d for b, d in pending.items() if b < log.log_end_offset}
                continue
            if op[0] == "append":
                _, n, vsize, fault = op
                raw, h = make(n=n, vsize=vsize)
                failpoints.set_in_process(_FAULTS[fault])
                model: list[Appended] = []
                try:
                    landed = _store(log, model, raw, h)
                finally:
                    failpoints.set_in_process({})
                if landed:
                    appended[model[0].base] = pending[model[0].base] = model[0].data
            else:
                failpoints.set_in_process(_FAULTS[op[1]])
                try:
                    end = log.sync()
                except (OSError, KaasError):
                    continue
                finally:
                    failpoints.set_in_process({})
                acked.update({b: d for b, d in pending.items() if b < end})
                pending = {b: d for b, d in pending.items() if b >= end}
        abandon(log)
        final = open_log(path, FSYNC)
        off = final.log_start_offset
        seen: dict[int, bytes] = {}
        for h, data in final.batches(off):
            assert h.base_offset == off and wb.crc_ok(data, 0, h)
            seen[h.base_offset] = data
            off = h.next_offset
        assert off == final.log_end_offset
        for base, data in acked.items():
            assert seen.get(base) == data, f"acknowledged batch at {base} lost or changed"
    finally:
        shutil.rmtree(root, ignore_errors=True)
