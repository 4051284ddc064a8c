"""kaas.domain.replicas: replica lists, ISR and offline replicas on a shared volume, and
min.insync.replicas as Apache applies it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kaas.domain import replicas as r

IDS = st.sets(st.integers(min_value=0, max_value=12), min_size=1, max_size=8)


def view(registered, alive=None, reachable=None) -> r.View:
    alive = set(registered) if alive is None else set(alive)
    return r.View.of(registered, alive, set(alive) if reachable is None else reachable)


def test_ring_starts_at_the_leader_and_wraps_in_id_order():
    assert r.ring(1, 0, [3, 0, 2, 1], 3) == (1, 2, 3)
    assert r.ring(3, 0, [0, 1, 2, 3], 3) == (3, 0, 1)
    assert r.ring(2, 5, [0, 1, 2], 1) == (2,)
    assert r.ring(0, 0, [0, 1, 2], 5) == (0, 1, 2)  # never more than the brokers there are
    assert r.ring(-1, 4, [0, 1, 2], 2) == (1, 2)  # no leader: the partition-th broker starts
    assert r.ring(-1, 0, [], 3) == ()
    assert r.ring(7, 0, [0, 1], 2) == (7, 0)  # a leader not (yet) registered still leads


@given(registered=IDS, leader=st.integers(min_value=-1, max_value=12),
       partition=st.integers(min_value=0, max_value=100), factor=st.integers(min_value=1, max_value=10),
       data=st.data())
def test_ring_properties(registered, leader, partition, factor, data):
    order = data.draw(st.permutations(sorted(registered)))
    reps = r.ring(leader, partition, order, factor)
    assert reps == r.ring(leader, partition, sorted(registered), factor)  # order-independent
    universe = registered | ({leader} if leader >= 0 else set())
    assert len(reps) == len(set(reps)) == min(factor, len(universe))
    assert set(reps) <= universe
    if leader >= 0:
        assert reps[0] == leader


@given(registered=IDS, data=st.data(), factor=st.integers(min_value=1, max_value=10))
def test_isr_and_offline_are_disjoint_and_the_live_leader_is_in_sync(registered, data, factor):
    ids = sorted(registered)
    reachable = data.draw(st.sets(st.sampled_from(ids)))
    alive = data.draw(st.sets(st.sampled_from(ids))) & reachable if reachable else set()
    leader = data.draw(st.sampled_from([-1, *sorted(reachable)]))
    anchor = leader if leader >= 0 else data.draw(st.sampled_from([-1, *ids]))
    res = r.describe(r.View.of(ids, alive, reachable), leader, anchor, 3, factor)
    assert set(res.isr) <= set(res.replicas) and set(res.offline) <= set(res.replicas)
    assert not set(res.isr) & set(res.offline)
    assert list(res.isr) == [b for b in res.replicas if b in res.isr]  # replica order kept
    if leader >= 0:
        assert res.replicas[0] == leader and leader in res.isr
    for b in res.replicas:
        if b != leader:
            assert (b in res.isr) == (b in alive)
            assert (b in res.offline) == (b not in reachable)


def test_a_dead_broker_leaves_the_isr_for_the_offline_list_and_comes_back():
    everyone = view([0, 1, 2])
    assert r.describe(everyone, 0, 0, 0, 3) == r.Replicas((0, 1, 2), (0, 1, 2), ())
    two_dead = view([0, 1, 2], alive=[0, 1])
    assert r.describe(two_dead, 0, 0, 0, 3) == r.Replicas((0, 1, 2), (0, 1), (2,))
    draining = view([0, 1, 2], alive=[0, 1], reachable=[0, 1, 2])  # 2 is alive but draining
    assert r.describe(draining, 0, 0, 0, 3) == r.Replicas((0, 1, 2), (0, 1), ())
    # no live leader: the ring starts at the assigned (dead) leader, which is offline
    assert r.describe(view([0, 1, 2], alive=[1, 2]), -1, 0, 0, 2) == r.Replicas((0, 1), (1,), (0,))


def test_min_insync_replicas_is_capped_at_the_replica_count_as_apache():
    three = r.Replicas((0, 1, 2), (0, 1, 2), ())
    shrunk = r.Replicas((0, 1, 2), (0, 1), (2,))
    single = r.Replicas((0,), (0,), ())
    assert r.enough_in_sync(three, 3) and not r.enough_in_sync(shrunk, 3)
    assert r.enough_in_sync(shrunk, 2)
    assert r.enough_in_sync(single, 2)  # min.insync.replicas above RF: min(2, 1) = 1
    assert r.effective_min_isr(5, 3) == 3


def test_min_insync_replicas_validation():
    assert r.min_insync_replicas_error(None) is None
    assert r.min_insync_replicas_error("1") is None
    assert r.min_insync_replicas_error("7") is None  # above any RF: accepted, as Apache
    assert "at least 1" in r.min_insync_replicas_error("0")
    assert "at least 1" in r.min_insync_replicas_error("-2")
    assert r.min_insync_replicas_error("x") is None  # the type check is configs.validate's
