"""PartitionLog on a tmp directory: dense offsets, whole-batch reads, rolls, recovery of a
torn tail, reopen epochs, retention, timestamps, producer state and aborted transactions.

Every expectation is checked against a model: the list of batches the test appended, with
the base offset and leader epoch the log must have patched in.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kaas.domain.producer_state import Append, Duplicate
from kaas.storage.partition_log import LogConfig, PartitionLog, Segment, segment_name
from kaas.wire import batch as wb

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=200, fsync=False, retention_ms=-1)


# ----------------------------------------------------------------------------- helpers


@dataclass
class Appended:
    base: int
    next: int
    data: bytes  # the bytes as stored: base offset and leader epoch patched in
    max_ts: int

    @property
    def size(self) -> int:
        return len(self.data)


def make(*, n: int = 1, vsize: int = 20, ts: int = 1000, pid: int = -1, pepoch: int = -1,
         seq: int = -1, txn: bool = False) -> tuple[bytes, wb.BatchHeader]:
    raw = wb.build_batch(
        attributes=wb.ATTR_TRANSACTIONAL if txn else 0, base_timestamp=ts, max_timestamp=ts,
        producer_id=pid, producer_epoch=pepoch, base_sequence=seq,
        records=[(None, b"v" * vsize)] * n,
    )
    return raw, wb.validate_produce(raw, 1 << 30)


def put(log: PartitionLog, model: list[Appended], raw: bytes, h: wb.BatchHeader,
        now_ms: int | None = None) -> Appended:
    expected_base = log.log_end_offset
    res = log.append(raw, h, now_ms=now_ms)
    assert res.base_offset == expected_base
    assert res.next_offset == expected_base + h.records_count
    assert log.log_end_offset == res.next_offset
    buf = bytearray(raw)
    wb.patch(buf, 0, res.base_offset, log.epoch)
    a = Appended(res.base_offset, res.next_offset, bytes(buf), h.max_timestamp)
    model.append(a)
    return a


def marker(log: PartitionLog, model: list[Appended], *, pid: int, pepoch: int, commit: bool,
           ts: int = 1000) -> Appended:
    raw = wb.control_batch(producer_id=pid, producer_epoch=pepoch, commit=commit,
                           coordinator_epoch=0, timestamp=ts)
    return put(log, model, raw, wb.parse_header(raw))


def open_log(path: Path, cfg: LogConfig = SMALL, epoch: int | None = None) -> PartitionLog:
    log = PartitionLog(path, cfg)
    log.open(epoch)
    return log


def abandon(log: PartitionLog) -> None:
    """What a SIGKILL leaves behind: no fsync, no snapshot, no manifest; just drop the fds."""
    for seg in log.segments:
        if seg.fd >= 0:
            os.close(seg.fd)
            seg.fd = -1
    log._closed = True


def all_bytes(log: PartitionLog, start: int = 0) -> bytes:
    out = []
    off = start
    while off < log.log_end_offset:
        res = log.read(off, 1 << 30, log.log_end_offset)
        assert res.records, off
        out.append(res.records)
        off = res.next_offset
    return b"".join(out)


def check_all(log: PartitionLog, model: list[Appended], start: int = 0) -> None:
    """Every stored batch is there, byte for byte, at its offset (offsets dense)."""
    expected = [a for a in model if a.next > start]
    assert all_bytes(log, start) == b"".join(a.data for a in expected)
    for prev, cur in zip(model, model[1:]):
        assert cur.base == prev.next
    assert log.log_end_offset == (model[-1].next if model else log.log_start_offset)


def containing(model: list[Appended], offset: int) -> int:
    for i, a in enumerate(model):
        if a.base <= offset < a.next:
            return i
    raise AssertionError(offset)


def check_read(log: PartitionLog, model: list[Appended], offset: int, max_bytes: int,
               limit: int, min_one: bool = True) -> None:
    """read() against a brute-force scan of the model."""
    res = log.read(offset, max_bytes, limit, min_one=min_one)
    if offset >= min(limit, log.log_end_offset):
        assert res.records == b""
        return
    i = containing(model, offset)
    got = [(p, h) for p, h in wb.iter_headers(res.records)]
    total = sum(h.size for _, h in got)
    assert total == len(res.records), "only whole batches"
    if not got:
        # nothing fits and we were not asked for at least one
        assert not min_one or model[i].base >= limit
        assert res.next_offset == offset
        return
    assert got[0][1].base_offset == model[i].base
    assert res.first_offset == model[i].base
    assert res.records == b"".join(a.data for a in model[i : i + len(got)])
    assert res.next_offset == model[i + len(got) - 1].next
    assert all(h.base_offset < limit for _, h in got)
    if len(got) > 1 or not min_one:
        assert total <= max_bytes
    # maximal within the segment: the next batch did not fit, is past the limit, or lives
    # in another segment
    j = i + len(got)
    if j < len(model):
        nxt = model[j]
        seg_bases = [s.base_offset for s in log.segments]
        same_seg = not any(b for b in seg_bases if model[j - 1].base < b <= nxt.base)
        assert nxt.base >= limit or total + nxt.size > max_bytes or not same_seg


def segment_files(path: Path) -> list[str]:
    return sorted(p for p in os.listdir(path) if p.endswith(".log"))


# ----------------------------------------------------------------------------- appends and reads


def test_offsets_dense_and_reads_whole_batches(tmp_path):
    log = open_log(tmp_path)
    assert log.epoch == 0
    model: list[Appended] = []
    for i in range(30):
        raw, h = make(n=1 + i % 4, vsize=10 + 7 * i)
        put(log, model, raw, h)
    check_all(log, model)
    leo = log.log_end_offset
    for off in range(leo):
        for max_bytes in (1, 100, 300, 1000, 1 << 20):
            check_read(log, model, off, max_bytes, leo)
            check_read(log, model, off, max_bytes, leo, min_one=False)
    log.close()


def test_mid_batch_offset_returns_containing_batch(tmp_path):
    log = open_log(tmp_path)
    model: list[Appended] = []
    for _ in range(5):
        raw, h = make(n=5)
        put(log, model, raw, h)
    for off in range(25):
        res = log.read(off, 1, 25)
        h = wb.parse_header(res.records)
        assert h.base_offset == off - off % 5
        assert res.records == model[off // 5].data
    log.close()


def test_min_one_and_limit(tmp_path):
    log = open_log(tmp_path)
    model: list[Appended] = []
    for _ in range(6):
        raw, h = make(n=2, vsize=100)
        put(log, model, raw, h)
    size = model[0].size
    # min_one: a batch larger than max_bytes is still returned, but only that one
    res = log.read(0, 1, 12)
    assert res.records == model[0].data and res.next_offset == 2
    assert log.read(0, 1, 12, min_one=False).records == b""
    # exactly two batches fit
    assert log.read(0, 2 * size, 12).records == model[0].data + model[1].data
    assert log.read(0, 2 * size - 1, 12).records == model[0].data
    # limit: batches whose base is at or past it are not returned
    res = log.read(0, 1 << 20, 5)  # bases 0, 2, 4 are below 5
    assert res.records == b"".join(a.data for a in model[:3])
    assert res.next_offset == 6
    assert log.read(4, 1 << 20, 4).records == b""
    assert log.read(12, 1 << 20, 12).records == b""  # at the log end
    log.close()


def test_roll_by_size_creates_epoch_stamped_segments(tmp_path):
    log = open_log(tmp_path)
    model: list[Appended] = []
    for _ in range(40):
        raw, h = make(n=2, vsize=60)
        put(log, model, raw, h)
    assert len(log.segments) > 3
    names = segment_files(tmp_path)
    assert names == [segment_name(s.base_offset, 0) for s in log.segments]
    bases = {a.base for a in model}
    for seg in log.segments[:-1]:
        assert seg.base_offset in bases
        assert seg.size >= SMALL.segment_bytes
        assert (tmp_path / seg.name).with_suffix(".idx").exists()
        assert os.path.getsize(tmp_path / seg.name) == seg.size
    for prev, seg in zip(log.segments, log.segments[1:]):
        assert prev.next_offset == seg.base_offset
        # a segment is only over the limit by its last batch
        last = [a for a in model if a.next == prev.next_offset][0]
        assert prev.size - last.size < SMALL.segment_bytes
    check_all(log, model)
    log.close()


def test_roll_by_time(tmp_path):
    cfg = LogConfig(segment_bytes=1 << 20, segment_ms=1000, index_interval_bytes=200, fsync=False)
    log = open_log(tmp_path, cfg)
    model: list[Appended] = []
    created = log.active.created_ms
    raw, h = make()
    put(log, model, raw, h, now_ms=created + 10)
    put(log, model, raw, h, now_ms=created + 999)
    assert len(log.segments) == 1
    put(log, model, raw, h, now_ms=created + 1000)
    assert len(log.segments) == 2
    assert log.active.base_offset == 2
    check_all(log, model)
    log.close()


def test_fsync_enabled_path(tmp_path):
    cfg = LogConfig(segment_bytes=512, index_interval_bytes=100, fsync=True)
    log = open_log(tmp_path, cfg)
    model: list[Appended] = []
    for _ in range(10):
        raw, h = make(vsize=80)
        put(log, model, raw, h)
    assert log.sync() == log.log_end_offset
    assert log.durable_offset == log.log_end_offset
    log.close()
    log = open_log(tmp_path, cfg)
    check_all(log, model)
    log.close()


# ----------------------------------------------------------------------------- reopen


def test_close_reopen_keeps_batches_and_bumps_epoch(tmp_path):
    log = open_log(tmp_path)
    model: list[Appended] = []
    for i in range(25):
        raw, h = make(n=1 + i % 3, vsize=50)
        put(log, model, raw, h)
    nsegs = len(log.segments)
    log.close()
    for epoch in (1, 2, 3):
        log = open_log(tmp_path)
        assert log.epoch == epoch
        assert PartitionLog.read_manifest(tmp_path)["epoch"] == epoch
        check_all(log, model)
        # the new active segment is fresh and carries the new epoch
        assert log.active.epoch == epoch
        assert log.active.base_offset == log.log_end_offset
        assert log.active.name == segment_name(log.log_end_offset, epoch)
        assert log.active.size == 0
        raw, h = make(vsize=30)
        a = put(log, model, raw, h)
        assert wb.parse_header(a.data).leader_epoch == epoch
        log.close()
    log = open_log(tmp_path)
    check_all(log, model)
    assert len(log.segments) == nsegs + 3 + 1
    # an empty segment of an older epoch at the log end is replaced, not kept
    log.close()
    log = open_log(tmp_path)
    log.close()
    log = open_log(tmp_path)
    assert [s.epoch for s in log.segments].count(log.epoch - 1) == 0
    check_all(log, model)
    log.close()


def test_open_below_manifest_epoch_refused(tmp_path):
    from kaas.errors import CorruptState

    open_log(tmp_path, epoch=5).close()
    with pytest.raises(CorruptState):
        PartitionLog(tmp_path, SMALL).open(4)


def test_reopen_without_close_sigkill(tmp_path):
    log = open_log(tmp_path)
    model: list[Appended] = []
    for i in range(30):
        raw, h = make(n=1 + i % 2, vsize=40)
        put(log, model, raw, h)
    log2 = open_log(tmp_path)  # the first is still "running"; it never closed
    abandon(log)
    assert log2.epoch == 1
    check_all(log2, model)
    log2.close()


@pytest.mark.parametrize("old_exit", ["sigkill", "close"])
def test_deposed_leader_late_write_never_interleaves(tmp_path, old_exit):
    old = open_log(tmp_path)
    model: list[Appended] = []
    for _ in range(3):
        raw, h = make()
        put(old, model, raw, h)
    new = open_log(tmp_path)
    assert new.epoch == 1
    # the deposed leader does not know yet and appends to its own (epoch 0) segment
    raw, h = make(vsize=99)
    late = old.append(raw, h)
    assert late.segment.epoch == 0
    if old_exit == "close":
        snap = (tmp_path / "producer-state.snapshot").read_bytes()
        old.close()  # must not overwrite the new leader's manifest or snapshot
        assert PartitionLog.read_manifest(tmp_path)["epoch"] == 1
        assert (tmp_path / "producer-state.snapshot").read_bytes() == snap
    else:
        abandon(old)
    for _ in range(3):
        raw, h = make(vsize=33)
        put(new, model, raw, h)
    check_all(new, model)
    new.close()
    log = open_log(tmp_path)
    check_all(log, model)
    first = log.segments[0]
    assert os.path.getsize(first.path) == first.size  # dead bytes truncated
    log.close()


def test_deposed_leader_cannot_roll_and_its_segments_are_dead(tmp_path):
    from kaas.errors import KaasError

    old = open_log(tmp_path)
    model: list[Appended] = []
    for _ in range(3):
        raw, h = make(vsize=100)
        put(old, model, raw, h)
    new = open_log(tmp_path)
    snap = (tmp_path / "producer-state.snapshot").read_bytes()
    # the deposed leader keeps appending until its segment is full: it may not roll
    with pytest.raises(KaasError) as ei:
        for i in range(40):
            raw, h = make(vsize=100, pid=9, pepoch=0, seq=i)
            old.append(raw, h)
    assert ei.value.code == 6  # NOT_LEADER_OR_FOLLOWER
    assert (tmp_path / "producer-state.snapshot").read_bytes() == snap
    assert segment_files(tmp_path) == [segment_name(0, 0), segment_name(3, 1)]
    abandon(old)
    for _ in range(25):
        raw, h = make(vsize=120)
        put(new, model, raw, h)
    new.close()
    log = open_log(tmp_path)
    check_all(log, model)
    assert 9 not in log.producers
    log.close()


def test_recovery_discards_segments_rolled_after_a_takeover(tmp_path):
    """Files a deposed leader left behind (e.g. it rolled just before noticing): a segment
    of an older epoch based at or after a newer epoch's segment is dead, whatever its base,
    and a summary it rewrote past the takeover point is not trusted."""
    old = open_log(tmp_path)
    model: list[Appended] = []
    for _ in range(3):
        raw, h = make(vsize=100)
        put(old, model, raw, h)
    new = open_log(tmp_path)  # takes over at offset 3: 00..03-e1.log
    takeover = new.log_end_offset
    for _ in range(30):
        raw, h = make(vsize=120)
        put(new, model, raw, h)
    new.close()
    # forge what a deposed epoch-0 leader could leave: late bytes and a summary in its
    # segment, and whole segments of its own at a same and at a later base
    seg0 = tmp_path / segment_name(0, 0)
    late = []
    for base in (takeover, takeover + 1):
        raw, h = make(vsize=77)
        buf = bytearray(raw)
        wb.patch(buf, 0, base, 0)
        late.append(bytes(buf))
    with open(seg0, "ab") as f:
        f.write(late[0] + late[1])
    s = Segment(0, 0, seg0, size=os.path.getsize(seg0), next_offset=takeover + 2)
    seg0.with_suffix(".idx").write_bytes(s.summary())
    bases = sorted(int(n[:20]) for n in segment_files(tmp_path))
    same_base = bases[2]  # an epoch-1 segment's base
    for base in (same_base, bases[3] + 1):
        raw, h = make(vsize=55, n=3)
        buf = bytearray(raw)
        wb.patch(buf, 0, base, 0)
        (tmp_path / segment_name(base, 0)).write_bytes(bytes(buf))
    log = open_log(tmp_path)
    check_all(log, model)
    names = segment_files(tmp_path)
    assert [n for n in names if n.endswith("-e0.log")] == [segment_name(0, 0)]
    assert os.path.getsize(seg0) == sum(a.size for a in model if a.base < takeover)
    for off in range(log.log_end_offset):
        check_read(log, model, off, 700, log.log_end_offset)
    log.close()


# ----------------------------------------------------------------------------- torn tails


def _fill(tmp_path, n=12):
    log = open_log(tmp_path)
    model: list[Appended] = []
    for i in range(n):
        raw, h = make(n=1 + i % 3, vsize=30)
        put(log, model, raw, h)
    return log, model


def _active_file(log: PartitionLog) -> Path:
    return [s for s in log.segments if s.size][-1].path


@pytest.mark.parametrize("close_first", [True, False])
@pytest.mark.parametrize("damage", ["garbage", "half_batch", "flip_last", "header_only"])
def test_torn_tail_truncated_on_reopen(tmp_path, damage, close_first):
    log, model = _fill(tmp_path)
    path = _active_file(log)
    if close_first:
        log.close()
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        end = f.tell()
        if damage == "garbage":
            f.write(os.urandom(37))
        elif damage == "half_batch":
            raw, _ = make(vsize=50)
            f.write(raw[: len(raw) // 2])
        elif damage == "header_only":
            raw, _ = make(vsize=50)
            f.write(raw[: wb.HEADER_SIZE])
        else:  # flip a byte inside the last batch (its records, covered by the CRC)
            f.seek(end - 3)
            b = f.read(1)
            f.seek(end - 3)
            f.write(bytes([b[0] ^ 0x5A]))
    if not close_first:
        log2 = open_log(tmp_path)
        abandon(log)
        log = log2
    else:
        log = open_log(tmp_path)
    survivors = model[:-1] if damage == "flip_last" else model
    check_all(log, survivors)
    seg = [s for s in log.segments if s.path == path][0]
    assert os.path.getsize(path) == seg.size == sum(a.size for a in survivors if a.base >= seg.base_offset)
    # appends continue densely after the truncation point
    raw, h = make()
    put(log, survivors, raw, h)
    check_all(log, survivors)
    log.close()
    log = open_log(tmp_path)
    check_all(log, survivors)
    log.close()


def test_flipped_byte_mid_segment_truncates_from_there(tmp_path):
    log, model = _fill(tmp_path, n=4)
    path = log.active.path
    log.close()
    pos = model[0].size + model[1].size + wb.HEADER_SIZE + 2  # inside batch 2's records
    data = bytearray(path.read_bytes())
    data[pos] ^= 0xFF
    path.write_bytes(bytes(data))
    log = open_log(tmp_path)
    check_all(log, model[:2])
    log.close()


@pytest.mark.parametrize("damage", ["garbage", "stale_size", "missing"])
def test_bad_segment_summary_falls_back_to_scan(tmp_path, damage):
    log, model = _fill(tmp_path, n=30)
    closed = log.segments[:-1]
    assert len(closed) >= 2
    log.close()
    idx = closed[0].path.with_suffix(".idx")
    if damage == "garbage":
        idx.write_bytes(b"\xc1\xc1 junk")
    elif damage == "missing":
        idx.unlink()
    else:  # bytes appended behind the summary's back (a deposed leader's late write)
        with open(closed[0].path, "ab") as f:
            f.write(os.urandom(100))
    log = open_log(tmp_path)
    check_all(log, model)
    for off in range(0, log.log_end_offset, 3):
        check_read(log, model, off, 500, log.log_end_offset)
    assert os.path.getsize(closed[0].path) == log.segments[0].size
    log.close()


def test_reads_of_batches_larger_than_the_read_chunk(tmp_path):
    cfg = LogConfig(segment_bytes=3 << 20, index_interval_bytes=4096, fsync=False)
    log = open_log(tmp_path, cfg)
    model: list[Appended] = []
    for vsize in (10, 600_000, 70_000, 130_000, 90_000, 300_000, 5, 250_000, 262_000):
        raw, h = make(n=2, vsize=vsize // 2)
        put(log, model, raw, h)
    leo = log.log_end_offset
    for off in range(leo):
        for max_bytes in (1, 100_000, 262_144, 300_000, 700_000, 1 << 21):
            check_read(log, model, off, max_bytes, leo)
    check_all(log, model)
    log.close()


# ----------------------------------------------------------------------------- index property


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 300)), min_size=1, max_size=40),
    picks=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 3000), st.booleans()),
                   min_size=1, max_size=8),
    reopen=st.booleans(),
    index_interval=st.sampled_from([1, 150, 700, 1 << 20]),
)
def test_read_returns_containing_batch_property(shapes, picks, reopen, index_interval):
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=index_interval, fsync=False)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d)
        log = open_log(path, cfg)
        model: list[Appended] = []
        for n, vsize in shapes:
            raw, h = make(n=n, vsize=vsize)
            put(log, model, raw, h)
        if reopen:
            log.close()
            log = open_log(path, cfg)
        leo = log.log_end_offset
        for off, max_bytes, min_one in picks:
            off %= leo
            limit = leo if off % 3 else max(off, leo - 2)
            check_read(log, model, off, max_bytes, limit, min_one)
        log.close()


# ----------------------------------------------------------------------------- epochs


def test_epoch_end_offset_across_reopens(tmp_path):
    starts = {}
    log = open_log(tmp_path)
    model: list[Appended] = []
    for epoch, appends in [(0, 5), (1, 3), (2, 0), (3, 4), (4, 0)]:
        if epoch:
            log.close()
            log = open_log(tmp_path)
        assert log.epoch == epoch
        if appends:
            starts[epoch] = log.log_end_offset
        for _ in range(appends):
            raw, h = make(n=2, vsize=200)
            put(log, model, raw, h)
    leo = log.log_end_offset
    assert log.epoch_end_offset(-1) == (-1, -1)
    assert log.epoch_end_offset(0) == (0, starts[1])
    assert log.epoch_end_offset(1) == (1, starts[3])
    assert log.epoch_end_offset(2) == (1, starts[3])  # no data in epoch 2
    assert log.epoch_end_offset(3) == (3, leo)
    # the current epoch starts at the log end (its fresh segment), as Apache assigns the
    # leader epoch on becoming leader
    assert log.epoch_end_offset(4) == (4, leo)
    assert log.epoch_end_offset(99) == (4, leo)
    log.close()
    log = open_log(tmp_path)  # epoch 5; epoch 4 never appended, so it leaves no trace
    assert log.epoch_end_offset(0) == (0, starts[1])
    assert log.epoch_end_offset(3) == (3, leo)
    assert log.epoch_end_offset(4) == (3, leo)
    assert log.epoch_end_offset(5) == (5, leo)
    check_all(log, model)
    log.close()


# ----------------------------------------------------------------------------- truncation, retention


def _many(tmp_path, cfg=SMALL, n=40, ts0=0, ts_step=1000):
    log = open_log(tmp_path, cfg)
    model: list[Appended] = []
    for i in range(n):
        raw, h = make(n=2, vsize=80, ts=ts0 + i * ts_step)
        put(log, model, raw, h)
    assert len(log.segments) >= 4
    return log, model


def test_delete_records_drops_whole_old_segments(tmp_path):
    log, model = _many(tmp_path)
    segs = list(log.segments)
    target = segs[2].base_offset + 1  # inside the third segment
    assert log.delete_records(target) == target
    assert log.log_start_offset == target
    assert log.segments[0].base_offset == segs[2].base_offset
    for s in segs[:2]:
        assert not s.path.exists() and not s.path.with_suffix(".idx").exists()
    # reading at the new start returns the batch containing it
    check_read(log, model, target, 1 << 20, log.log_end_offset)
    # a lower offset never moves the start back
    assert log.delete_records(1) == target
    # deleting past every closed segment keeps the active one
    active = log.active
    assert log.delete_records(log.log_end_offset) == log.log_end_offset
    assert log.segments == [active]
    assert active.path.exists()
    log.close()
    log = open_log(tmp_path)
    assert log.log_start_offset == model[-1].next
    assert log.log_end_offset == model[-1].next
    raw, h = make()
    put(log, model, raw, h)
    check_all(log, model, start=log.log_start_offset)
    log.close()


def test_delete_records_survives_reopen(tmp_path):
    log, model = _many(tmp_path)
    target = log.segments[1].base_offset + 3
    log.delete_records(target)
    log.close()
    log = open_log(tmp_path)
    assert log.log_start_offset == target
    check_all(log, model, start=target)
    log.close()


def test_retention_by_bytes(tmp_path):
    cfg = LogConfig(segment_bytes=1024, index_interval_bytes=200, fsync=False,
                    retention_ms=-1, retention_bytes=2500)
    log, model = _many(tmp_path, cfg)
    before = list(log.segments)
    total = log.size_bytes()
    deleted = log.apply_retention(now_ms=10**12)
    assert deleted >= 1
    assert log.segments == before[deleted:]
    assert log.active is before[-1]
    remaining = log.size_bytes()
    assert remaining >= cfg.retention_bytes
    assert remaining - log.segments[0].size < cfg.retention_bytes
    assert total - remaining == sum(s.size for s in before[:deleted])
    assert log.log_start_offset == log.segments[0].base_offset
    for s in before[:deleted]:
        assert not s.path.exists()
    assert log.apply_retention(now_ms=10**12) == 0
    check_all(log, model, start=log.log_start_offset)
    log.close()
    log = open_log(tmp_path, cfg)
    assert log.log_start_offset == before[deleted].base_offset
    check_all(log, model, start=log.log_start_offset)
    log.close()


def test_retention_by_bytes_zero_deletes_the_active_segment_once_durable(tmp_path):
    cfg = LogConfig(segment_bytes=1024, index_interval_bytes=200, fsync=False,
                    retention_ms=-1, retention_bytes=0)
    log, model = _many(tmp_path, cfg)
    active, end = log.active, log.log_end_offset
    log.apply_retention(now_ms=0)  # the active segment's appends are not durable yet
    assert log.segments == [active]
    assert log.log_start_offset == active.base_offset
    check_all(log, model, start=log.log_start_offset)
    log.sync()
    assert log.apply_retention(now_ms=0) == 1  # rolled at the log end, then deleted
    assert [s.base_offset for s in log.segments] == [end] and log.active.size == 0
    assert log.log_start_offset == log.log_end_offset == end
    log.close()


def test_retention_by_time(tmp_path):
    cfg = LogConfig(segment_bytes=1024, index_interval_bytes=200, fsync=False,
                    retention_ms=10_000)
    log, model = _many(tmp_path, cfg, ts0=0, ts_step=1000)
    before = list(log.segments)
    # at now = seg[1].max_ts + retention, seg[0] and seg[1]... only those strictly older go
    cut = before[1].max_timestamp + cfg.retention_ms
    deleted = log.apply_retention(now_ms=cut)
    assert deleted == 1
    assert log.segments == before[1:]
    deleted = log.apply_retention(now_ms=cut + 1)
    assert deleted == 1
    assert log.log_start_offset == before[2].base_offset
    # far in the future every closed segment goes; the active one only once durable
    log.apply_retention(now_ms=10**12)
    assert log.segments == [before[-1]]
    assert all(not s.path.exists() for s in before[:-1])
    check_all(log, model, start=log.log_start_offset)
    log.sync()
    assert log.apply_retention(now_ms=10**12) == 1
    assert log.log_start_offset == log.log_end_offset == model[-1].next
    assert not before[-1].path.exists()
    log.close()


# ----------------------------------------------------------------------------- timestamps


def test_offset_for_timestamp_and_max_timestamp(tmp_path):
    log = open_log(tmp_path)
    model: list[Appended] = []
    stamps = [500, 100, 900, 900, 300, 1200, 50, 1200, 700, 1100] * 3
    for i, ts in enumerate(stamps):
        raw, h = make(n=1 + i % 3, vsize=70, ts=ts + i)
        put(log, model, raw, h)
    assert len(log.segments) > 2

    def brute_ts(ts, start=0):
        for a in model:
            if a.max_ts >= ts and a.next > start:
                return max(a.base, start), a.max_ts
        return None

    def brute_max(start=0):
        best = None
        for a in model:
            if a.next > start and (best is None or a.max_ts > best[1]):
                best = (max(a.base, start), a.max_ts)  # the batch's first record: all share it
        return best

    for ts in (-1, 0, 100, 501, 900, 1205, 1229, 1230, 5000):
        assert log.offset_for_timestamp(ts) == brute_ts(ts), ts
    assert log.max_timestamp_offset() == brute_max()
    start = log.segments[1].base_offset + 1
    log.delete_records(start)
    for ts in (-1, 0, 100, 501, 900, 1205, 1229, 5000):
        assert log.offset_for_timestamp(ts) == brute_ts(ts, start), ts
    assert log.max_timestamp_offset() == brute_max(start)
    log.close()
    log = open_log(tmp_path)
    for ts in (0, 501, 1205):
        assert log.offset_for_timestamp(ts) == brute_ts(ts, start), ts
    assert log.max_timestamp_offset() == brute_max(start)
    log.close()


def test_timestamps_on_empty_log(tmp_path):
    log = open_log(tmp_path)
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() is None
    assert log.read(0, 100, 0).records == b""
    log.close()


# ----------------------------------------------------------------------------- producer state


PID, PEPOCH = 77, 2


def _idempotent(log, model, count, seq0=0, pid=PID):
    seq = seq0
    for i in range(count):
        n = 1 + i % 3
        raw, h = make(n=n, vsize=60, pid=pid, pepoch=PEPOCH, seq=seq, ts=5000 + i)
        assert isinstance(log.producers.check(pid, PEPOCH, seq, n, False), Append)
        put(log, model, raw, h)
        seq += n
    return seq


def _check_dedupe(log, model, next_seq):
    last = model[-1]
    h = wb.parse_header(last.data)
    d = log.producers.check(PID, PEPOCH, h.base_sequence, h.records_count, False)
    assert d == Duplicate(last.base, last.max_ts)
    # the ring holds the last five batches of the pid
    for a in [m for m in model if wb.parse_header(m.data).producer_id == PID][-5:]:
        hh = wb.parse_header(a.data)
        assert log.producers.check(PID, PEPOCH, hh.base_sequence, hh.records_count, False) \
            == Duplicate(a.base, a.max_ts)
    assert isinstance(log.producers.check(PID, PEPOCH, next_seq, 1, False), Append)
    assert not isinstance(log.producers.check(PID, PEPOCH, next_seq + 1, 1, False),
                          (Append, Duplicate))


@pytest.mark.parametrize("count", [3, 30])  # 30 rolls segments (snapshot at each roll)
def test_producer_state_survives_close_reopen(tmp_path, count):
    log = open_log(tmp_path)
    model: list[Appended] = []
    nxt = _idempotent(log, model, count)
    _check_dedupe(log, model, nxt)
    log.close()
    assert (tmp_path / "producer-state.snapshot").exists()
    log = open_log(tmp_path)
    assert log.snapshot_error is None
    _check_dedupe(log, model, nxt)
    nxt = _idempotent(log, model, 2, seq0=nxt)
    log.close()
    log = open_log(tmp_path)
    _check_dedupe(log, model, nxt)
    check_all(log, model)
    log.close()


@pytest.mark.parametrize("count", [3, 30])
def test_producer_state_survives_sigkill(tmp_path, count):
    log = open_log(tmp_path)
    model: list[Appended] = []
    nxt = _idempotent(log, model, count)
    log2 = open_log(tmp_path)  # no close(): the ring is rebuilt by replay
    abandon(log)
    _check_dedupe(log2, model, nxt)
    nxt = _idempotent(log2, model, 2, seq0=nxt)
    log3 = open_log(tmp_path)
    abandon(log2)
    _check_dedupe(log3, model, nxt)
    check_all(log3, model)
    log3.close()


def test_corrupt_snapshot_is_rebuilt_from_log(tmp_path):
    log = open_log(tmp_path)
    model: list[Appended] = []
    nxt = _idempotent(log, model, 20)
    log.close()
    (tmp_path / "producer-state.snapshot").write_bytes(b"\xc1 not msgpack")
    log = open_log(tmp_path)
    assert log.snapshot_error
    _check_dedupe(log, model, nxt)
    log.close()


def test_snapshot_ahead_of_truncated_tail_is_not_trusted(tmp_path):
    """close() snapshots at the log end; if the tail is then lost, the ring must not
    remember batches the log no longer holds."""
    log = open_log(tmp_path)
    model: list[Appended] = []
    nxt = _idempotent(log, model, 4)
    path = log.active.path
    log.close()
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 5)  # tear the last batch
    lost = model.pop()
    log = open_log(tmp_path)
    check_all(log, model)
    h = wb.parse_header(lost.data)
    # the lost batch is not a duplicate: it must be written again
    assert isinstance(log.producers.check(PID, PEPOCH, h.base_sequence, h.records_count, False),
                      Append)
    _check_dedupe(log, model, h.base_sequence)
    assert nxt > h.base_sequence
    log.close()


# ----------------------------------------------------------------------------- transactions


TXN_PID, OTHER_PID = 501, 502


def _txn_scenario(log, model):
    """pid 501: txn at offsets [a..b) then ABORT; pid 502: txn, COMMIT. Returns offsets."""
    raw, h = make(n=2)  # plain data before
    put(log, model, raw, h)
    first = None
    seq = 0
    for i in range(4):
        raw, h = make(n=3, vsize=90, pid=TXN_PID, pepoch=0, seq=seq, txn=True)
        a = put(log, model, raw, h)
        first = a.base if first is None else first
        seq += 3
        if i == 1:
            raw, h = make(n=1, pid=OTHER_PID, pepoch=0, seq=0, txn=True)
            other_first = put(log, model, raw, h).base
    assert log.last_stable_offset() == first
    assert log.aborted_in(0, log.log_end_offset) == []
    m = marker(log, model, pid=OTHER_PID, pepoch=0, commit=True)
    assert log.last_stable_offset() == first  # 501 still open
    assert log.aborted_in(0, log.log_end_offset) == []
    assert m.base > other_first
    m = marker(log, model, pid=TXN_PID, pepoch=0, commit=False)
    assert log.last_stable_offset() == log.log_end_offset
    return first, m.base


def _check_aborted(log, first, marker_off):
    leo = log.log_end_offset
    assert log.aborted_in(0, leo) == [(TXN_PID, first)]
    assert log.aborted_in(marker_off, leo) == [(TXN_PID, first)]
    assert log.aborted_in(marker_off + 1, leo) == []
    assert log.aborted_in(0, first) == []
    assert log.aborted_in(0, first + 1) == [(TXN_PID, first)]
    assert log.last_stable_offset() == leo


@pytest.mark.parametrize("cfg", [SMALL, LogConfig(segment_bytes=1 << 20, fsync=False)],
                         ids=["rolling", "one_segment"])
@pytest.mark.parametrize("how", ["close", "sigkill"])
def test_aborted_transactions_survive_reopen(tmp_path, cfg, how):
    log = open_log(tmp_path, cfg)
    model: list[Appended] = []
    first, moff = _txn_scenario(log, model)
    _check_aborted(log, first, moff)
    if how == "close":
        log.close()
        log = open_log(tmp_path, cfg)
    else:
        log2 = open_log(tmp_path, cfg)
        abandon(log)
        log = log2
    _check_aborted(log, first, moff)
    # twice more, so entries restored from a .txnidx / snapshot are not lost or doubled
    log.close()
    log = open_log(tmp_path, cfg)
    _check_aborted(log, first, moff)
    log2 = open_log(tmp_path, cfg)
    abandon(log)
    _check_aborted(log2, first, moff)
    check_all(log2, model)
    log2.close()


@pytest.mark.parametrize("how", ["close", "sigkill"])
def test_open_transaction_holds_lso_across_reopen(tmp_path, how):
    log = open_log(tmp_path)
    model: list[Appended] = []
    for _ in range(8):  # roll a few segments first
        raw, h = make(vsize=200)
        put(log, model, raw, h)
    raw, h = make(n=2, pid=TXN_PID, pepoch=0, seq=0, txn=True)
    first = put(log, model, raw, h).base
    for _ in range(8):
        raw, h = make(vsize=200)
        put(log, model, raw, h)
    assert log.last_stable_offset() == first
    if how == "close":
        log.close()
        log = open_log(tmp_path)
    else:
        log2 = open_log(tmp_path)
        abandon(log)
        log = log2
    assert log.last_stable_offset() == first
    # read_committed reads stop below the LSO
    res = log.read(0, 1 << 20, log.last_stable_offset())
    assert all(hh.base_offset < first for _, hh in wb.iter_headers(res.records))
    m = marker(log, model, pid=TXN_PID, pepoch=0, commit=False)
    assert log.last_stable_offset() == log.log_end_offset
    assert log.aborted_in(0, log.log_end_offset) == [(TXN_PID, first)]
    log2 = open_log(tmp_path)
    abandon(log)
    assert log2.aborted_in(0, log2.log_end_offset) == [(TXN_PID, first)]
    assert log2.aborted_in(m.base + 1, log2.log_end_offset) == []
    assert log2.last_stable_offset() == log2.log_end_offset
    log2.close()


def test_reopen_at_the_same_epoch_appends_to_the_reused_empty_segment(tmp_path):
    """A broker restarted before its peers noticed keeps its epoch: the empty segment of
    that epoch is reused and must be writable (it was an EBADF once)."""
    from kaas.storage.partition_log import LogConfig, PartitionLog
    from kaas.wire import batch as wb

    cfg = LogConfig(fsync=False)
    log1 = PartitionLog(tmp_path, cfg)
    log1.open(3)
    log1.close()
    log2 = PartitionLog(tmp_path, cfg)
    assert log2.open(3) == 3
    rec = wb.build_batch(records=[(b"k", b"v")])
    res = log2.append(rec, wb.validate_produce(rec, 1 << 20))
    assert res.base_offset == 0 and log2.log_end_offset == 1
    log2.close()
    log3 = PartitionLog(tmp_path, cfg)
    log3.open(3)
    assert [h.base_offset for h, _ in log3.batches()] == [0]
    log3.close()


# ----------------------------------------------------------------------------- record timestamps

def stamped(stamps: list[int], *, codec: int = 0, header_max: int | None = None, pid: int = -1,
            pepoch: int = -1, seq: int = -1, append_time: int | None = None) -> tuple[bytes, wb.BatchHeader]:
    """A batch whose records carry ``stamps`` (aiokafka's builder, any codec); with
    ``header_max`` its header's MaxTimestamp is overwritten (Sarama 1.22 sends -1) and
    the CRC recomputed, as such a client's batch arrived before produce rewrote it."""
    import struct

    import crc32c
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=pid,
                                  producer_epoch=pepoch, base_sequence=seq, batch_size=1 << 22)
    for i, ts in enumerate(stamps):
        b.append(i, timestamp=ts, key=b"k%d" % i, value=b"v" * 30, headers=[])
    buf = bytearray(b.build())
    if header_max is not None:
        struct.pack_into(">q", buf, 35, header_max)
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[wb.CRC_START:])))
    raw = bytes(buf)
    if append_time is not None:
        raw = wb.stamp_log_append_time(raw, append_time)
    return raw, wb.validate_produce(raw, 1 << 30)


