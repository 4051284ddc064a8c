"""Share-partition state files (``kaas.storage.share_state``) on ``tmp_path``: the snapshot
and the journals, what a takeover reads, torn tails cut, corruption reported (never
reset), the journal folded into snapshots, a failed write."""

from __future__ import annotations

import os

import pytest

from kaas.domain.share_partition import AckBatch, Persisted, ShareLimits, SharePartition, Span
from kaas.errors import CorruptState
from kaas.storage import share_state
from kaas.storage.share_state import ShareJournal, journal_path, journals, load, load_window, snapshot_path
from tests.component.faults import faults  # noqa: F401  (the fixture)

LIMITS = ShareLimits(delivery_count_limit=3, record_lock_duration_ms=1000, max_record_locks=1000)
GROUP = "g/1"  # a group id a file name cannot hold as it is


def written(directory, epoch: int = 5) -> tuple[SharePartition, ShareJournal]:
    """A share partition with a few transitions journalled (and fsynced)."""
    sp = SharePartition(LIMITS, 0)
    j = ShareJournal(directory, GROUP, epoch)
    assert j.begin(sp.snapshot()) == []
    for delta in (sp.acquire("m", 0, [Span(0, 9, True), Span(10, 10, False)], max_records=20, now_ms=0).delta,
                  sp.acknowledge("m", [AckBatch(0, 3, (1,)), AckBatch(4, 5, (2,))], 0).delta,
                  sp.acknowledge("m", [AckBatch(6, 6, (3,))], 0).delta):
        assert delta is not None
        j.append(delta)
    end, fds = j.take_dirty()
    j.fsync_fds(fds)
    j.mark_durable(end)
    return sp, j


def reloaded(directory) -> SharePartition:
    sp, _ = load_window(directory, GROUP, LIMITS)
    assert sp is not None
    return sp


def test_a_takeover_reads_what_the_leader_wrote_and_releases_its_locks(tmp_path):
    sp, j = written(tmp_path)
    j.close()  # the leader dies
    again = reloaded(tmp_path)
    assert again.snapshot() == sp.snapshot()
    again.restore()
    # accepted 0-3 stay done; released 4-5 and acquired 7-9 are available, counts kept; 6 rejected
    assert (again.start, again.end) == (4, 11)
    assert [(f, la, int(s), c) for f, la, s, c, _, _ in again.runs()] == [
        (4, 5, 0, 1), (6, 6, 4, 1), (7, 9, 0, 1), (10, 10, 4, 0)]
    # the new leader starts a journal of its own epoch, and its snapshot makes the old one history
    j2 = ShareJournal(tmp_path, GROUP, 6)
    j2.begin(again.snapshot())
    assert journals(tmp_path, GROUP) == [(6, 0)]
    assert reloaded(tmp_path).snapshot() == again.snapshot()


def test_a_restart_at_the_same_epoch_never_appends_to_its_predecessors_journal(tmp_path):
    sp, j = written(tmp_path, epoch=5)
    j.close()
    j2 = ShareJournal(tmp_path, GROUP, 5)
    j2.begin(reloaded(tmp_path).snapshot())
    assert j2.seq == 1 and journals(tmp_path, GROUP) == [(5, 1)]


def test_no_files_is_a_fresh_share_partition_and_groups_do_not_mix(tmp_path):
    written(tmp_path)
    assert load_window(tmp_path, "other", LIMITS)[0] is None
    assert load_window(tmp_path / "nowhere", GROUP + "x", LIMITS)[0] is None


def test_a_torn_tail_is_cut_and_reported(tmp_path):
    sp, j = written(tmp_path)
    before = sp.snapshot()
    delta = sp.acknowledge("m", [AckBatch(7, 9, (1,))], 0).delta
    assert delta is not None
    good = j.size
    j.append(delta)
    j.close()
    path = journal_path(tmp_path, GROUP, 5, 0)
    data = path.read_bytes()
    for keep in (len(data) - 1, good + 9, good + 3):  # inside the payload, inside the header
        path.write_bytes(data[:keep])
        loaded = load(tmp_path, GROUP)
        assert len(loaded.cuts) == 1 and "torn bytes" in loaded.cuts[0]
        assert reloaded(tmp_path).snapshot() == before
    path.write_bytes(data + b"\0" * 64)  # a crash can leave zeros past the last write
    assert reloaded(tmp_path).snapshot() == sp.snapshot()


