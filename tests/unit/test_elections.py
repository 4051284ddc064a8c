"""ElectLeaders' decisions (``domain.elections``), the controller's placement of an elected
leader (``assignment.balance``'s ``elected``), and reassignment checks
(``domain.reassignment``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kaas.domain import elections as el
from kaas.domain import reassignment as ra
from kaas.domain.assignment import balance

BROKERS = st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True)


def test_preferred_election_of_a_manual_list():
    assert el.decide(el.PREFERRED, 1, (1, 2), {0, 1, 2}).error == el.NOT_NEEDED
    d = el.decide(el.PREFERRED, 2, (1, 2), {0, 1, 2})
    assert (d.error, d.leader) == (el.ELECT, 1)
    assert el.decide(el.PREFERRED, 2, (1, 2), {0, 2}).error == el.PREFERRED_NOT_AVAILABLE
    assert el.decide(el.PREFERRED, -1, (1, 2), {0, 2}).error == el.PREFERRED_NOT_AVAILABLE


def test_preferred_election_of_a_ring_is_never_needed_while_led():
    """Without a manual list the replica list starts at the leader (``replicas.ring``)."""
    assert el.decide(el.PREFERRED, 0, None, {0, 1}).error == el.NOT_NEEDED
    assert el.decide(el.PREFERRED, -1, None, {0, 1}).error == el.PREFERRED_NOT_AVAILABLE


def test_unclean_election():
    assert el.decide(el.UNCLEAN, 1, None, {0, 1}).error == el.NOT_NEEDED
    assert el.decide(el.UNCLEAN, -1, (3, 2), {0, 2}) == el.Decision(el.ELECT, None, 2)
    assert el.decide(el.UNCLEAN, -1, None, {2, 0}) == el.Decision(el.ELECT, None, 0)
    assert el.decide(el.UNCLEAN, -1, None, set()).error == el.NOT_AVAILABLE
    assert el.decide(7, 0, None, {0}).error == el.INVALID


@given(st.sampled_from([el.PREFERRED, el.UNCLEAN]), st.integers(-1, 6),
       st.one_of(st.none(), BROKERS.map(tuple)), BROKERS)
def test_decisions_elect_only_live_brokers_and_never_the_leader(kind, leader, manual, alive):
    d = el.decide(kind, leader, manual, set(alive))
    if d.error == el.ELECT:
        assert d.leader in alive and d.leader != leader
    else:
        assert d.leader == -1


def test_an_elected_leader_is_placed_even_when_not_placeable():
    """Broker 1 is back but held off (not in ``alive``): the manual list cannot pin the
    partition there, an election can; the next epoch is taken."""
    a = balance(None, {"t": 2}, [0, 1, 2], [0, 2], 1, preferred={("t", 0): (1, 2)})
    assert a.partitions["t"][0].leader == 2
    b = balance(a, {"t": 2}, [0, 1, 2], [0, 2], 1, preferred={("t", 0): (1, 2)}, elected={("t", 0): 1})
    assert b.partitions["t"][0].leader == 1
    assert b.partitions["t"][0].epoch == a.partitions["t"][0].epoch + 1 and b.version == a.version + 1
    # an election of a deleted topic, a missing partition or an unregistered broker is void
    c = balance(a, {"t": 2}, [0, 1, 2], [0, 2], 1, preferred={("t", 0): (1, 2)},
                elected={("t", 5): 1, ("gone", 0): 1, ("t", 1): 9})
    assert c == a


@given(BROKERS, st.data())
def test_elected_placements_are_kept_and_the_rest_stays_placed(registered, data):
    alive = data.draw(st.lists(st.sampled_from(registered), min_size=1, unique=True))
    topics = {"t": data.draw(st.integers(1, 6))}
    elected = data.draw(st.dictionaries(st.tuples(st.just("t"), st.integers(0, topics["t"] - 1)),
                                        st.sampled_from(registered), max_size=3))
    a = balance(None, topics, registered, alive, 1, elected=elected)
    for (t, p), b in elected.items():
        assert a.partitions[t][p].leader == b
    for p, pl in enumerate(a.partitions["t"]):
        if ("t", p) not in elected:
            assert pl.leader in alive


def test_reassignment_checks_in_apache_order():
    assert ra.check_target(0, (), 1, [0, 1, 2], [0, 1, 2], True).error == "invalid_replica_assignment"
    assert "no such broker" in ra.check_target(0, (7,), 1, [0, 1, 2], [0, 1, 2], True).message
    assert "more than once" in ra.check_target(0, (1, 1), 2, [0, 1, 2], [0, 1, 2], True).message
    err = ra.check_target(0, (1, 2), 1, [0, 1, 2], [0, 1, 2], False)
    assert err is not None and err.error == ra.INVALID_REPLICATION_FACTOR
    assert ra.check_target(0, (1, 2), 1, [0, 1, 2], [0, 1, 2], True) is None
    assert "fenced" in ra.check_target(3, (1,), 1, [0, 1, 2], [0, 2], True).message
    assert ra.check_target(0, (2, 0), 2, [0, 1, 2], [0, 2], False) is None


def test_a_reassignment_is_ongoing_until_the_leader_is_in_the_new_list():
    assert ra.ongoing(None, 0, {0, 1}) is None
    assert ra.ongoing((1, 2), 2, {0, 1, 2}) is None
    assert ra.ongoing((1, 2), 0, {0, 1, 2}) == ra.Ongoing(replicas=(1, 2, 0), adding=(1, 2), removing=(0,))
    assert ra.ongoing((1, 2), 0, {0}) is None  # nobody of the list may lead: nothing moves


def test_an_election_is_held_only_while_the_controller_would_not_place_it_so():
    chosen = {("t", 0): 1, ("t", 1): 1, ("t", 2): 2, ("u", 0): 1}
    lists = {("t", 0): (1, 2), ("t", 1): (2, 1)}  # t-1 was reassigned since: 2 comes first
    held = el.still_held(chosen, lists, alive={0, 1}, placeable={0})
    assert held == {("t", 0): 1, ("u", 0): 1}  # t-2: broker 2 died
    assert el.still_held(held, lists, alive={0, 1}, placeable={0, 1}) == {}  # the hold is over