def _records_model(model: list[Appended]) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record the test appended, from aiokafka's reader."""
    from aiokafka.record.default_records import DefaultRecordBatch

    out = []
    for a in model:
        h = wb.parse_header(a.data)
        if h.is_control:
            out.append((a.base, h.max_timestamp))
            continue
        for r in DefaultRecordBatch(a.data):
            out.append((r.offset, h.max_timestamp if h.attributes & wb.ATTR_LOG_APPEND_TIME else r.timestamp))
    return out


def _first_at_or_after(recs, ts, start):
    return next(((o, t) for o, t in recs if o >= start and t >= ts), None)


def _first_max(recs, start):
    live = [(o, t) for o, t in recs if o >= start]
    if not live:
        return None
    top = max(t for _, t in live)
    return next((o, t) for o, t in live if t == top)


def test_timestamp_lookups_answer_inside_a_batch(tmp_path):
    log = open_log(tmp_path)
    model: list[Appended] = []
    put(log, model, *stamped([100, 300, 200, 300, 150]))  # offsets 0-4; the max is not the last
    put(log, model, *stamped([250, 310], header_max=-1))  # offsets 5-6, header -1
    assert log.offset_for_timestamp(201) == (1, 300)  # the second record, not the batch edge
    assert log.offset_for_timestamp(260) == (1, 300)
    assert log.offset_for_timestamp(301) == (6, 310)  # found through a -1 header
    assert log.offset_for_timestamp(311) is None
    assert log.max_timestamp_offset() == (6, 310)
    put(log, model, *stamped([400, 90, 400]))  # offsets 7-9: ties, the first one answers
    assert log.max_timestamp_offset() == (7, 400)
    put(log, model, *stamped([400]))
    assert log.max_timestamp_offset() == (7, 400)
    log.delete_records(8)  # the max record is below the log start now
    assert log.max_timestamp_offset() == (9, 400)
    assert log.offset_for_timestamp(0) == (8, 90)
    log.close()


