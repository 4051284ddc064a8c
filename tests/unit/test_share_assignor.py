"""The share groups' ``simple`` assignor (``kaas.domain.groups.share.assignor``, Apache 4.1+):
every subscribed partition covered, balance (counts within one, partitions shared only when
there are more members than partitions, each by ceil(M / P) members), stickiness (an
assignment recomputed from itself is unchanged; after a join each member keeps all it can of
what it held), and heterogeneous subscriptions balanced per topic."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from kaas.domain.groups.consumer.group import TopicImage, TopicInfo
from kaas.domain.groups.share.assignor import simple_assign

IMAGE = TopicImage.of(1, [TopicInfo("id-a", "a", 3), TopicInfo("id-b", "b", 1), TopicInfo("id-c", "c", 8)])

member_ids = st.text("abcdef0123", min_size=1, max_size=6)
members_st = st.dictionaries(member_ids, st.lists(st.sampled_from(["a", "b", "c", "gone"]), min_size=1, max_size=3)
                             .map(tuple), min_size=1, max_size=8)
same_st = st.tuples(st.sets(member_ids, min_size=1, max_size=12),
                    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))


def _pairs(a) -> set[tuple[str, int]]:
    return {(tid, p) for tid, ps in a.items() for p in ps}


def _covered(members, out) -> None:
    assert set(out) == set(members)
    for mid, a in out.items():
        for tid in a:
            assert IMAGE.by_id[tid].name in members[mid]  # only what the member subscribes to
    subscribed = {(IMAGE.by_name[t].topic_id, p) for ts in members.values() for t in ts if t in IMAGE.by_name
                  for p in range(IMAGE.by_name[t].partitions)}
    assert set().union(*(_pairs(a) for a in out.values())) == subscribed


@given(members_st)
def test_every_subscribed_partition_is_assigned_and_only_to_subscribers(members):
    out = simple_assign(members, {}, IMAGE)
    _covered(members, out)
    again = simple_assign(members, out, IMAGE)
    assert again == out, "recomputed from itself, nothing moves"


@given(same_st)
def test_homogeneous_groups_are_balanced_and_share_only_when_short_of_partitions(spec):
    mids, topics = spec
    members = {m: tuple(topics) for m in mids}
    out = simple_assign(members, {}, IMAGE)
    _covered(members, out)
    sizes = [len(_pairs(a)) for a in out.values()]
    assert max(sizes) - min(sizes) <= 1
    n_parts = sum(IMAGE.by_name[t].partitions for t in topics)
    holders: dict[tuple[str, int], int] = {}
    for a in out.values():
        for tp in _pairs(a):
            holders[tp] = holders.get(tp, 0) + 1
    assert set(holders.values()) <= {math.ceil(len(mids) / n_parts)} | ({1} if len(mids) <= n_parts else set())
    assert all(sizes) or len(mids) > n_parts * math.ceil(len(mids) / n_parts)


@given(same_st, member_ids)
def test_a_joining_member_takes_partitions_without_moving_the_others(spec, newcomer):
    mids, topics = spec
    members = {m: tuple(topics) for m in mids}
    before = simple_assign(members, {}, IMAGE)
    joined = {**members, newcomer + "-new": tuple(topics)}
    after = simple_assign(joined, before, IMAGE)
    _covered(joined, after)
    sizes = [len(_pairs(a)) for a in after.values()]
    assert max(sizes) - min(sizes) <= 1
    n_parts = sum(IMAGE.by_name[t].partitions for t in topics)
    if len(joined) <= n_parts:  # nothing shared: each old member keeps all it can of what it held
        for m in members:
            kept = _pairs(after[m]) & _pairs(before[m])
            assert len(kept) == min(len(_pairs(before[m])), len(_pairs(after[m])))


def test_the_first_member_no_longer_keeps_everything_when_others_join():
    members = {"m1": ("c",)}
    first = simple_assign(members, {}, IMAGE)
    assert _pairs(first["m1"]) == {("id-c", p) for p in range(8)}
    four = {f"m{i}": ("c",) for i in range(1, 5)}
    out = simple_assign(four, first, IMAGE)
    assert sorted(len(_pairs(a)) for a in out.values()) == [2, 2, 2, 2]
    assert _pairs(out["m1"]) <= _pairs(first["m1"])


def test_heterogeneous_subscriptions_are_balanced_per_topic():
    members = {"m1": ("a",), "m2": ("c",), "m3": ("a", "c")}
    out = simple_assign(members, {}, IMAGE)
    _covered(members, out)
    assert len(out["m3"].get("id-a", ())) in (1, 2) and len(out["m1"]["id-a"]) in (1, 2)
    assert len(out["m2"]["id-c"]) == len(out["m3"]["id-c"]) == 4
    # more members than partitions: "b" (one partition) is shared by all three
    shared = simple_assign({"x": ("b",), "y": ("b",), "z": ("b", "a")}, {}, IMAGE)
    assert all(a.get("id-b") == frozenset({0}) for a in shared.values())
