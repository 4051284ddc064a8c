"""Committed offsets on disk: one file per group, pending txn layer, safe file names,
corrupt files refused (never reset)."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaas.errors import CorruptState
from kaas.storage.offset_store import Committed, GroupOffsets, OffsetStore
from kaas.storage.paths import Layout, decode_name, encode_name

SAFE = re.compile(r"^[A-Za-z0-9%_~-]+$")


def _store(tmp_path: Path) -> OffsetStore:
    d = tmp_path / "consumer_offsets"
    d.mkdir()
    return OffsetStore(d, fsync=False)


def test_missing_group_loads_empty(tmp_path):
    store = _store(tmp_path)
    g = store.load("nobody")
    assert g.group_id == "nobody" and g.offsets == {} and g.pending == {} and g.generation == 0
    assert not store.path("nobody").exists()
    assert store.list_groups() == []


def test_round_trip_offsets_and_pending(tmp_path):
    store = _store(tmp_path)
    g = store.load("g1")
    g.offsets[("t", 0)] = Committed(10, 3, "meta", 1234)
    g.offsets[("t", 5)] = Committed(0)
    g.offsets[("other.topic", 1)] = Committed(7, -1, None, 99)
    g.pending[42] = {("t", 1): Committed(5, 2, "", 1)}
    g.pending[7] = {("t", 0): Committed(11), ("u", 3): Committed(1, 0, "x", 2)}
    store.save(g)
    assert g.generation == 1
    back = store.load("g1")
    assert back.group_id == "g1"
    assert back.offsets == g.offsets
    assert back.pending == g.pending
    assert back.generation == 1
    raw = json.loads(store.path("g1").read_text())
    assert raw["format"] == 1
    # every save is a new generation
    back.offsets[("t", 0)] = Committed(20)
    store.save(back)
    again = store.load("g1")
    assert again.generation == 2
    assert again.offsets[("t", 0)].offset == 20
    assert store.list_groups() == ["g1"]


def test_pending_layer_promote_and_drop(tmp_path):
    """What the txn offset hook does: COMMIT promotes a pid's staged offsets, ABORT drops them."""
    store = _store(tmp_path)
    g = store.load("txn-group")
    g.offsets[("t", 0)] = Committed(1)
    g.pending[100] = {("t", 0): Committed(5), ("t", 1): Committed(6)}
    g.pending[200] = {("t", 2): Committed(9)}
    store.save(g)

    g = store.load("txn-group")
    # staged offsets are not committed ones
    assert g.offsets == {("t", 0): Committed(1)}
    g.offsets.update(g.pending.pop(100))      # COMMIT of pid 100
    g.pending.pop(200)                        # ABORT of pid 200
    store.save(g)

    g = store.load("txn-group")
    assert g.pending == {}
    assert g.offsets == {("t", 0): Committed(5), ("t", 1): Committed(6)}


def test_delete_removes_file(tmp_path):
    store = _store(tmp_path)
    g = store.load("gone")
    g.offsets[("t", 0)] = Committed(3)
    store.save(g)
    assert store.list_groups() == ["gone"]
    store.delete("gone")
    assert not store.path("gone").exists()
    assert store.load("gone").offsets == {}
    store.delete("gone")  # idempotent
    assert store.list_groups() == []


def test_tricky_group_names_get_distinct_safe_files(tmp_path):
    store = _store(tmp_path)
    names = ["", "/", "a/b", "a%2Fb", "a.b", ".", "..", "%", "%25", "grüppe", "组", "a b", "-", "_", "~x",
             "A", "a", ".hidden", "x.json", "\x00nul"]
    files = {store.path(n).name for n in names}
    assert len(files) == len(names)
    for n in names:
        enc = encode_name(n)
        assert SAFE.match(enc), (n, enc)
        assert enc not in (".", "..") and not enc.startswith(".")
        assert decode_name(enc) == n
        assert store.path(n).parent == store.dir
        g = store.load(n)
        g.offsets[("t", 0)] = Committed(len(n))
        store.save(g)
    assert sorted(store.list_groups()) == sorted(names)
    for n in names:
        assert store.load(n).offsets == {("t", 0): Committed(len(n))}
    # the layout agrees with the store on where a group lives
    layout = Layout(tmp_path / "data")
    for n in names:
        assert layout.group_file(n).name == store.path(n).name


@settings(deadline=None)
@given(st.text())
def test_encode_name_round_trip_and_safe(name):
    from kaas.storage.paths import is_digest_name

    enc = encode_name(name)
    if is_digest_name(enc):  # too long to spell out: a prefix plus a digest, read from the file
        assert len(enc) < 255
    else:
        assert decode_name(enc) == name
    assert SAFE.match(enc)
    assert not enc.startswith(".")


@settings(deadline=None)
@given(st.text(), st.text())
def test_encode_name_injective(a, b):
    if a != b:
        assert encode_name(a) != encode_name(b)