def test_timestamp_lookups_of_librdkafka_0081(tmp_path):
    # librdkafka's 0081 ListOffsets subtest (librdkafka 2.15, tests/0081-admin.c) writes
    # three records stamped b+100, b+400, b+250 and expects, as Apache 3.8+ answers:
    # MAX_TIMESTAMP 1; b+50 -> 0; b+300 -> 1; b+150 -> 1 (the first record at or past
    # the target, not the first record of the batch).
    log = open_log(tmp_path)
    model: list[Appended] = []
    b = 10_000_000
    put(log, model, *stamped([b + 100, b + 400, b + 250]))
    assert log.max_timestamp_offset() == (1, b + 400)
    assert log.offset_for_timestamp(b + 50) == (0, b + 100)
    assert log.offset_for_timestamp(b + 300) == (1, b + 400)
    assert log.offset_for_timestamp(b + 150) == (1, b + 400)
    assert log.offset_for_timestamp(b + 401) is None
    log.close()


_batch = st.tuples(
    st.lists(st.integers(0, 5_000), min_size=1, max_size=6),  # record timestamps
    st.sampled_from(["header", "minus1", "low", "append_time"]),  # how the header says it
    st.sampled_from([0, 0, 1, 3]),  # codec
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(_batch, min_size=1, max_size=25), targets=st.lists(st.integers(-1, 5_200), max_size=8),
       cut=st.integers(0, 60), reopen=st.booleans())
