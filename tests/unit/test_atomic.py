"""Whole-file state writes: JSON round trip, corrupt files refused, exclusive create races."""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaas.errors import CorruptState
from kaas.storage import atomic

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
state_objs = st.dictionaries(st.text(max_size=10), json_values, max_size=6).map(
    lambda d: {**d, "format": 1}
)


@settings(deadline=None)
@given(state_objs, st.booleans())
def test_write_read_json_round_trip(obj, fsync):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "state.json"
        atomic.write_json(p, obj, fsync=fsync)
        assert atomic.read_json(p) == obj
        assert atomic.read_json(p) == obj
        # overwrite replaces the whole content
        atomic.write_json(p, {"format": 2}, fsync=fsync)
        assert atomic.read_json(p) == {"format": 2}
        assert [n for n in os.listdir(d) if n != "state.json"] == []  # no tmp left behind


def test_read_missing_is_none(tmp_path):
    assert atomic.read_json(tmp_path / "absent.json") is None


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json at all",
        b'{"format": 1',  # torn
        b"\xff\xfe\x00garbage",  # not UTF-8
        b"[1, 2, 3]",  # JSON but not an object
        b'"format"',
        b"null",
        b'{"epoch": 3}',  # an object without a format
    ],
)
def test_read_corrupt_raises(tmp_path, content):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(CorruptState) as ei:
        atomic.read_json(p)
    assert ei.value.path == str(p)
    assert ei.value.reason


def test_write_bytes_replaces_atomically_and_cleans_tmp(tmp_path):
    p = tmp_path / "blob"
    atomic.write_bytes(p, b"old")
    atomic.write_bytes(p, b"new" * 1000, fsync=False)
    assert p.read_bytes() == b"new" * 1000
    assert os.listdir(tmp_path) == ["blob"]


def _payload(i: int) -> bytes:
    # different lengths so a torn mix of two writers is detectable
    return json.dumps({"format": 1, "writer": i, "pad": "x" * (50_000 + 997 * i)}).encode()


def _run_threads(n, target):
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def run(i):
        barrier.wait()
        try:
            results[i] = ("ok", target(i))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            results[i] = ("raised", repr(exc))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.parametrize("fsync", [False, True])
def test_create_exclusive_one_winner_threads(tmp_path, fsync):
    """Two (or more) callers in one process, e.g. two CreateTopics run via to_thread."""
    for rnd in range(15):
        p = tmp_path / f"topic-{rnd}.json"
        n = 2 if rnd % 2 else 6
        results = _run_threads(n, lambda i: atomic.create_exclusive(p, _payload(i), fsync=fsync))
        assert all(kind == "ok" for kind, _ in results), results
        winners = [i for i, (_, won) in enumerate(results) if won]
        assert len(winners) == 1, results
        assert p.read_bytes() == _payload(winners[0])
        assert atomic.read_json(p)["writer"] == winners[0]
    assert sorted(os.listdir(tmp_path)) == sorted(f"topic-{r}.json" for r in range(15))


def test_create_exclusive_loser_leaves_winner_untouched(tmp_path):
    p = tmp_path / "x.json"
    assert atomic.create_exclusive(p, b'{"format":1,"a":1}') is True
    assert atomic.create_exclusive(p, b'{"format":1,"a":2}') is False
    assert atomic.read_json(p) == {"format": 1, "a": 1}
    assert os.listdir(tmp_path) == ["x.json"]


def _proc_create(path: str, i: int, barrier, out) -> None:
    barrier.wait()
    try:
        out.put((i, atomic.create_exclusive(Path(path), _payload(i), fsync=False)))
    except BaseException as exc:  # noqa: BLE001
        out.put((i, repr(exc)))


def test_create_exclusive_one_winner_processes(tmp_path):
    """Two brokers (processes) racing for the same name on the shared volume."""
    ctx = multiprocessing.get_context("fork")
    for rnd in range(4):
        p = tmp_path / f"t{rnd}.json"
        barrier = ctx.Barrier(2)
        out = ctx.Queue()
        procs = [ctx.Process(target=_proc_create, args=(str(p), i, barrier, out)) for i in range(2)]
        for pr in procs:
            pr.start()
        got = dict(out.get(timeout=20) for _ in procs)
        for pr in procs:
            pr.join(timeout=20)
            assert pr.exitcode == 0
        assert sorted(got.values()) == [False, True], got
        winner = next(i for i, won in got.items() if won)
        assert p.read_bytes() == _payload(winner)
    assert sorted(os.listdir(tmp_path)) == [f"t{r}.json" for r in range(4)]


def test_concurrent_write_bytes_same_path_never_torn(tmp_path):
    """Writers racing on one file (threads of one process): the result is one whole write."""
    p = tmp_path / "state.json"
    for _ in range(10):
        results = _run_threads(4, lambda i: atomic.write_bytes(p, _payload(i), fsync=False))
        assert all(kind == "ok" for kind, _ in results), results
        data = p.read_bytes()
        assert data in {_payload(i) for i in range(4)}
    assert os.listdir(tmp_path) == ["state.json"]
