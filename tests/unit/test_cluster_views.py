"""The membership rules (``domain.membership``, pure) and the ``ClusterView`` built on them
agree with each other; no I/O, peers set by hand."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

from kaas.broker.cluster_view import ClusterView
from kaas.domain import membership as rules
from kaas.domain.membership import Peer

SESSION_MS = 3000  # ages are drawn away from the boundary, so the clock moving between calls cannot matter
AGES = st.sampled_from([0.0, 1.0, 2.5, 3.5, 8.0, 12.0])
PEERS = st.dictionaries(st.integers(0, 7), st.tuples(AGES, st.booleans()), max_size=8)


def view(self_id: int) -> ClusterView:
    return ClusterView(self_id, SESSION_MS, 500)


@given(st.integers(0, 5), PEERS)
def test_is_alive_any_matches_alive_any(self_id, peers):
    rt = view(self_id)
    now = time.monotonic()
    for bid, (age, draining) in peers.items():
        rt.peers[bid] = Peer(bid, changed_at=now - age, draining=draining)
    alive = set(rt.alive_any())
    for bid in range(-1, 9):
        assert rt.is_alive_any(bid) == (bid in alive), (bid, alive)
    assert rt.is_alive_any(self_id)


@given(st.integers(0, 5), st.booleans(), PEERS)
def test_alive_within_alive_any_within_listed(self_id, draining, peers):
    now, session = 1000.0, SESSION_MS / 1000
    ps = [Peer(b, changed_at=now - age, draining=d) for b, (age, d) in peers.items()]
    alive = set(rules.alive(self_id, draining, ps, now, session))
    any_ = set(rules.alive_any(self_id, ps, now, session))
    listed = set(rules.listed(self_id, ps, now, rules.LIST_WINDOW_S))
    assert alive <= any_ <= listed
    assert self_id in any_ and (self_id in alive) != draining
    assert not any(p.draining for p in ps if p.broker_id in alive and p.broker_id != self_id)


def test_a_death_notice_kills_only_the_process_it_names_until_the_counter_moves():
    now, session = 1000.0, 3.0
    peers: dict[int, Peer] = {}
    a, b = "a" * 32, "b" * 32
    assert rules.absorb_heartbeat(peers, {"broker_id": 1, "counter": 5, "incarnation": a, "pid": 1}, now, session)
    p = peers[1]
    assert not rules.notice_applies(p, b)  # another incarnation's notice, though both are PID 1
    assert not rules.notice_applies(p, "pid:1")
    assert rules.notice_applies(p, a)
    assert rules.mark_dead(p, now, session)  # news: it was live
    assert not p.live(now, session) and not rules.notice_applies(p, a)
    # the same counter again: still dead; a moved counter is a new incarnation, back at once
    assert not rules.absorb_heartbeat(peers, {"broker_id": 1, "counter": 5, "incarnation": a}, now + 0.5, session)
    assert not p.live(now + 0.5, session)
    assert rules.absorb_heartbeat(peers, {"broker_id": 1, "counter": 6, "incarnation": b, "pid": 1}, now + 1, session)
    assert p.live(now + 1, session) and p.back_at == now + 1


def test_files_older_than_incarnations_match_each_other_by_pid_and_never_a_new_incarnation():
    assert rules.incarnation_of({"broker_id": 1, "pid": 77}) == "pid:77"
    assert rules.incarnation_of({"broker_id": 1}) == "pid:0"
    assert rules.incarnation_of({"broker_id": 1, "pid": 77, "incarnation": "c" * 32}) == "c" * 32
    peers: dict[int, Peer] = {}
    rules.absorb_heartbeat(peers, {"broker_id": 1, "counter": 5, "pid": 77}, 0.0, 3.0)  # an old heartbeat
    assert rules.notice_applies(peers[1], rules.incarnation_of({"broker_id": 1, "pid": 77}))  # an old notice
    assert not rules.notice_applies(peers[1], "c" * 32)


def test_a_broker_back_from_the_dead_is_placed_on_again_only_after_the_hold():
    now = 1000.0
    peers = {1: Peer(1, back_at=now - 1.0), 2: Peer(2, back_at=0.0)}
    assert rules.placeable([0, 1, 2], 0, peers, now, hold=2.0) == [0, 2]
    assert rules.placeable([0, 1, 2], 0, peers, now + 1.5, hold=2.0) == [0, 1, 2]


@given(st.integers(0, 3), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6), AGES), max_size=6),
       st.integers(0, 6))
def test_handoff_waits_for_exactly_the_live_peers_behind_the_version(me, peers, version):
    now, session = 1000.0, 3.0
    ps = {b: Peer(b, applied_version=v, changed_at=now - age) for b, v, age in peers}
    blockers = set(rules.handoff_blockers(me, version, ps.values(), now, session))
    want = {b for b, p in ps.items() if b != me and p.live(now, session) and p.applied_version < version}
    assert blockers == want
    everywhere = rules.applied_everywhere(version, me, version, ps.values(), now, session)
    assert everywhere == (not want)