def test_timestamp_lookups_match_a_record_model(batches, targets, cut, reopen):
    """Against every record the test wrote: by time, the first record at or past the log
    start whose timestamp is at least the target; MAX_TIMESTAMP, the first record with
    the highest timestamp. Headers that say -1, a max below the base, LogAppendTime,
    compressed batches, segment rolls, a DeleteRecords start, a reopen (summaries)."""
    with tempfile.TemporaryDirectory() as d:
        cfg = LogConfig(segment_bytes=600, index_interval_bytes=150, fsync=False, retention_ms=-1)
        log = open_log(Path(d), cfg)
        model: list[Appended] = []
        for i, (stamps, how, codec) in enumerate(batches):
            if how == "minus1":
                raw, h = stamped(stamps, codec=codec, header_max=-1)
            elif how == "low":
                raw, h = stamped(stamps, codec=codec, header_max=min(stamps) - 1)
            elif how == "append_time":
                raw, h = stamped(stamps, codec=codec, append_time=2_000 + i)
            else:
                raw, h = stamped(stamps, codec=codec)
            put(log, model, raw, h)
        recs = _records_model(model)
        start = min(cut, log.log_end_offset)
        log.delete_records(start)
        start = log.log_start_offset
        if reopen:
            log.close()
            log = open_log(Path(d), cfg)
        for ts in targets + [0, 5_000]:
            assert log.offset_for_timestamp(ts) == _first_at_or_after(recs, ts, start), ts
        assert log.max_timestamp_offset() == _first_max(recs, start)
        for seg in log.segments:
            seg_recs = [t for o, t in recs if seg.base_offset <= o < seg.next_offset]
            assert seg.max_timestamp == max(seg_recs, default=-1)
        log.close()


