"""Transaction storage on tmp directories: slot files (``storage.txn_store``), the marker
queue (``storage.markers``) including the claim race, and the fence logs
(``storage.fences``)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from kaas.domain.txn import SlotState, TxnMetadata, TxnState
from kaas.errors import CorruptState, KaasError
from kaas.storage.fences import FenceLog, FenceReader, FenceRecord
from kaas.storage.markers import MarkerEntry, MarkerQueue, is_taken
from kaas.storage.txn_store import TxnStore

# ----------------------------------------------------------------------------- slot files


def meta(txn_id: str = "t1", **kw) -> TxnMetadata:
    base = {"producer_id": 7, "producer_epoch": 3, "state": TxnState.Ongoing,
            "partitions": frozenset({("a", 0), ("b", 2)}), "groups": frozenset({"g"}),
            "ongoing_since_ms": 1000, "last_update_ms": 1000, "txn_seq": 4}
    base.update(kw)
    return TxnMetadata(transactional_id=txn_id, **base)


def test_slot_round_trip_and_missing_is_empty(tmp_path):
    store = TxnStore(tmp_path, lambda slot: True, fsync=False)
    assert store.load(3).entries == {}
    state = SlotState({}).with_entry(meta("t1")).with_entry(meta("t2", state=TxnState.Empty,
                                                                   partitions=frozenset(), groups=frozenset(),
                                                                   ongoing_since_ms=0))
    store.save(3, state)
    assert store.load(3) == state
    assert json.loads(store.path(3).read_text())["format"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["slot-3.json"]  # no tmp file left


def test_slot_save_refused_without_ownership(tmp_path):
    owned = {1}
    store = TxnStore(tmp_path, lambda slot: slot in owned, fsync=False)
    store.save(1, SlotState({}).with_entry(meta()))
    with pytest.raises(KaasError) as exc:
        store.save(2, SlotState({}).with_entry(meta()))
    assert exc.value.code == ErrorCode.not_coordinator
    assert not store.path(2).exists()


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"format": 1}', b'{"format": 2, "transactions": {}}',
                                     b'{"format": 1, "transactions": {"x": {"transactional_id": "y"}}}'])
def test_corrupt_slot_raises_and_is_left_alone(tmp_path, content):
    store = TxnStore(tmp_path, lambda slot: True, fsync=False)
    store.path(0).write_bytes(content)
    with pytest.raises(CorruptState):
        store.load(0)
    assert store.path(0).read_bytes() == content


# ----------------------------------------------------------------------------- marker queue


def entry(pid: int = 5, epoch: int = 1, seq: int = 1, parts=(("t", 0),), groups=(), commit=True) -> MarkerEntry:
    return MarkerEntry("txn", pid, epoch, commit, 0, frozenset(parts), frozenset(groups), seq)


def test_entry_round_trip_and_names(tmp_path):
    q = MarkerQueue(tmp_path, fsync=False)
    e = entry(parts=(("t", 0), ("u", 3)), groups=("g",))
    path = q.enqueue(2, e)
    assert path == tmp_path / "to-2" / "5-1-1.json"
    assert q.read(path) == e
    obj = json.loads(path.read_text())
    assert obj["format"] == 1 and obj["partitions"] == [["t", 0], ["u", 3]] and obj["txn_seq"] == 1
    assert q.enqueue_groups(2, e.only((), ("g",))).name == "5-1-1.groups.json"
    assert [p.name for p in q.list(2)] == ["5-1-1.groups.json", "5-1-1.json"]


def test_same_transaction_overwrites_other_transactions_do_not(tmp_path):
    q = MarkerQueue(tmp_path, fsync=False)
    q.enqueue(1, entry(seq=1, parts=(("t", 0),)))
    q.enqueue(1, entry(seq=1, parts=(("t", 0), ("t", 1))))  # a retried EndTxn
    q.enqueue(1, entry(seq=2, parts=(("t", 5),)))  # the next transaction, same pid and epoch
    got = {p.name: q.read(p).partitions for p in q.list(1)}
    assert got == {"5-1-1.json": {("t", 0), ("t", 1)}, "5-1-2.json": {("t", 5)}}


def test_take_rewrite_delete(tmp_path):
    q = MarkerQueue(tmp_path, fsync=False)
    path = q.enqueue(1, entry(parts=(("t", 0), ("t", 1))))
    taken = q.take(path)
    assert taken is not None and is_taken(taken) and not path.exists()
    assert q.take(taken) == taken  # already taken
    assert q.take(path) is None  # gone
    # a coordinator retry re-creates the plain name beside the taken file
    q.enqueue(1, entry(parts=(("t", 0), ("t", 1))))
    assert len(q.list(1)) == 2
    assert q.rewrite(taken, entry(parts=(("t", 1),)))
    assert q.read(taken).partitions == {("t", 1)}
    q.delete(taken)
    q.delete(taken)  # absent is fine
    assert not q.rewrite(taken, entry())  # never re-creates a file claimed away
    assert [p.name for p in q.list(1)] == ["5-1-1.json"]


def test_forward_names_are_unique(tmp_path):
    q = MarkerQueue(tmp_path, fsync=False)
    q.enqueue(3, entry(parts=(("t", 0),)))
    a = q.forward(3, entry(parts=(("t", 1),)), from_broker=1)
    b = q.forward(3, entry(parts=(("t", 2),)), from_broker=1)
    assert a != b and a.name.startswith("5-1-1.f1-")
    assert sorted(p for e in q.list(3) for p in q.read(e).partitions) == [("t", 0), ("t", 1), ("t", 2)]


def test_pending_for_pid_sees_every_queue(tmp_path):
    q = MarkerQueue(tmp_path, fsync=False)
    assert q.pending_for_pid(5) is False
    q.enqueue(1, entry(pid=15))
    q.enqueue(2, entry(pid=55))
    (tmp_path / "to-1" / ".5-1-9.json.123.tmp").write_text("{}")  # tmp files do not count
    (tmp_path / "to-1" / "5-stray").write_text("{}")  # nor strays
    assert q.pending_for_pid(5) is False
    q.enqueue_groups(2, entry(pid=5, parts=(), groups=("g",)))
    assert q.pending_for_pid(5) is True
    assert [p.name for p in q.list(2, "5-")] == ["5-1-1.groups.json"]
    q.delete(q.list(2, "5-")[0])
    assert q.pending_for_pid(5) is False


def test_corrupt_entry_raises(tmp_path):
    q = MarkerQueue(tmp_path, fsync=False)
    (tmp_path / "to-0").mkdir()
    bad = tmp_path / "to-0" / "1-0-1.json"
    for content in ("{oops", '{"format": 1, "producer_id": 1}', '{"format": 7}'):
        bad.write_text(content)
        with pytest.raises(CorruptState):
            q.read(bad)
    assert bad.exists()


def test_claim_moves_everything_to_the_claimant(tmp_path):
    q = MarkerQueue(tmp_path, fsync=False)
    q.enqueue(4, entry(seq=1))
    q.forward(4, entry(seq=2), from_broker=0)
    taken = q.take(q.enqueue(4, entry(seq=3)))
    assert taken is not None
    won = q.claim(4, 1)
    assert len(won) == 3 and all(is_taken(p) and p.parent == tmp_path / "to-1" for p in won)
    assert q.list(4) == [] and sorted(q.read(p).txn_seq for p in won) == [1, 2, 3]
    assert q.queues() == [1, 4]


@pytest.mark.parametrize("claimants", [2, 4])
def test_claim_race_exactly_one_winner_per_entry(tmp_path, claimants):
    q = MarkerQueue(tmp_path, fsync=False)
    n = 300
    for seq in range(n):
        q.enqueue(9, entry(seq=seq))
    barrier = threading.Barrier(claimants)
    won: dict[int, list[Path]] = {}

    def claim(me: int) -> None:
        barrier.wait()
        won[me] = q.claim(9, me)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(claimants)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [q.read(p).txn_seq for paths in won.values() for p in paths]
    assert sorted(seqs) == list(range(n)), "every entry claimed exactly once"
    for me, paths in won.items():
        assert sorted(q.list(me)) == sorted(paths)
    assert q.list(9) == []


# ----------------------------------------------------------------------------- fence logs


def test_fence_log_incremental_reader(tmp_path):
    log0 = FenceLog(tmp_path / "kaas-0.log", fsync=False)
    log1 = FenceLog(tmp_path / "kaas-1.log", fsync=False)
    reader = FenceReader(tmp_path, skip=frozenset({1}))
    assert reader.poll() == []
    log0.append(10, 1)
    log1.append(11, 1)  # own log: skipped
    log0.append(10, 2)
    assert reader.poll() == [FenceRecord(10, 1), FenceRecord(10, 2)]
    assert reader.poll() == []
    log0.append(12, 5)
    assert reader.poll() == [FenceRecord(12, 5)]
    everything = FenceReader(tmp_path)
    assert sorted(everything.poll(), key=lambda r: (r.producer_id, r.producer_epoch)) == [
        FenceRecord(10, 1), FenceRecord(10, 2), FenceRecord(11, 1), FenceRecord(12, 5)]


def test_fence_reader_waits_for_complete_lines_and_skips_bad_ones(tmp_path):
    path = tmp_path / "kaas-2.log"
    reader = FenceReader(tmp_path)
    with open(path, "ab") as f:
        f.write(b'{"pid": 1, "epoch": 3}\n{"pid": 2, "ep')
    assert reader.poll() == [FenceRecord(1, 3)]
    with open(path, "ab") as f:
        f.write(b'och": 4}\nnot json\n{"pid": "x", "epoch": 1}\n')
    assert reader.poll() == [FenceRecord(2, 4)]
    assert [line for _, line in reader.errors] == ["not json", '{"pid": "x", "epoch": 1}']
    # a replaced (shorter) file is read again from the start: re-applying is harmless
    path.write_bytes(b'{"pid": 9, "epoch": 1}\n')
    assert reader.poll() == [FenceRecord(9, 1)]


def test_fence_log_appends_whole_lines(tmp_path):
    log = FenceLog(tmp_path / "sub" / "kaas-0.log", fsync=True)
    for i in range(50):
        log.append(i, i + 1)
    lines = (tmp_path / "sub" / "kaas-0.log").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [{"pid": i, "epoch": i + 1} for i in range(50)]
    assert os.stat(tmp_path / "sub" / "kaas-0.log").st_size == sum(len(x) + 1 for x in lines)
