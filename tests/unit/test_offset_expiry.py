"""The offset retention rule (``kaas.domain.groups.offset_expiry``, KIP-211 as Apache Kafka 4
applies it): examples of each kind of group, and properties over any group, offsets and
time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kaas.domain.groups.offset_expiry import CLASSIC, CONSUMER, SHARE, Basis, GroupView, Stored, basis_of, expire

MIN = 60_000
RET = 10 * MIN


def classic(state: str = "Empty", protocol_type: str | None = "consumer", since: int | None = 0,
            subscribed: frozenset[str] = frozenset()) -> GroupView:
    return GroupView(CLASSIC, state, protocol_type, since if state == "Empty" else None, subscribed)


def test_an_empty_group_expires_from_when_it_became_empty_not_from_the_commit():
    offsets = {("t", 0): Stored(commit_ms=0), ("t", 1): Stored(commit_ms=0)}
    view = classic(since=5 * MIN)  # committed long before it emptied
    assert not expire(view, offsets, (), 5 * MIN + RET - 1, RET).changes
    out = expire(view, offsets, (), 5 * MIN + RET, RET)
    assert out.expired == (("t", 0), ("t", 1)) and out.delete_group
    assert "Empty for 600.0 s" in out.reason and "offsets.retention.minutes = 10" in out.reason


def test_an_active_group_keeps_what_it_subscribes_to_and_loses_the_rest_by_commit_time():
    offsets = {("in", 0): Stored(0), ("old", 0): Stored(0), ("old", 1): Stored(RET)}
    stable = classic("Stable", subscribed=frozenset({"in"}))
    out = expire(stable, offsets, (), RET, RET)
    assert out.expired == (("old", 0),) and not out.delete_group
    assert "no member subscribes" in out.reason and "2 offsets kept" in out.reason
    # rebalancing, or another protocol type: nothing expires
    for view in (classic("PreparingRebalance"), classic("CompletingRebalance"),
                 classic("Stable", protocol_type="connect")):
        assert basis_of(view) is Basis.NONE and not expire(view, offsets, (), 100 * RET, RET).changes


def test_standalone_commits_expire_by_their_commit_time():
    view = classic(protocol_type=None, since=None)
    offsets = {("t", 0): Stored(0), ("t", 1): Stored(3 * MIN)}
    out = expire(view, offsets, (), RET, RET)
    assert out.expired == (("t", 0),) and not out.delete_group and "without group membership" in out.reason
    out = expire(view, offsets, (), 3 * MIN + RET, RET)
    assert out.expired == (("t", 0), ("t", 1)) and out.delete_group


def test_consumer_groups_go_by_commit_time_and_share_groups_never_expire():
    offsets = {("a", 0): Stored(0), ("b", 0): Stored(0)}
    live = GroupView(CONSUMER, "Stable", subscribed=frozenset({"a"}))
    assert expire(live, offsets, (), RET, RET).expired == (("b", 0),)
    assert expire(GroupView(CONSUMER, "Empty"), offsets, (), RET, RET).delete_group
    assert not expire(GroupView(SHARE, "Empty"), offsets, (), 100 * RET, RET).changes


def test_pending_transactional_offsets_hold_their_partition_and_the_group():
    offsets = {("t", 0): Stored(0), ("t", 1): Stored(0)}
    out = expire(classic(), offsets, [("t", 1)], RET, RET)
    assert out.expired == (("t", 0),) and not out.delete_group
    out = expire(classic(), {}, [("t", 1)], RET, RET)
    assert not out.changes


def test_an_empty_group_without_offsets_goes_at_the_next_check_and_an_old_file_counts_from_the_commit():
    assert expire(classic(since=RET), {}, (), RET, RET).delete_group  # as Apache: nothing to keep it
    unknown = classic(since=None)  # Empty, but written before the time it emptied was kept
    assert expire(unknown, {("t", 0): Stored(0)}, (), RET, RET).expired == (("t", 0),)


def test_a_commits_own_retention_wins():
    offsets = {("t", 0): Stored(commit_ms=0, expire_ms=MIN)}
    assert expire(classic("Stable"), offsets, (), MIN, RET).expired == (("t", 0),)
    assert not expire(classic(since=0), offsets, (), MIN - 1, RET).changes


VIEWS = st.builds(
    GroupView,
    kind=st.sampled_from([CLASSIC, CONSUMER, SHARE]),
    state=st.sampled_from(["Empty", "Stable", "PreparingRebalance", "CompletingRebalance", "Assigning"]),
    protocol_type=st.sampled_from([None, "consumer", "connect"]),
    empty_since_ms=st.none() | st.integers(0, 100 * MIN),
    subscribed=st.frozensets(st.sampled_from("abc")),
)
TPS = st.tuples(st.sampled_from("abcd"), st.integers(0, 3))
EXPIRES = st.sampled_from([-1]) | st.integers(0, 200 * MIN)
OFFSETS = st.dictionaries(TPS, st.builds(Stored, st.integers(0, 100 * MIN), EXPIRES))


@given(VIEWS, OFFSETS, st.sets(TPS), st.integers(0, 300 * MIN), st.integers(1, 100 * MIN))
def test_what_expires_is_a_subset_never_subscribed_never_pending_and_only_empty_groups_go(view, offsets, pending, now,
                                                                                         retention):
    out = expire(view, offsets, pending, now, retention)
    assert set(out.expired) <= set(offsets)
    assert not any(tp[0] in view.subscribed or tp in pending for tp in out.expired)
    if out.delete_group:
        assert view.empty and not pending and set(out.expired) == set(offsets)
    if view.kind == SHARE or basis_of(view) is Basis.NONE:
        assert not out.changes
    assert bool(out.reason) == out.changes


@given(VIEWS, OFFSETS, st.sets(TPS), st.integers(0, 300 * MIN), st.integers(0, 300 * MIN), st.integers(1, 100 * MIN))
def test_once_expired_an_offset_stays_expired_later(view, offsets, pending, now, later, retention):
    early, late = sorted((now, later))
    before = set(expire(view, offsets, pending, early, retention).expired)
    assert before <= set(expire(view, offsets, pending, late, retention).expired)


@given(VIEWS, OFFSETS, st.integers(0, 300 * MIN), st.integers(1, 100 * MIN))
def test_a_longer_retention_never_expires_more(view, offsets, now, retention):
    short = set(expire(view, offsets, (), now, retention).expired)
    assert set(expire(view, offsets, (), now, retention * 2).expired) <= short


def test_the_time_a_classic_group_emptied_is_on_file_and_restored():
    from kaas.domain.groups.classic.group import Group, GroupState

    g = Group("g", now_ms=0, initial_rebalance_delay_ms=0)
    g.join(10, "", None, "c", "h", 6_000, 6_000, "consumer", [("range", b"")], False, "j")
    (member,) = g.members
    g.sync(11, member, None, 1, [(member, b"")], "s")
    g.leave(500, [(member, None)])
    assert g.state is GroupState.EMPTY and g.snapshot(900)["since_ms"] == 500
    restored = Group.restore("g", g.snapshot(900), now_ms=10_000)
    assert restored.state_since_ms == 500 and restored.protocol_type == "consumer" and restored.generation_id == 2
    old_file = {"state": "Empty", "generation": 2, "protocol_type": "consumer"}  # before since_ms was kept
    assert Group.restore("g", old_file, now_ms=10_000).state_since_ms == 10_000
    ahead = {**old_file, "since_ms": 20_000}  # a writer's clock ahead of ours: not in our future
    assert Group.restore("g", ahead, now_ms=10_000).state_since_ms == 10_000