# ------------------------------------------------------------- segments stored before LogValidator parity


def _old_segment(path: Path, base: int, batches: list[bytes], *, summary_max: int | None) -> Path:
    """Write a closed segment as a broker before this change left it: batches as the
    client sent them (header MaxTimestamp -1), and, with ``summary_max``, a summary in
    the old shape (no "ts" marker) whose max came from those headers."""
    import msgpack

    data = bytearray()
    offsets, positions = [], []
    off = base
    for raw in batches:
        buf = bytearray(raw)
        wb.patch(buf, 0, off, 0)
        offsets.append(off)
        positions.append(len(data))
        data += buf
        off = wb.parse_header(buf).next_offset
    seg = path / segment_name(base, 0)
    seg.write_bytes(bytes(data))
    if summary_max is not None:
        seg.with_suffix(".idx").write_bytes(msgpack.packb({
            "format": 1, "size": len(data), "next_offset": off, "max_timestamp": summary_max,
            "offsets": offsets, "positions": positions}))
    return seg


@pytest.mark.parametrize("summary", [True, False])
def test_retention_deletes_old_segments_whose_headers_said_minus_one(tmp_path, summary):
    day = 24 * 3600 * 1000
    t0 = 1_700_000_000_000
    old = [stamped([t0 + i, t0 + i + 5], header_max=-1)[0] for i in range(3)]
    newer = [stamped([t0 + 2 * day + i], header_max=-1)[0] for i in range(2)]
    _old_segment(tmp_path, 0, old, summary_max=-1 if summary else None)
    _old_segment(tmp_path, 6, newer, summary_max=-1 if summary else None)
    clock = [t0 + 3 * day]
    cfg = LogConfig(segment_bytes=1 << 20, fsync=False, retention_ms=2 * day)
    log = PartitionLog(tmp_path, cfg, clock=lambda: clock[0])
    log.open(1)
    assert [s.max_timestamp for s in log.segments[:2]] == [t0 + 7, t0 + 2 * day + 1]
    if summary:  # the old summary was rescanned and rewritten with the marker
        import msgpack

        idx = msgpack.unpackb((tmp_path / segment_name(0, 0)).with_suffix(".idx").read_bytes())
        assert (idx["max_timestamp"], idx["ts"]) == (t0 + 7, "records")
        assert any("rescanned" in n for n in log.open_notes)
    assert log.offset_for_timestamp(t0 + 3) == (1, t0 + 5)  # inside the first batch
    assert log.apply_retention(clock[0]) == 1  # the first segment is past 2 days; the second not
    assert log.log_start_offset == 6
    assert log.apply_retention(clock[0]) == 0
    log.close()
    log = PartitionLog(tmp_path, cfg, clock=lambda: clock[0])
    log.open()
    assert log.log_start_offset == 6 and log.segments[0].max_timestamp == t0 + 2 * day + 1
    log.close()


