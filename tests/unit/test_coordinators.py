"""The group coordinator hold (``kaas.domain.coordinators``): which brokers the controller
lists as group coordinators, which brokers every broker places groups on, and the
assignment's ``coordinators`` list."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kaas.domain.assignment import Assignment, balance
from kaas.domain.coordinators import candidates, eligible
from kaas.domain.routing import coordinator_for, slot_owners

HOLD = 30.0
KEYS = [f"group-{i}" for i in range(40)]


# ---- eligible (the controller) --------------------------------------------------------------


def test_a_broker_never_seen_dead_is_listed_at_once():
    assert eligible([0, 1, 2], 0, {}, 100.0, HOLD, listed_before=None, up_for=1.0) == [0, 1, 2]
    assert eligible([2, 0, 1], 0, {1: 0.0, 2: 0.0}, 100.0, HOLD, listed_before=[0, 1, 2], up_for=1.0) == [0, 1, 2]


def test_a_broker_back_from_the_dead_is_listed_only_after_the_hold():
    back = {1: 100.0}
    assert eligible([0, 1, 2], 0, back, 100.0, HOLD, listed_before=[0, 2], up_for=500.0) == [0, 2]
    assert eligible([0, 1, 2], 0, back, 129.9, HOLD, listed_before=[0, 2], up_for=500.0) == [0, 2]
    assert eligible([0, 1, 2], 0, back, 130.0, HOLD, listed_before=[0, 2], up_for=500.0) == [0, 1, 2]


def test_no_hold_lists_every_live_broker():
    assert eligible([0, 1, 2], 0, {1: 100.0}, 100.0, 0.0, listed_before=[0, 2], up_for=0.0) == [0, 1, 2]


def test_dead_and_draining_brokers_are_not_listed():
    # ``alive`` is the live brokers that take keys: neither the dead nor the draining
    assert eligible([0, 2], 0, {}, 100.0, HOLD, listed_before=[0, 1, 2], up_for=500.0) == [0, 2]


def test_a_returning_broker_elected_controller_holds_itself():
    # broker 1 came back (the list in force left it out), then won the controller's election
    assert eligible([0, 1, 2], 1, {}, 100.0, HOLD, listed_before=[0, 2], up_for=5.0) == [0, 2]
    assert eligible([0, 1, 2], 1, {}, 100.0, HOLD, listed_before=[0, 2], up_for=HOLD) == [0, 1, 2]
    # ... unless nobody else could coordinate
    assert eligible([1, 2], 1, {2: 99.0}, 100.0, HOLD, listed_before=[0], up_for=5.0) == [1]
    # a controller the list in force names, or the first list, is never held
    assert eligible([0, 1, 2], 1, {}, 100.0, HOLD, listed_before=[0, 1, 2], up_for=1.0) == [0, 1, 2]
    assert eligible([0, 1, 2], 1, {}, 100.0, HOLD, listed_before=None, up_for=1.0) == [0, 1, 2]


# ---- candidates (every broker) ---------------------------------------------------------------


def test_candidates_are_the_listed_live_brokers_or_else_every_live_one():
    assert candidates([0, 1, 2], [0, 2]) == [0, 2]
    assert candidates([0, 1, 2], None) == [0, 1, 2]
    assert candidates([1], [0, 2]) == [1]  # every listed broker is dead: nobody is left out
    assert candidates([], [0, 2]) == []


@given(st.sets(st.integers(0, 9)), st.one_of(st.none(), st.sets(st.integers(0, 9))))
def test_candidates_are_live_and_never_empty_while_a_broker_lives(alive, listed):
    c = candidates(alive, listed)
    assert set(c) <= alive and c == sorted(c)
    assert bool(c) == bool(alive)
    if listed is not None and alive & listed:
        assert set(c) == alive & listed


# ---- the assignment's list, and slots placed over it -----------------------------------------


def test_the_list_round_trips_and_an_older_file_has_none():
    a = balance(None, {"t": 2}, [0, 1, 2], [0, 1, 2], 1, coordinators=[2, 0])
    assert a.coordinators == (0, 2)
    assert Assignment.from_json(a.to_json()) == a
    old = a.to_json()
    del old["coordinators"]
    assert Assignment.from_json(old).coordinators is None
    assert "coordinators" not in balance(None, {"t": 2}, [0, 1, 2], [0, 1, 2], 1).to_json()


def test_a_list_change_is_a_new_version_and_slots_do_not_follow_the_list():
    a = balance(None, {}, [0, 1, 2], [0, 1, 2], 1, coordinators=[0, 2])
    assert a.txn_slots == slot_owners([0, 1, 2], [0, 1, 2])  # slots keep the partitions' hold
    b = balance(a, {}, [0, 1, 2], [0, 1, 2], 1, coordinators=[0, 2])
    assert b is a
    c = balance(a, {}, [0, 1, 2], [0, 1, 2], 1, coordinators=[0, 1, 2])
    assert c.version == a.version + 1 and c.txn_slots == a.txn_slots


# ---- a cluster's life: kills, returns, time -------------------------------------------------


def owners(alive: set[int], listed: list[int] | None, n: int) -> dict[str, int | None]:
    c = candidates(alive, listed)
    return {k: coordinator_for(k, range(n), c) for k in KEYS}


@settings(deadline=None)
@given(st.integers(2, 5), st.lists(st.tuples(st.sampled_from(["kill", "return", "wait"]),
                                             st.integers(0, 4), st.floats(0.0, 2 * HOLD)), max_size=30))
def test_a_returning_broker_takes_no_key_back_within_its_hold_and_no_key_is_left_without_one(n, events):
    """The controller (the lowest live broker, re-elected when it dies) lists the
    coordinators after every event; every broker places keys over the listed live brokers.
    Checked after each event, before the controller re-lists (brokers see the new liveness
    with the list in force) and after:

    - while any broker is alive, every key has a live coordinator;
    - a broker's return moves no key while another listed broker is alive;
    - a broker back from the dead less than the hold ago (not the controller) owns no key
      once the controller re-listed;
    - when the list grows (a hold ended), keys move only to the brokers it gained.
    """
    now = 1000.0
    alive = set(range(n))
    back_at: dict[int, float] = {}
    started = dict.fromkeys(range(n), 0.0)
    listed: list[int] | None = None
    controller = 0

    def relist() -> None:
        nonlocal listed, controller
        if controller not in alive:
            controller = min(alive) if alive else -1
        if controller < 0:
            return
        peers_back = {b: t for b, t in back_at.items() if b != controller}
        listed = eligible(alive, controller, peers_back, now, HOLD, listed_before=listed,
                          up_for=now - started[controller])

    relist()
    for kind, b, dt in events:
        b %= n
        before = owners(alive, listed, n)
        if kind == "kill" and b in alive:
            alive.discard(b)
        elif kind == "return" and b not in alive:
            alive.add(b)
            back_at[b] = now
            started[b] = now
        else:
            now += dt
        seen_list = listed
        mid = owners(alive, listed, n)
        for o in mid.values():
            assert (o in alive) if alive else o is None
        if kind == "return" and listed is not None and set(listed) & (alive - {b}):
            assert mid == before, "a return moved keys before the controller listed the broker"
        relist()
        after = owners(alive, listed, n)
        for o in after.values():
            assert (o in alive) if alive else o is None
        for r in alive:
            if r != controller and r in back_at and now - back_at[r] < HOLD:
                assert r not in after.values(), f"broker {r} took keys back within its hold"
        if seen_list is not None and listed is not None and set(listed) > set(seen_list):
            gained = set(listed) - set(seen_list)
            for k in KEYS:
                assert after[k] == mid[k] or after[k] in gained
