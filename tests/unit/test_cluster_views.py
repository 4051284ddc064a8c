"""ClusterRuntime's liveness views agree with each other (no I/O: a stand-in broker with
settings only, peers set by hand)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from kaas.cluster_runtime import ClusterRuntime, Peer

SESSION_MS = 3000  # ages are drawn away from the boundary, so the clock moving between calls cannot matter


def runtime(self_id: int) -> ClusterRuntime:
    settings = SimpleNamespace(session_timeout_ms=SESSION_MS, heartbeat_ms=500)
    broker = SimpleNamespace(id=self_id, settings=settings, layout=None, draining=False)
    return ClusterRuntime(broker)


@given(st.integers(0, 5), st.dictionaries(st.integers(0, 7), st.tuples(st.sampled_from([0.0, 1.0, 2.5, 3.5, 8.0]), st.booleans()), max_size=8))
def test_is_alive_any_matches_alive_any(self_id, peers):
    rt = runtime(self_id)
    now = time.monotonic()
    for bid, (age, draining) in peers.items():
        rt.peers[bid] = Peer(bid, changed_at=now - age, draining=draining)
    alive = set(rt.alive_any())
    for bid in range(-1, 9):
        assert rt.is_alive_any(bid) == (bid in alive), (bid, alive)
    assert rt.is_alive_any(self_id)
