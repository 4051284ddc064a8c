"""Manual replica assignments (CreateTopics/CreatePartitions ``assignments``): Apache's
checks and messages (``replicas.check_create``/``check_add``), the replica lists Metadata
reports (``replicas.describe_manual``), and the balancer leading such a partition on the
first alive broker of its list (``assignment.balance(preferred=...)``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.domain import replicas
from kaas.domain.assignment import balance
from kaas.domain.replicas import AssignmentError, View, check_add, check_create

REG = (0, 1, 2)


@pytest.mark.parametrize(("assignments", "parts", "rf", "error", "message"), [
    ([(0, (1, 2))], -1, 2, "invalid_request",
     "A manual partition assignment was specified, but replication factor was not set to -1."),
    ([(0, (1, 2))], 1, -1, "invalid_request",
     "A manual partition assignment was specified, but numPartitions was not set to -1."),
    ([(0, (1, 2)), (0, (2, 1))], -1, -1, "invalid_replica_assignment",
     "Found multiple manual partition assignments for partition 0"),
    ([(0, ())], -1, -1, "invalid_replica_assignment",
     "The manual partition assignment includes an empty replica list."),
    ([(0, (0, 9))], -1, -1, "invalid_replica_assignment",
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    ([(0, (0, -1))], -1, -1, "invalid_replica_assignment",
     "The manual partition assignment includes broker -1, but no such broker is registered."),
    ([(0, (1, 1))], -1, -1, "invalid_replica_assignment",
     "The manual partition assignment includes the broker 1 more than once."),
    ([(0, (0, 1)), (1, (0, 1, 2))], -1, -1, "invalid_replica_assignment",
     "The manual partition assignment includes a partition with 3 replica(s), but this is not consistent "
     "with previous partitions, which have 2 replica(s)."),
    ([(0, (0, 1)), (2, (1, 2))], -1, -1, "invalid_replica_assignment",
     "partitions should be a consecutive 0-based integer sequence"),
    ([(0, (2,))], -1, -1, "invalid_replica_assignment",
     "All brokers specified in the manual partition assignment for partition 0 are fenced or in controlled "
     "shutdown."),
])
def test_create_refusals_are_apaches(assignments, parts, rf, error, message):
    got = check_create(assignments, parts, rf, REG, alive=(0, 1))
    assert got == AssignmentError(error, message)


def test_create_keeps_the_lists_in_partition_order():
    assert check_create([(1, (2, 0)), (0, (1, 2))], -1, -1, REG, REG) == ((1, 2), (2, 0))


def test_add_checks_the_count_and_the_topics_factor():
    assert check_add([(1,)], 3, 6, 1, REG, REG) == AssignmentError(
        "invalid_replica_assignment", "Attempted to add 3 additional partition(s), but only 1 assignment(s) were "
                                      "specified.")
    assert check_add([(1,), (2,)], 3, 4, 1, REG, REG).message.startswith("Attempted to add 1 additional")
    assert check_add([(1, 2)], 3, 4, 1, REG, REG).message.endswith("which have 1 replica(s).")
    assert check_add([(2,), (0,)], 3, 5, 1, REG, REG) == ((2,), (0,))


def test_describe_manual_keeps_the_list_and_names_an_outside_leader_first():
    view = View.of(REG, alive=(0, 2), reachable=(0, 2))
    r = replicas.describe_manual(view, 2, (2, 1))
    assert r.replicas == (2, 1) and r.isr == (2,) and r.offline == (1,)
    r = replicas.describe_manual(view, 0, (1,))
    assert r.replicas == (0, 1) and r.isr == (0,)


@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True), min_size=1, max_size=8),
       st.sets(st.integers(0, 4), min_size=1))
def test_balance_leads_a_manual_partition_on_its_first_alive_broker(lists, alive):
    topics = {"m": len(lists), "free": 7}
    preferred = {("m", p): tuple(r) for p, r in enumerate(lists)}
    a = balance(None, topics, range(5), alive, 1, preferred=preferred)
    for p, r in enumerate(lists):
        leader = a.partitions["m"][p].leader
        first = replicas.preferred_leader(r, alive)
        assert leader == first if first >= 0 else leader in alive
    # the others are balanced among themselves, and every leader is alive
    assert all(pl.leader in alive for row in a.partitions.values() for pl in row)
    again = balance(a, topics, range(5), alive, 1, preferred=preferred)
    assert again == a  # stable


def test_a_returning_preferred_broker_leads_again_with_a_new_epoch():
    topics = {"m": 1}
    preferred = {("m", 0): (2, 0)}
    a = balance(None, topics, REG, (0, 1, 2), 1, preferred=preferred)
    assert a.partitions["m"][0].leader == 2
    b = balance(a, topics, REG, (0, 1), 1, preferred=preferred)
    assert b.partitions["m"][0].leader == 0 and b.partitions["m"][0].epoch == a.partitions["m"][0].epoch + 1
    c = balance(b, topics, REG, (0, 1, 2), 1, preferred=preferred)
    assert c.partitions["m"][0].leader == 2 and c.partitions["m"][0].epoch == b.partitions["m"][0].epoch + 1