def test_retention_falls_back_to_file_time_for_segments_without_timestamps(tmp_path):
    # Records that carry no timestamp at all (-1): the segment ages from its file's
    # modification time, as Apache's LogSegment.largestTimestamp does, not never.
    _old_segment(tmp_path, 0, [stamped([-1, -1], header_max=-1)[0]], summary_max=-1)
    seg = tmp_path / segment_name(0, 0)
    mtime_ms = 1_600_000_000_000
    os.utime(seg, ns=(mtime_ms * 10**6, mtime_ms * 10**6))
    cfg = LogConfig(fsync=False, retention_ms=1000)
    log = PartitionLog(tmp_path, cfg, clock=lambda: mtime_ms + 500)
    log.open(1)
    assert log.segments[0].max_timestamp == -1
    assert log.apply_retention(mtime_ms + 1000) == 0
    assert log.apply_retention(mtime_ms + 1001) == 1
    log.close()


# ----------------------------------------------------------------------------- producer expiry by the broker's clock


def test_producer_state_expires_by_the_logs_clock_not_the_batch_timestamp(tmp_path):
    day = 24 * 3600 * 1000
    clock = [1_700_000_000_000]
    log = PartitionLog(tmp_path, SMALL, clock=lambda: clock[0])
    log.open()
    model: list[Appended] = []
    raw, h = stamped([clock[0] - 5, clock[0]], header_max=-1, pid=PID, pepoch=PEPOCH, seq=0)
    assert isinstance(log.producers.check(PID, PEPOCH, 0, 2, False), Append)
    first = put(log, model, raw, h)
    assert log.producers.get(PID).last_append_ms == clock[0]
    clock[0] += 32_000
    assert log.producers.expire(clock[0], day) == []
    assert log.producers.check(PID, PEPOCH, 0, 2, False) == Duplicate(first.base, -1)
    # after a clean reopen (snapshot) and after a SIGKILL (replay from the log), the
    # entry keeps living by the broker's clock: at most one day from the open
    log.close()
    log = PartitionLog(tmp_path, SMALL, clock=lambda: clock[0])
    log.open()
    assert log.producers.get(PID).last_append_ms == clock[0] - 32_000
    abandon(log)
    os.unlink(tmp_path / "producer-state.snapshot")
    clock[0] += 1000
    log = PartitionLog(tmp_path, SMALL, clock=lambda: clock[0])
    log.open()
    assert log.producers.get(PID).last_append_ms == clock[0]
    assert log.producers.expire(clock[0] + day, day) == []
    assert [e.producer_id for e in log.producers.expire(clock[0] + day + 1, day)] == [PID]
    log.close()
