"""file.delete.delay.ms at the storage level (``storage.trash``): segments that retention,
DeleteRecords and the log cleaner drop wait as ``*.deleted`` files, unseen by reads and by
a reopen (a takeover), until the sweep of the directory's writer finds them due; with a
delay of 0 they go at once; a deleted topic's directory waits the same way."""

from __future__ import annotations

import os
import uuid
from dataclasses import replace

from kaas.storage import trash
from kaas.storage.partition_log import LogConfig
from kaas.storage.topics import TopicMeta, remove_topic_data

from .test_compaction import CFG as COMPACT
from .test_compaction import clean, fill, latest, read_all
from .test_partition_log import _many, check_all, open_log

DELAY = 5_000
CFG = LogConfig(segment_bytes=1024, index_interval_bytes=200, fsync=False, retention_ms=10_000,
                file_delete_delay_ms=DELAY)


def deleted(path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".deleted"))


def test_retention_sets_segments_aside_until_the_delay_passed(tmp_path):
    clock = [0]
    log, model = _many(tmp_path, CFG, ts0=0, ts_step=1000)
    log.clock = lambda: clock[0]
    before = list(log.segments)
    clock[0] = now = 10**12
    assert log.apply_retention(now_ms=now) == len(before) - 1
    check_all(log, model, start=log.log_start_offset)
    # every file of the dropped segments is still on the volume, under its due name
    waiting = deleted(tmp_path)
    assert {n.split(".")[0] for n in waiting} == {s.path.stem for s in before[:-1]}
    assert all(n.endswith(f".{now + DELAY}.deleted") for n in waiting)
    assert not any(s.path.exists() for s in before[:-1])
    # a reopen (a takeover) neither reads nor resurrects them
    log.close()
    again = open_log(tmp_path, CFG)
    assert again.segments[0].base_offset == before[-1].base_offset  # then the new leader's own segment
    check_all(again, model, start=again.log_start_offset)
    # the sweep removes them once due, not before
    assert trash.sweep(tmp_path, now + DELAY - 1) == []
    assert deleted(tmp_path) == waiting
    assert sorted(trash.sweep(tmp_path, now + DELAY)) == waiting
    assert deleted(tmp_path) == []
    again.close()


def test_delete_records_and_a_zero_delay(tmp_path):
    log, model = _many(tmp_path / "a", CFG)
    segs = list(log.segments)
    log.delete_records(segs[2].base_offset)
    assert len(deleted(tmp_path / "a")) >= 2  # .log and .idx of each of the two first segments
    check_all(log, model, start=log.log_start_offset)
    log.close()

    log, model = _many(tmp_path / "b", replace(CFG, file_delete_delay_ms=0))
    segs = list(log.segments)
    log.delete_records(segs[2].base_offset)
    assert deleted(tmp_path / "b") == []
    assert not segs[0].path.exists() and not segs[1].path.exists()
    log.close()


def test_a_cleaned_segment_keeps_its_old_file_until_the_delay_passed(tmp_path):
    log = open_log(tmp_path / "p", replace(COMPACT, file_delete_delay_ms=DELAY))
    fill(log)
    before = read_all(log)
    sizes = {s.path.name: s.path.stat().st_size for s in log.segments}
    prep = clean(log)
    assert prep is not None and prep.changed
    assert latest(read_all(log)) == latest(before)
    kept = deleted(tmp_path / "p")
    assert kept
    for name in kept:  # the old inodes, byte for byte the size they had
        original = name.rsplit(".", 2)[0]
        if original.endswith(".log"):
            assert (tmp_path / "p" / name).stat().st_size == sizes[original]
    assert sorted(trash.sweep(tmp_path / "p", 10**15)) == kept
    log.close()


def test_a_deleted_topic_directory_waits_for_the_controllers_sweep(tmp_path):
    data = tmp_path / "data"
    (data / "t" / "0").mkdir(parents=True)
    (data / "t" / "0" / "00000000000000000000-e1.log").write_bytes(b"x")
    meta = TopicMeta("t", uuid.uuid4(), 1)
    remove_topic_data(data / "t", meta, delay_ms=DELAY, now_ms=1000)
    assert not (data / "t").exists()
    assert trash.pending_topics(data) == [(f".t.deleted-{meta.topic_id}-{1000 + DELAY}", 1000 + DELAY)]
    assert trash.sweep_topics(data, 1000 + DELAY - 1) == []
    assert trash.sweep_topics(data, 1000 + DELAY) == [f".t.deleted-{meta.topic_id}-{1000 + DELAY}"]
    assert os.listdir(data) == []
    # a name from before the delay existed (no due time) is due at once
    legacy = data / f".u.deleted-{uuid.uuid4()}"
    legacy.mkdir()
    assert trash.sweep_topics(data, 0) == [legacy.name]
    # a zero delay removes at once
    (data / "v").mkdir()
    remove_topic_data(data / "v", TopicMeta("v", uuid.uuid4(), 1))
    assert os.listdir(data) == []
