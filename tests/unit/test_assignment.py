"""The partition balancer, assignment.json serialisation and the hand-off rule."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kaas.domain.assignment import (
    SLOT_TAG,
    Assignment,
    PartitionLeader,
    balance,
    may_take_over,
    moved_in,
    slot_key,
)
from kaas.domain.routing import NO_BROKER, TXN_SLOTS, slot_owners

TOPIC_NAMES = ["a", "b", "orders", "t-1", "x.y", "slot"]

topic_maps = st.dictionaries(st.sampled_from(TOPIC_NAMES), st.integers(0, 12), max_size=5)


@st.composite
def cluster(draw: st.DrawFn, min_alive: int = 0) -> tuple[list[int], list[int]]:
    registered = sorted(draw(st.sets(st.integers(0, 20), min_size=1, max_size=7)))
    alive = draw(st.sets(st.sampled_from(registered), min_size=min(min_alive, len(registered))))
    return registered, sorted(alive)


def leaders(a: Assignment) -> dict[tuple[str, int], PartitionLeader]:
    return {(t, p): pl for t, row in a.partitions.items() for p, pl in enumerate(row)}


def totals(a: Assignment, alive: list[int], topic: str | None = None) -> dict[int, int]:
    counts = Counter(
        pl.leader for (t, _), pl in leaders(a).items() if topic is None or t == topic
    )
    return {b: counts.get(b, 0) for b in alive}


def spread(counts: dict[int, int]) -> int:
    return max(counts.values()) - min(counts.values()) if counts else 0


def check_layout(
    a: Assignment, topics: dict[str, int], registered: list[int], alive: list[int]
) -> None:
    assert a.brokers == tuple(sorted(set(registered)))
    assert {t: len(row) for t, row in a.partitions.items()} == topics
    assert a.txn_slots == slot_owners(registered, alive)
    if not alive:
        assert all(pl.leader == NO_BROKER for pl in leaders(a).values())
        return
    assert all(pl.leader in alive for pl in leaders(a).values())
    assert spread(totals(a, alive)) <= 1
    for topic in topics:
        assert spread(totals(a, alive, topic)) <= 1, topic


# ---- balance: examples --------------------------------------------------------------------


def test_first_assignment() -> None:
    a = balance(None, {"t": 6, "u": 3}, [0, 1, 2], [0, 1, 2], controller_epoch=1)
    check_layout(a, {"t": 6, "u": 3}, [0, 1, 2], [0, 1, 2])
    assert a.version == 1 and a.controller_epoch == 1
    assert all(pl.epoch == 1 for pl in leaders(a).values())
    # Placement: fewest of the topic, then fewest overall, then lowest id.
    assert [pl.leader for pl in a.partitions["t"]] == [0, 1, 2, 0, 1, 2]
    assert [pl.leader for pl in a.partitions["u"]] == [0, 1, 2]


def test_dead_broker_partitions_move_and_others_stay() -> None:
    topics = {"t": 9}
    a = balance(None, topics, [0, 1, 2], [0, 1, 2], 1)
    b = balance(a, topics, [0, 1, 2], [0, 1], 1)
    check_layout(b, topics, [0, 1, 2], [0, 1])
    assert b.version == a.version + 1
    for key, before in leaders(a).items():
        after = leaders(b)[key]
        if before.leader == 2:
            assert after.leader in (0, 1) and after.epoch == before.epoch + 1
        else:
            assert after == before
    moves = moved_in(a, b)
    orphans = {k for k, pl in leaders(a).items() if pl.leader == 2}
    assert {k for k in moves if k[0] != SLOT_TAG} == orphans
    assert all(old == 2 for old, _ in moves.values())


def test_draining_broker_is_emptied() -> None:
    topics = {"t": 4, "u": 2}
    a = balance(None, topics, [0, 1, 2], [0, 1, 2], 1)
    b = balance(a, topics, [0, 1, 2], [0, 2], 1)  # 1 drains: alive and registered, not eligible
    assert 1 not in {pl.leader for pl in leaders(b).values()}
    assert 1 not in b.txn_slots.values()
    check_layout(b, topics, [0, 1, 2], [0, 2])


def test_joining_broker_gets_partitions() -> None:
    topics = {"t": 6, "u": 4}
    a = balance(None, topics, [0, 1], [0, 1], 1)
    b = balance(a, topics, [0, 1, 2], [0, 1, 2], 1)
    check_layout(b, topics, [0, 1, 2], [0, 1, 2])
    assert totals(b, [0, 1, 2])[2] >= 3
    for key, after in leaders(b).items():
        before = leaders(a)[key]
        assert (after.leader, after.epoch) == (before.leader, before.epoch) or (
            after.leader != before.leader and after.epoch == before.epoch + 1
        )


def test_no_alive_broker_then_recovery() -> None:
    topics = {"t": 3}
    a = balance(None, topics, [0, 1], [0, 1], 1)
    dark = balance(a, topics, [0, 1], [], 1)
    assert [pl.leader for pl in dark.partitions["t"]] == [NO_BROKER] * 3
    assert [pl.epoch for pl in dark.partitions["t"]] == [pl.epoch for pl in a.partitions["t"]]
    assert set(dark.txn_slots.values()) == {NO_BROKER}
    back = balance(dark, topics, [0, 1], [0, 1], 1)
    # Coming back is a leadership change even for the same broker: epochs go up.
    assert all(pl.epoch == 2 for pl in back.partitions["t"])
    # A topic created while nobody was alive starts at epoch 0 and gets 1 when first led.
    new = balance(dark, {"t": 3, "n": 2}, [0, 1], [], 1)
    assert all(pl == PartitionLeader(NO_BROKER, 0) for pl in new.partitions["n"])
    led = balance(new, {"t": 3, "n": 2}, [0, 1], [0], 1)
    assert all(pl == PartitionLeader(0, 1) for pl in led.partitions["n"])


def test_deleted_topic_disappears_and_growth_keeps_existing() -> None:
    a = balance(None, {"t": 3, "gone": 2}, [0, 1, 2], [0, 1, 2], 1)
    b = balance(a, {"t": 5}, [0, 1, 2], [0, 1, 2], 1)
    assert set(b.partitions) == {"t"}
    assert b.partitions["t"][:3] == a.partitions["t"]
    check_layout(b, {"t": 5}, [0, 1, 2], [0, 1, 2])


def test_epoch_floor_for_a_readded_partition() -> None:
    a = balance(None, {"t": 2}, [0, 1], [0, 1], 1, epoch_floor={("t", 1): 7})
    assert [pl.epoch for pl in a.partitions["t"]] == [1, 7]
    assert balance(a, {"t": 2}, [0, 1], [0, 1], 1, epoch_floor={("t", 1): 7}) is a


def test_version_and_controller_epoch() -> None:
    a = balance(None, {"t": 2}, [0, 1], [0, 1], 1)
    same = balance(a, {"t": 2}, [0, 1], [0, 1], 1)
    assert same == a and same.version == a.version
    elected = balance(a, {"t": 2}, [0, 1], [0, 1], 2)
    assert elected.controller_epoch == 2 and elected.version == a.version + 1
    assert elected.partitions == a.partitions
    with pytest.raises(ValueError):
        balance(elected, {"t": 2}, [0, 1], [0, 1], 1)


def test_rejects_unregistered_alive_broker() -> None:
    with pytest.raises(ValueError):
        balance(None, {"t": 1}, [0], [0, 1], 1)


def test_per_topic_evening_uses_swaps() -> None:
    # Two brokers, two topics, each topic piled on one broker: totals are even, topics are not.
    prev = Assignment(
        controller_epoch=1,
        version=4,
        brokers=(0, 1),
        partitions={
            "a": tuple(PartitionLeader(0, 1) for _ in range(2)),
            "b": tuple(PartitionLeader(1, 1) for _ in range(2)),
        },
        txn_slots=slot_owners([0, 1], [0, 1]),
    )
    b = balance(prev, {"a": 2, "b": 2}, [0, 1], [0, 1], 1)
    check_layout(b, {"a": 2, "b": 2}, [0, 1], [0, 1])
    assert len(moved_in(prev, b)) == 2  # one swap, nothing else
    assert b.version == 5


# ---- balance: properties ------------------------------------------------------------------


@given(topic_maps, cluster())
def test_fresh_balance_is_balanced_and_idempotent(
    topics: dict[str, int], c: tuple[list[int], list[int]]
) -> None:
    registered, alive = c
    a = balance(None, topics, registered, alive, 1)
    check_layout(a, topics, registered, alive)
    assert balance(a, topics, registered, alive, 1) == a
    reordered = dict(reversed(list(topics.items())))
    assert balance(a, reordered, list(reversed(registered)), alive, 1) == a


@given(topic_maps, cluster(min_alive=2), st.data())
def test_one_death_moves_little(
    topics: dict[str, int], c: tuple[list[int], list[int]], data: st.DataObject
) -> None:
    registered, alive = c
    a = balance(None, topics, registered, alive, 1)
    victim = data.draw(st.sampled_from(alive))
    survivors = [b for b in alive if b != victim]
    b = balance(a, topics, registered, survivors, 1)
    check_layout(b, topics, registered, survivors)
    moves = {k: v for k, v in moved_in(a, b).items() if k[0] != SLOT_TAG}
    orphans = [k for k, pl in leaders(a).items() if pl.leader == victim]
    assert set(orphans) <= set(moves)
    # Partitions of live leaders move only for per-topic evening, and never more than
    # the dead broker's share; no survivor ends with fewer partitions than it had.
    assert len(moves) - len(orphans) <= len(orphans)
    before, after = totals(a, survivors), totals(b, survivors)
    assert all(after[s] >= before[s] for s in survivors)


class Membership(RuleBasedStateMachine):
    """Random joins, deaths, revivals, drains, elections and topic changes."""

    def __init__(self) -> None:
        super().__init__()
        self.registered: set[int] = {0}
        self.dead: set[int] = set()
        self.draining: set[int] = set()
        self.topics: dict[str, int] = {}
        self.controller_epoch = 1
        self.current: Assignment | None = None
        self.epochs: dict[tuple[str, int], int] = {}
        self.leader_of: dict[tuple[str, int], int] = {}
        self.rebalance()

    def alive(self) -> list[int]:
        return sorted(self.registered - self.dead - self.draining)

    def rebalance(self) -> None:
        prev = self.current
        inputs = (self.topics, sorted(self.registered), self.alive(), self.controller_epoch)
        new = balance(prev, *inputs)
        check_layout(new, self.topics, sorted(self.registered), self.alive())
        if prev is not None:
            if new == prev:
                assert new.version == prev.version
            else:
                assert new.version == prev.version + 1
        # Epochs never decrease; a real leader change always raises the epoch.
        for key, pl in leaders(new).items():
            if key in self.epochs:
                assert pl.epoch >= self.epochs[key]
                if pl.leader != self.leader_of[key] and pl.leader != NO_BROKER:
                    assert pl.epoch > self.epochs[key]
                if pl.leader == self.leader_of[key]:
                    assert pl.epoch == self.epochs[key]
            self.epochs[key] = pl.epoch
            self.leader_of[key] = pl.leader
        # Re-balancing with the same inputs changes nothing.
        assert balance(new, *inputs) is new
        self.current = new

    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        live = sorted(self.registered - self.dead)
        if live:
            self.dead.add(data.draw(st.sampled_from(live)))
        self.rebalance()

    @rule(data=st.data())
    def revive(self, data: st.DataObject) -> None:
        if self.dead:
            b = data.draw(st.sampled_from(sorted(self.dead)))
            self.dead.discard(b)
            self.draining.discard(b)
        self.rebalance()

    @rule(data=st.data())
    def drain(self, data: st.DataObject) -> None:
        if self.alive():
            self.draining.add(data.draw(st.sampled_from(self.alive())))
        self.rebalance()

    @precondition(lambda self: len(self.registered) < 7)
    @rule()
    def join(self) -> None:
        self.registered.add(max(self.registered) + 1)
        self.rebalance()

    @rule()
    def elect(self) -> None:
        self.controller_epoch += 1
        self.rebalance()

    @rule(topic=st.sampled_from(TOPIC_NAMES), count=st.integers(1, 12))
    def create_or_grow(self, topic: str, count: int) -> None:
        self.topics[topic] = max(count, self.topics.get(topic, 0))
        self.rebalance()

    @rule(topic=st.sampled_from(TOPIC_NAMES))
    def delete(self, topic: str) -> None:
        if self.topics.pop(topic, None) is not None:
            for key in [k for k in self.epochs if k[0] == topic]:
                del self.epochs[key]
                del self.leader_of[key]
        self.rebalance()

    @invariant()
    def serialisation_round_trips(self) -> None:
        assert self.current is not None
        doc = json.loads(json.dumps(self.current.to_json()))
        assert Assignment.from_json(doc) == self.current


TestMembership = Membership.TestCase
TestMembership.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)


# ---- serialisation ------------------------------------------------------------------------


def test_json_shape() -> None:
    a = balance(None, {"t": 2}, [0, 1], [0, 1], 3)
    doc = a.to_json()
    assert doc["format"] == 1
    assert doc["controller_epoch"] == 3 and doc["version"] == 1 and doc["brokers"] == [0, 1]
    assert doc["partitions"] == {"t": [{"leader": 0, "epoch": 1}, {"leader": 1, "epoch": 1}]}
    assert len(doc["txn_slots"]) == TXN_SLOTS
    assert all(isinstance(k, str) for k in doc["txn_slots"])
    assert Assignment.from_json(json.loads(json.dumps(doc))) == a


@given(topic_maps, cluster())
def test_round_trip(topics: dict[str, int], c: tuple[list[int], list[int]]) -> None:
    a = balance(None, topics, *c, 1)
    assert Assignment.from_json(json.loads(json.dumps(a.to_json()))) == a


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.pop("format"),
        lambda d: d.update(format=2),
        lambda d: d.pop("version"),
        lambda d: d.update(version="1"),
        lambda d: d.update(controller_epoch=True),
        lambda d: d.update(brokers={}),
        lambda d: d.update(partitions=[]),
        lambda d: d.update(partitions={"t": [{"leader": 0}]}),
        lambda d: d.update(partitions={"t": {"leader": 0, "epoch": 1}}),
        lambda d: d.update(txn_slots={"x": 0}),
        lambda d: d.update(txn_slots={"0": None}),
    ],
)
def test_corrupt_json_is_an_error(mutate: object) -> None:
    doc = balance(None, {"t": 1}, [0], [0], 1).to_json()
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(ValueError):
        Assignment.from_json(doc)


def test_not_an_object_is_an_error() -> None:
    with pytest.raises(ValueError):
        Assignment.from_json([])


# ---- hand-off rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("moved_in_version", "prev_owner", "applied", "alive", "expected"),
    [
        (5, 1, 5, True, True),  # previous owner applied the moving version
        (5, 1, 6, True, True),  # ... or a later one
        (5, 1, 4, True, False),  # still on the old version: wait
        (5, 1, None, True, False),  # no heartbeat read yet: wait
        (5, 1, 4, False, True),  # previous owner is dead
        (5, 1, None, False, True),
        (5, NO_BROKER, None, False, True),  # the key had no owner
        (5, NO_BROKER, None, True, True),
    ],
)
def test_may_take_over(
    moved_in_version: int, prev_owner: int, applied: int | None, alive: bool, expected: bool
) -> None:
    assert may_take_over(moved_in_version, prev_owner, applied, alive) is expected


def test_moved_in_covers_new_deleted_and_slots() -> None:
    a = balance(None, {"t": 2, "gone": 1}, [0, 1], [0, 1], 1)
    b = balance(a, {"t": 3}, [0, 1], [0], 1)
    moves = moved_in(a, b)
    assert moves[("gone", 0)] == (a.partitions["gone"][0].leader, NO_BROKER)
    assert moves[("t", 2)] == (NO_BROKER, 0)
    for p, pl in enumerate(a.partitions["t"]):
        assert (("t", p) in moves) == (pl.leader == 1)
    slots_of_1 = {s for s, o in a.txn_slots.items() if o == 1}
    assert {k[1] for k in moves if k[0] == SLOT_TAG} == slots_of_1
    assert all(moves[slot_key(s)] == (1, 0) for s in slots_of_1)
    assert moved_in(b, b) == {}


def test_slot_keys_do_not_collide_with_a_topic_named_slot() -> None:
    a = balance(None, {"slot": 3}, [0, 1], [0, 1], 1)
    b = balance(a, {"slot": 3}, [0, 1], [1], 1)
    moves = moved_in(a, b)
    assert ("slot", 0) in moves and slot_key(0) != ("slot", 0)
    assert len(moves) == sum(pl.leader == 0 for pl in a.partitions["slot"]) + sum(
        o == 0 for o in a.txn_slots.values()
    )
