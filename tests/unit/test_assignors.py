"""The consumer group protocol's server-side assignors: uniform and range (KIP-848)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.domain.groups.consumer.assignors import ASSIGNORS, MemberSpec, TopicSpec, assign

Assigned = dict[str, dict[str, frozenset[int]]]
Group = tuple[dict[str, MemberSpec], dict[str, TopicSpec]]


def spec(subscribed: set[str] | frozenset[str], current: Mapping[str, frozenset[int]] | None = None,
         instance_id: str | None = None) -> MemberSpec:
    return MemberSpec(rack_id=None, instance_id=instance_id, subscribed=frozenset(subscribed),
                      current=dict(current or {}))


def owners(result: Assigned) -> Counter[tuple[str, int]]:
    return Counter((t, p) for parts in result.values() for t, ps in parts.items() for p in ps)


def sizes(result: Assigned) -> dict[str, int]:
    return {m: sum(len(ps) for ps in parts.values()) for m, parts in result.items()}


def moved(before: Assigned, after: Assigned) -> int:
    """Partitions that left the member that held them."""
    return sum(
        len(ps - after.get(m, {}).get(t, frozenset()))
        for m, parts in before.items() for t, ps in parts.items()
    )


def rejoin(result: Assigned, members: Mapping[str, MemberSpec]) -> dict[str, MemberSpec]:
    """The same members, each with ``result`` as its current assignment."""
    return {m: spec(s.subscribed, result[m], s.instance_id) for m, s in members.items()}


topic_maps = st.dictionaries(
    st.sampled_from(["t0", "t1", "t2", "t3", "t4"]),
    st.builds(lambda n: TopicSpec("x", n), st.integers(1, 16)),
    min_size=1, max_size=5,
)


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool = False, with_current: bool = True) -> Group:
    topics = draw(topic_maps)
    keys = sorted(topics)
    ids = [f"m{n}" for n in draw(st.lists(st.integers(0, 99), min_size=1, max_size=7, unique=True))]
    everything = draw(st.sets(st.sampled_from(keys), min_size=1))
    members: dict[str, MemberSpec] = {}
    for m in ids:
        subs = everything if homogeneous else draw(st.sets(st.sampled_from(keys)))
        current: dict[str, set[int]] = {}
        if with_current:
            # A current assignment that may be stale: other topics, out-of-range and shared partitions.
            for t, p in draw(st.lists(st.tuples(st.sampled_from([*keys, "gone"]), st.integers(0, 30)), max_size=8)):
                current.setdefault(t, set()).add(p)
        static = draw(st.sampled_from([None, None, "s1", "s2", "s3"]))
        members[m] = spec(subs, {t: frozenset(ps) for t, ps in current.items()}, static)
    return members, topics


def check_valid(result: Assigned, members: Mapping[str, MemberSpec], topics: Mapping[str, TopicSpec]) -> None:
    assert set(result) == set(members)
    counts = owners(result)
    assert all(n == 1 for n in counts.values()), "a partition owned twice"
    for m, parts in result.items():
        for t, ps in parts.items():
            assert ps, "no empty per-topic sets"
            assert t in members[m].subscribed and t in topics
            assert all(0 <= p < topics[t].partitions for p in ps)
    wanted = {(t, p) for s in members.values() for t in s.subscribed if t in topics
              for p in range(topics[t].partitions)}
    assert set(counts) == wanted, "every subscribed partition assigned exactly once"


@pytest.mark.parametrize("name", ASSIGNORS)
@given(group=groups())
def test_every_subscribed_partition_once_and_deterministic(name: str, group: Group) -> None:
    members, topics = group
    result = assign(name, members, topics)
    check_valid(result, members, topics)
    # Same input in another order: same answer.
    shuffled = dict(reversed(list(members.items())))
    assert assign(name, shuffled, dict(reversed(list(topics.items())))) == result


@given(group=groups())
def test_uniform_balance(group: Group) -> None:
    members, topics = group
    result = assign("uniform", members, topics)
    size = sizes(result)
    by_subscription: dict[frozenset[str], list[int]] = {}
    for m, s in members.items():
        by_subscription.setdefault(s.subscribed & set(topics), []).append(size[m])
    for counts in by_subscription.values():
        assert max(counts) - min(counts) <= 1
    # No partition could move to make a topic's subscribers more even (Kafka's fixpoint).
    for t in topics:
        subs = [m for m, s in members.items() if t in s.subscribed]
        holders = [m for m in subs if result[m].get(t)]
        if holders:
            assert max(size[m] for m in holders) - min(size[m] for m in subs) <= 1


@given(group=groups())
def test_range_balances_each_topic(group: Group) -> None:
    members, topics = group
    result = assign("range", members, topics)
    for t in topics:
        counts = [len(result[m].get(t, ())) for m, s in members.items() if t in s.subscribed]
        if counts:
            assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize("name", ASSIGNORS)
@given(group=groups(homogeneous=True, with_current=False), newcomer=st.sampled_from(["new", "a0", "zz"]))
def test_a_join_moves_only_what_the_newcomer_needs(
    name: str, group: Group, newcomer: str
) -> None:
    members, topics = group
    stable = assign(name, rejoin(assign(name, members, topics), members), topics)
    before = rejoin(stable, members)
    assert assign(name, before, topics) == stable, "a stable assignment is a fixpoint"
    subs = next(iter(members.values())).subscribed
    after = assign(name, {**before, newcomer: spec(subs)}, topics)
    n = len(members) + 1
    if name == "uniform":
        total = sum(topics[t].partitions for t in subs)
        assert moved(stable, after) <= math.ceil(total / n)
    else:
        assert moved(stable, after) <= sum(math.ceil(topics[t].partitions / n) for t in subs)
    # Whatever moved went to the newcomer.
    assert moved(stable, after) == sizes(after)[newcomer]


@pytest.mark.parametrize("name", ASSIGNORS)
@given(group=groups(homogeneous=True, with_current=False))
def test_a_leave_moves_only_the_leavers_partitions(name: str, group: Group) -> None:
    members, topics = group
    if len(members) < 2:
        return
    stable = assign(name, rejoin(assign(name, members, topics), members), topics)
    leaver = sorted(members)[0]
    rest = {m: s for m, s in rejoin(stable, members).items() if m != leaver}
    after = assign(name, rest, topics)
    check_valid(after, rest, topics)
    if name == "uniform":  # range may shift a range boundary; uniform only hands out the leaver's
        assert moved({m: stable[m] for m in rest}, after) == 0


def test_ten_members_sixty_partitions() -> None:
    topics = {"t": TopicSpec("t", 60)}
    members = {f"m{i}": spec({"t"}) for i in range(10)}
    for name in ASSIGNORS:
        result = assign(name, members, topics)
        assert sorted(sizes(result).values()) == [6] * 10
        # Contiguous ranges in member order for a fresh group.
        assert result["m0"]["t"] == frozenset(range(6))
        after = assign(name, {**rejoin(result, members), "m10": spec({"t"})}, topics)
        assert moved(result, after) == 5 == sizes(after)["m10"]


def test_range_co_partitions_topics_of_equal_size() -> None:
    topics = {"a": TopicSpec("a", 7), "b": TopicSpec("b", 7)}
    members = {m: spec({"a", "b"}) for m in ("x", "y", "z")}
    result = assign("range", members, topics)
    for m in members:
        assert result[m]["a"] == result[m]["b"]


def test_uniform_heterogeneous_example() -> None:
    # m1 alone on t1; t0 shared: m1 takes fewer of t0 so totals even out.
    topics = {"t0": TopicSpec("t0", 6), "t1": TopicSpec("t1", 4)}
    members = {"m1": spec({"t0", "t1"}), "m2": spec({"t0"}), "m3": spec({"t0"})}
    result = assign("uniform", members, topics)
    assert result["m1"]["t1"] == frozenset(range(4))
    assert sorted(sizes(result).values()) == [3, 3, 4]


def test_static_members_are_ordered_by_instance_id() -> None:
    topics = {"t": TopicSpec("t", 4)}
    members = {"zzz": spec({"t"}, instance_id="a"), "aaa": spec({"t"}, instance_id="b")}
    assert assign("range", members, topics)["zzz"]["t"] == frozenset({0, 1})


def test_edges() -> None:
    assert assign("uniform", {}, {}) == {}
    topics = {"t": TopicSpec("t", 2)}
    members = {"a": spec(set()), "b": spec({"t", "missing"}), "c": spec({"t"})}
    result = assign("uniform", members, topics)
    assert result["a"] == {} and sizes(result) == {"a": 0, "b": 1, "c": 1}
    with pytest.raises(ValueError, match="unknown assignor"):
        assign("sticky", members, topics)
