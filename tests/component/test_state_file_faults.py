"""A full or failing disk never loses an acknowledged write (issue 17, point 3): every state
file writer, driven into ENOSPC, EIO, a short write, a failed fsync and a failed rename by
the ``state.*`` failpoints of ``storage.fs`` (no special mount).

For each writer: the failed write raises, the previous file is intact byte for byte, no
tmp file is left behind, the writer's in-memory state is as before, and the same write
succeeds once the failpoint is disarmed. The fence log, being append-only, is cut back to
its size before the failed append, so a later line is never written after torn bytes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from kaas import failpoints
from kaas.storage.fences import FenceLog, FenceReader, FenceRecord
from tests.component.faults import APPEND_FAULTS, FAULTS, faults, leftovers  # noqa: F401 (faults: fixture)

# ----------------------------------------------------------------------------- fence log


@pytest.mark.parametrize("kind", APPEND_FAULTS)
def test_failed_fence_append_leaves_no_bytes_and_the_next_one_is_read(tmp_path, faults, kind):
    path = tmp_path / "producer_fences" / "kaas-0.log"
    log = FenceLog(path, fsync=True)
    reader = FenceReader(path.parent)
    log.append(1, 1)
    before = path.read_bytes()
    assert reader.poll() == [FenceRecord(1, 1)]

    faults.arm(kind, "producer_fences/", count=1)
    with pytest.raises(OSError):
        log.append(2, 5)
    assert path.read_bytes() == before  # cut back: no torn bytes, no unacknowledged line
    assert not log.torn

    log.append(3, 7)  # the failpoint is spent: the next append is a whole line of its own
    assert reader.poll() == [FenceRecord(3, 7)]
    assert reader.errors == []
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"pid": 1, "epoch": 1}, {"pid": 3, "epoch": 7}]


def test_torn_bytes_that_cannot_be_cut_block_appends_until_they_can(tmp_path, faults):
    """A short write whose cut-back fsync fails too: every append refuses (it cannot make
    the cut durable) until the disk works again; then the first append cuts and writes."""
    path = tmp_path / "kaas-0.log"
    log = FenceLog(path, fsync=True)
    log.append(1, 1)
    before = path.read_bytes()

    failpoints.arm(faults.run, 0, {"state.write": {"action": "short", "path": "kaas-0.log", "count": 1},
                            "state.fsync": {"action": "error", "errno": "EIO", "path": "kaas-0.log"}})
    failpoints.reload()
    with pytest.raises(OSError):
        log.append(2, 2)  # short write: the cut's fsync fails
    assert log.torn
    with pytest.raises(OSError):
        log.append(3, 3)  # refused: the cut still cannot be made durable
    assert log.torn
    assert path.read_bytes() == before  # the truncation happened; only its fsync failed

    faults.disarm()
    log.append(4, 4)
    assert not log.torn
    assert FenceReader(tmp_path).poll() == [FenceRecord(1, 1), FenceRecord(4, 4)]


def test_a_restarted_writer_cuts_an_unterminated_tail_before_appending(tmp_path):
    """Torn bytes that reached the disk before a crash: the next process's first append
    removes them instead of merging its line into them."""
    path = tmp_path / "kaas-0.log"
    path.write_bytes(b'{"pid":1,"epoch":1}\n{"pid":2,"ep')
    log = FenceLog(path, fsync=False)
    log.append(3, 3)
    reader = FenceReader(tmp_path)
    assert reader.poll() == [FenceRecord(1, 1), FenceRecord(3, 3)]
    assert reader.errors == []
    # an unterminated file with no complete line at all is cut to nothing
    other = tmp_path / "kaas-1.log"
    other.write_bytes(b'{"pid":9')
    FenceLog(other, fsync=False).append(5, 5)
    assert other.read_bytes() == b'{"pid":5,"epoch":5}\n'


# ----------------------------------------------------------------------------- whole files


def expect_failed_write(kind: str, faults, path: Path, action, *, match: str | None = None) -> None:
    """Run ``action`` with ``kind`` armed on ``match`` (default: the file's name): it raises
    OSError, the file is byte for byte as before (or still absent), and nothing is left in
    its directory but what was there."""
    before = path.read_bytes() if path.exists() else None
    names = sorted(os.listdir(path.parent)) if path.parent.exists() else []
    faults.arm(kind, match or path.name)
    with pytest.raises(OSError):
        action()
    assert (path.read_bytes() if path.exists() else None) == before
    assert leftovers(path.parent) == []
    assert (sorted(os.listdir(path.parent)) if path.parent.exists() else []) == names
    faults.disarm()


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_slot_file(tmp_path, faults, kind):
    from kaas.domain.txn import SlotState, TxnMetadata, TxnState
    from kaas.storage.txn_store import TxnStore

    store = TxnStore(tmp_path / "txn_state", lambda slot: True, fsync=True)
    old = TxnMetadata("t1", producer_id=7, producer_epoch=3, state=TxnState.Ongoing,
                      partitions=frozenset({("a", 0)}), ongoing_since_ms=1000, last_update_ms=1000, txn_seq=1)
    store.save(4, SlotState({"t1": old}))
    new = SlotState({"t1": old._replace(state=TxnState.PrepareCommit)})
    expect_failed_write(kind, faults, store.path(4), lambda: store.save(4, new))
    assert store.load(4).get("t1") == old
    store.save(4, new)
    assert store.load(4).get("t1").state is TxnState.PrepareCommit


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_group_offsets_file(tmp_path, faults, kind):
    from kaas.storage.offset_store import Committed, OffsetStore

    store = OffsetStore(tmp_path / "consumer_offsets", fsync=True)
    store.dir.mkdir()
    g = store.load("g")
    g.offsets[("t", 0)] = Committed(5)
    store.save(g)
    new = g.copy()
    new.offsets[("t", 0)] = Committed(9)
    new.pending[77] = {("t", 1): Committed(3)}
    expect_failed_write(kind, faults, store.path("g"), lambda: store.save(new))
    # neither copy moved: same generation, same file identity, the old offsets
    assert (new.generation, new.file_id) == (g.generation, g.file_id)
    assert g.offsets == {("t", 0): Committed(5)} and g.pending == {}
    assert store.load("g").offsets == {("t", 0): Committed(5)}
    store.save(new)  # still a valid successor of the file: nobody else wrote it
    assert store.load("g").offsets == {("t", 0): Committed(9)}
    assert store.load("g").generation == g.generation + 1


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_producer_id_block(tmp_path, faults, kind):
    from kaas.storage.producer_ids import BLOCK, SPAN, PidAllocator

    path = tmp_path / "producer_ids" / "kaas-2.json"
    path.parent.mkdir()
    pids = PidAllocator(path, 2, fsync=True)
    first = [pids.allocate() for _ in range(BLOCK)]  # one whole block
    assert pids.block_end == BLOCK
    expect_failed_write(kind, faults, path, pids.allocate)
    assert pids.block_end == BLOCK  # the block end in memory is the one on file
    assert pids.allocate() == 3 * SPAN + BLOCK  # no PID handed out from an unwritten block, none skipped
    assert pids.block_end == 2 * BLOCK
    assert json.loads(path.read_bytes())["block_end"] == 2 * BLOCK
    assert len(set(first)) == BLOCK


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_marker_queue_entries(tmp_path, faults, kind):
    from kaas.storage.markers import MarkerEntry, MarkerQueue

    q = MarkerQueue(tmp_path / "marker_queue", fsync=True)
    entry = MarkerEntry("x", 100, 2, True, 0, frozenset({("a", 0), ("b", 1)}), frozenset({"g"}), 3)
    path = q.enqueue(1, entry)
    fewer = entry.only({("b", 1)}, ())
    # a retried enqueue rewrites the same file; an enqueue to a new queue creates one
    expect_failed_write(kind, faults, path, lambda: q.enqueue(1, fewer))
    expect_failed_write(kind, faults, q.dir(1) / f"{entry.base}.groups.json", lambda: q.enqueue_groups(1, entry))
    assert q.read(path) == entry
    # the watcher's rewrite of a taken entry with the parts still owed
    taken = q.take(path)
    expect_failed_write(kind, faults, taken, lambda: q.rewrite(taken, fewer))
    assert q.read(taken) == entry
    # a forward into another broker's queue (a fresh, unique name)
    q.dir(2).mkdir()
    expect_failed_write(kind, faults, q.dir(2) / "never", lambda: q.forward(2, fewer, 1), match="to-2/")
    assert q.list(2) == []
    assert q.rewrite(taken, fewer) and q.read(taken) == fewer


def test_marker_queue_take_and_claim_renames(tmp_path, faults):
    from kaas.storage.markers import MarkerEntry, MarkerQueue

    q = MarkerQueue(tmp_path / "marker_queue", fsync=True)
    entry = MarkerEntry("x", 100, 2, True, 0, frozenset({("a", 0)}), frozenset(), 3)
    path = q.enqueue(1, entry)
    faults.arm("rename", "to-1/")
    with pytest.raises(OSError):
        q.take(path)
    faults.arm("rename", "to-3/")
    with pytest.raises(OSError):
        q.claim(1, 3)
    faults.disarm()
    assert q.list(1) == [path] and q.read(path) == entry and q.list(3) == []
    assert len(q.claim(1, 3)) == 1


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_topic_files(tmp_path, faults, kind):
    from kaas.storage.topics import TopicStore

    topics = TopicStore(tmp_path / "topics", fsync=True)
    (tmp_path / "topics").mkdir()
    meta = topics.create("t", 2, {"retention.ms": "1000"})
    # exclusive create of a new topic: no file, no tmp or link left, nothing cached
    expect_failed_write(kind, faults, tmp_path / "topics" / "u.json", lambda: topics.create("u", 1), match="topics/")
    assert topics.get("u") is None
    # a whole-file edit (partition count, configs): the cache keeps the old meta
    grown = dataclasses.replace(meta, partitions=4)
    expect_failed_write(kind, faults, tmp_path / "topics" / "t.json", lambda: topics.update(grown))
    assert topics.get("t") == meta
    topics.refresh()
    assert topics.get("t") == meta
    assert topics.create("u", 1) is not None
    topics.update(grown)
    assert topics.get("t").partitions == 4