def test_a_bad_frame_with_frames_after_it_is_corrupt_not_reset(tmp_path):
    _, j = written(tmp_path)
    j.close()
    path = journal_path(tmp_path, GROUP, 5, 0)
    data = bytearray(path.read_bytes())
    data[12] ^= 0xFF  # inside the first frame's payload
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptState, match="checksum mismatch at byte 0 with more frames after it"):
        load(tmp_path, GROUP)
    assert path.read_bytes() == bytes(data)  # nothing rewritten


@pytest.mark.parametrize("damage", ["magic", "checksum", "payload", "other group", "missing"])
def test_a_corrupt_snapshot_is_reported_not_reset(tmp_path, damage):
    _, j = written(tmp_path)
    j.close()
    path = snapshot_path(tmp_path, GROUP)
    data = path.read_bytes()
    if damage == "magic":
        data = b"XXXX" + data[4:]
    elif damage == "checksum":
        data = data[:4] + bytes([data[4] ^ 1]) + data[5:]
    elif damage == "payload":
        data = data[:-3] + b"\x00\x00\x00"
    elif damage == "other group":
        other = ShareJournal(tmp_path / "x", "h", 5)
        other.begin(Persisted(0, 0))
        data = snapshot_path(tmp_path / "x", "h").read_bytes()
    if damage == "missing":  # journals without the snapshot they follow
        path.unlink()
        with pytest.raises(CorruptState, match="journals without a snapshot"):
            load_window(tmp_path, GROUP, LIMITS)
        return
    path.write_bytes(data)
    with pytest.raises(CorruptState):
        load_window(tmp_path, GROUP, LIMITS)
    assert path.read_bytes() == data


def test_a_journal_that_does_not_replay_is_corrupt(tmp_path):
    _, j = written(tmp_path)
    from kaas.domain.share_partition import Delta

    j.append(Delta(0, 3))  # the end moves back: no machine writes that
    j.close()
    with pytest.raises(CorruptState, match="does not replay"):
        load_window(tmp_path, GROUP, LIMITS)


def test_a_long_journal_is_folded_into_a_snapshot(tmp_path, monkeypatch):
    monkeypatch.setattr(share_state, "ROLL_BYTES", 200)
    sp, j = written(tmp_path)
    for _ in range(10):
        if j.should_roll():
            nxt = j.roll()
            j.write_snapshot(sp.snapshot(), nxt)
            assert j.remove_older() == []
        got = sp.acquire("m", sp.next_fetch_offset(), [Span(0, 9, True), Span(10, 10, False)],
                         max_records=20, now_ms=10_000)
        if got.delta is not None:
            j.append(got.delta)
        out = sp.expire(10_000 + 1_000)
        if out.delta is not None:
            j.append(out.delta)
    assert len(journals(tmp_path, GROUP)) == 1 and journals(tmp_path, GROUP)[0][1] > 0
    end, fds = j.take_dirty()
    j.fsync_fds(fds)
    assert reloaded(tmp_path).snapshot() == sp.snapshot()
    j.close()


def test_a_failed_append_fails_the_writer(tmp_path, faults):
    sp, j = written(tmp_path)
    delta = sp.acknowledge("m", [AckBatch(7, 9, (1,))], 0).delta
    assert delta is not None
    faults.arm("short", ".journal")
    with pytest.raises(OSError):
        j.append(delta)
    faults.disarm()
    with pytest.raises(OSError, match="failed earlier"):
        j.append(delta)
    j.close()
    # what reached the file is a torn tail for the next leader
    loaded = load(tmp_path, GROUP)
    assert len(loaded.cuts) == 1


def test_the_state_lives_in_the_partition_directory(tmp_path):
    directory = tmp_path / "data" / "t" / "0" / share_state.DIR
    _, j = written(directory)
    j.close()
    names = sorted(os.listdir(directory))
    assert names == ["g%2F1.0000000005-000000.journal", "g%2F1.snapshot"]