@settings(deadline=None, max_examples=30)
@given(st.lists(st.text(max_size=12), unique=True, max_size=8))
def test_store_round_trip_property(names):
    with tempfile.TemporaryDirectory() as d:
        store = OffsetStore(Path(d), fsync=False)
        for i, n in enumerate(names):
            g = store.load(n)
            g.offsets[(f"t{i}", i)] = Committed(i, -1, n, i)
            store.save(g)
        assert sorted(store.list_groups()) == sorted(names)
        for i, n in enumerate(names):
            back = store.load(n)
            assert back.group_id == n
            assert back.offsets == {(f"t{i}", i): Committed(i, -1, n, i)}


@pytest.mark.parametrize("content", [
    b"garbage\x00\xff not json",
    b"",
    b"[1, 2, 3]",
    b'{"group_id": "bad"}',                                       # no format field
    b'{"format": 1, "offsets": {}}',                              # no group_id
    b'{"format": 1, "group_id": "bad", "offsets": {"t": {"x": [1, -1, "", 0]}}}',
    b'{"format": 1, "group_id": "bad", "offsets": {"t": {"0": [1]}}}',
    b'{"format": 1, "group_id": "bad", "offsets": {"t": {"0": ["a", -1, "", 0]}}}',
    b'{"format": 1, "group_id": "bad", "offsets": [], "pending": {}}',
    b'{"format": 1, "group_id": "bad", "pending": {"pid": {}}}',
    b'{"format": 1, "group_id": "someone-else", "offsets": {}}',  # wrong group in the file
])
def test_corrupt_file_raises(tmp_path, content):
    store = _store(tmp_path)
    p = store.path("bad")
    p.write_bytes(content)
    with pytest.raises(CorruptState) as ei:
        store.load("bad")
    assert str(p) in str(ei.value)
    # refusing is not resetting: the file is untouched
    assert p.read_bytes() == content


def test_group_offsets_json_is_stable():
    g = GroupOffsets("g", {("b", 1): Committed(2), ("a", 0): Committed(1, 0, "m", 5)}, {3: {("a", 0): Committed(9)}}, 4)
    obj = g.to_json()
    assert obj["format"] == 1
    assert obj["offsets"] == {"a": {"0": [1, 0, "m", 5]}, "b": {"1": [2, -1, "", -1]}}
    assert obj["pending"] == {"3": {"a": {"0": [9, -1, "", -1]}}}
    back = GroupOffsets.from_json(json.loads(json.dumps(obj)), "x")
    assert back.offsets == g.offsets and back.pending == g.pending and back.generation == 4


def test_very_long_group_ids_get_short_distinct_file_names(tmp_path):
    from kaas.storage.offset_store import GroupOffsets, OffsetStore

    store = OffsetStore(tmp_path, fsync=False)
    a, b = "é" * 300, "é" * 299 + "x"
    for gid in (a, b):
        store.save(GroupOffsets(gid))
        assert len(store.path(gid).name) < 255
    assert store.path(a) != store.path(b)
    assert sorted(store.list_groups()) == sorted([a, b])
    assert store.load(a).group_id == a


def test_a_stale_copy_is_not_written_over_another_writers_file(tmp_path):
    from kaas.storage.offset_store import StaleOffsets

    a, b = OffsetStore(tmp_path, fsync=False), OffsetStore(tmp_path, fsync=False)
    mine = a.load("g")
    mine.offsets[("t", 0)] = Committed(5)
    a.save(mine)
    theirs = b.load("g")  # the group moved to broker b, which commits
    theirs.offsets[("t", 0)] = Committed(9)
    b.save(theirs)
    mine.offsets[("t", 1)] = Committed(1)  # broker a still holds its old copy
    with pytest.raises(StaleOffsets):
        a.save(mine)
    assert a.load("g").offsets[("t", 0)].offset == 9  # b's write survived
    again = a.load("g")  # re-read, then write: fine
    again.offsets[("t", 1)] = Committed(1)
    a.save(again)
    assert b.load("g").offsets == {("t", 0): Committed(9), ("t", 1): Committed(1)}
    b.delete("g")
    with pytest.raises(StaleOffsets):  # deleted under us counts as changed
        a.save(again)


def test_a_consumer_groups_state_round_trips_and_older_files_have_none(tmp_path):
    store = _store(tmp_path)
    g = store.load("cg")
    assert g.consumer is None
    g.consumer = {"format": 1, "group_epoch": 3, "members": []}
    g.offsets[("t", 0)] = Committed(4)
    store.save(g)
    back = store.load("cg")
    assert back.consumer == g.consumer and back.membership is None
    copy = back.copy()
    assert copy.consumer == back.consumer
    # a file written before the field existed
    raw = json.loads(store.path("cg").read_text())
    del raw["consumer"]
    store.path("cg").write_text(json.dumps(raw))
    assert store.load("cg").consumer is None


def test_a_consumer_field_that_is_not_an_object_is_corrupt(tmp_path):
    store = _store(tmp_path)
    store.path("cg").write_text(json.dumps({"format": 1, "group_id": "cg", "consumer": [1, 2]}))
    with pytest.raises(CorruptState):
        store.load("cg")
