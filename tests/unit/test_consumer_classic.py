"""KIP-848's online migration, pure (kaas.domain.groups.consumer.classic_members): classic members inside
a consumer group (JoinGroup as a full heartbeat, SyncGroup, Heartbeat's
REBALANCE_IN_PROGRESS, LeaveGroup), the conversions both ways, and a property: in any mix
of classic and consumer-protocol members joining, leaving and reconciling, no partition
is held by two members and every member's epoch only rises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as E

from kaas.domain.groups.classic.group import Group
from kaas.domain.groups.consumer import classic_members as cc
from kaas.domain.groups.consumer.group import ConsumerGroup, GroupConfig, Heartbeat, TopicImage, TopicInfo
from kaas.domain.groups.consumer.member import MemberState

CONFIG = GroupConfig(session_timeout_ms=45_000, assignors=("uniform", "range"))
IMG = TopicImage.of(1, [TopicInfo("id-t", "t", 6)])
PROTOS = (("cooperative-sticky", b"\x00\x01sub"),)


def cjoin(member: str, owned: dict[str, set[int]] | None = None, *, instance: str | None = None,
          protocols: tuple[tuple[str, bytes], ...] = PROTOS) -> cc.ClassicJoin:
    return cc.ClassicJoin(member, instance, "client", "/127.0.0.1", 6000, 30_000, "consumer", protocols, ("t",),
                          {k: frozenset(v) for k, v in (owned or {}).items()})


def modern_join(g: ConsumerGroup, member: str, now: int = 0) -> int:
    r = g.heartbeat(Heartbeat(member, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned=()),
                    now, IMG, CONFIG)
    assert r.error_code == E.none
    return r.member_epoch


def held(g: ConsumerGroup) -> dict[str, set[int]]:
    return {mid: {p for ps in m.assigned.values() for p in ps} | {p for ps in m.pending_revocation.values()
                                                                   for p in ps}
            for mid, m in g.members.items()}


def test_policies():
    assert cc.upgrade_enabled("bidirectional") and cc.downgrade_enabled("BIDIRECTIONAL")
    assert cc.upgrade_enabled("upgrade") and not cc.downgrade_enabled("upgrade")
    assert cc.downgrade_enabled("downgrade") and not cc.upgrade_enabled("downgrade")
    assert not cc.upgrade_enabled("disabled") and not cc.downgrade_enabled("disabled")


def test_upgrade_keeps_each_classic_members_partitions_at_the_generation():
    members = [cc.ClassicMember("a", None, "c", "h", 6000, 30_000, PROTOS, ("t",), None, {"t": frozenset({0, 1, 2})}),
               cc.ClassicMember("b", "i-b", "c", "h", 6000, 30_000, PROTOS, ("t",), None,
                                {"t": frozenset({3, 4, 5}), "gone": frozenset({0})}),
               cc.ClassicMember("c", None, "c", "h", 6000, 30_000, PROTOS, ("t",), None, None)]
    g = ConsumerGroup.restore("g", cc.upgrade_snapshot(members, 7, IMG), now_ms=0, session_timeout_ms=45_000)
    assert (g.group_epoch, g.assignment_epoch) == (7, 7)
    assert held(g) == {"a": {0, 1, 2}, "b": {3, 4, 5}, "c": set()}  # a deleted topic is dropped
    assert all(m.member_epoch == 7 and m.classic is not None for m in g.members.values())
    assert g.static_member_id("i-b") == "b"
    g.check_invariants()


def test_a_new_member_waits_for_the_classic_member_to_revoke_by_rejoining():
    members = [cc.ClassicMember("a", None, "c", "h", 6000, 30_000, PROTOS, ("t",), None,
                                {"t": frozenset(range(6))})]
    g = ConsumerGroup.restore("g", cc.upgrade_snapshot(members, 3, IMG), now_ms=0, session_timeout_ms=45_000)
    r = g.heartbeat(Heartbeat("n", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned=()),
                    0, IMG, CONFIG)
    assert r.error_code == E.none and not any(r.assignment.values())  # all six still held by "a"
    assert g.members["n"].state is MemberState.UNRELEASED_PARTITIONS
    # the classic member learns of the rebalance from its Heartbeat, and joins again
    assert cc.heartbeat(g, "a", None, 3, 10) is E.rebalance_in_progress
    res = cc.join(g, cjoin("a", {"t": set(range(6))}), 20, IMG, CONFIG, lambda: "x")
    assert res.error_code == E.none and res.generation_id == 3  # revocation first
    assert g.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    code, m = cc.sync(g, "a", None, 3, "consumer", "cooperative-sticky")
    assert code == E.none and m is not None
    keep = {p for ps in m.assigned.values() for p in ps}
    assert len(keep) == 3
    # it revoked the rest (cooperative), and joins with what it kept
    res = cc.join(g, cjoin("a", {"t": keep}), 30, IMG, CONFIG, lambda: "x")
    assert res.generation_id == g.group_epoch
    r = g.heartbeat(Heartbeat("n", g.members["n"].member_epoch, owned=()), 40, IMG, CONFIG)
    assert {p for ps in r.assignment.values() for p in ps} == set(range(6)) - keep
    g.check_invariants()


def test_sync_and_heartbeat_refusals():
    members = [cc.ClassicMember("a", "i-a", "c", "h", 6000, 30_000, PROTOS, ("t",), None, {"t": frozenset({0})})]
    g = ConsumerGroup.restore("g", cc.upgrade_snapshot(members, 2, IMG), now_ms=0, session_timeout_ms=45_000)
    modern_join(g, "n")
    assert cc.sync(g, "ghost", None, 2, None, None)[0] is E.unknown_member_id
    assert cc.sync(g, "other", "i-a", 2, None, None)[0] is E.fenced_instance_id
    assert cc.sync(g, "a", "i-a", 1, None, None)[0] is E.illegal_generation
    assert cc.sync(g, "a", "i-a", 2, "connect", None)[0] is E.inconsistent_group_protocol
    assert cc.sync(g, "a", "i-a", 2, None, "range")[0] is E.inconsistent_group_protocol
    assert cc.sync(g, "a", "i-a", 2, None, None)[0] is E.rebalance_in_progress  # the group epoch moved on
    assert cc.sync(g, "n", None, 1, None, None)[0] is E.unknown_member_id  # not a classic member
    assert cc.heartbeat(g, "a", "i-a", 5, 0) is E.illegal_generation
    assert cc.join(g, cjoin("z", protocols=(("range", b"\x00\x00"),)), 0, IMG, CONFIG,
                   lambda: "z").error_code is E.inconsistent_group_protocol


def test_leave_by_member_and_by_instance():
    members = [cc.ClassicMember("a", None, "c", "h", 6000, 30_000, PROTOS, ("t",), None, {"t": frozenset({0})}),
               cc.ClassicMember("b", "i-b", "c", "h", 6000, 30_000, PROTOS, ("t",), None, {"t": frozenset({1})})]
    g = ConsumerGroup.restore("g", cc.upgrade_snapshot(members, 2, IMG), now_ms=0, session_timeout_ms=45_000)
    out = cc.leave(g, [("a", None), ("", "i-b"), ("ghost", None), ("x", "i-zz")])
    assert [code for _, _, code in out] == [E.none, E.none, E.unknown_member_id, E.unknown_member_id]
    assert g.is_empty() and g.group_epoch == 4


def test_downgrade_is_a_classic_group_in_a_rebalance_at_the_group_epoch():
    members = [cc.ClassicMember("a", None, "c", "h", 6000, 30_000, PROTOS, ("t",), None, {"t": frozenset({0, 1})})]
    g = ConsumerGroup.restore("g", cc.upgrade_snapshot(members, 2, IMG), now_ms=0, session_timeout_ms=45_000)
    modern_join(g, "n")
    encoded = []

    def encode(parts, version):
        encoded.append((sorted((t, sorted(ps)) for t, ps in parts), version))
        return b"\x00\x01"

    snap = cc.downgrade_snapshot(g, "n", IMG, 100, encode, lambda b: 1)
    assert snap["generation"] == g.group_epoch and snap["state"] == "PreparingRebalance"
    assert encoded == [([("t", [0, 1])], 1)]
    group = Group.restore("g", snap, now_ms=100, initial_rebalance_delay_ms=0, min_session_timeout_ms=1000,
                          max_session_timeout_ms=60_000)
    assert group.generation_id == g.group_epoch and set(group.members) == {"a"}
    # a group with a member of the new protocol left cannot become classic
    try:
        cc.downgrade_snapshot(g, None, IMG, 100, encode, lambda b: 1)
    except ValueError:
        pass
    else:
        raise AssertionError("downgraded with a consumer-protocol member")


OPS = st.lists(st.tuples(st.sampled_from(["cjoin", "mjoin", "cbeat", "mbeat", "leave"]),
                         st.integers(0, 3), st.booleans()), max_size=40)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_no_partition_is_held_twice_in_a_mixed_group(ops):
    members = [cc.ClassicMember("c0", None, "c", "h", 6000, 30_000, PROTOS, ("t",), None, {"t": frozenset({0, 1})})]
    g = ConsumerGroup.restore("g", cc.upgrade_snapshot(members, 1, IMG), now_ms=0, session_timeout_ms=45_000)
    epochs: dict[str, int] = {}
    for now, (op, i, revoke) in enumerate(ops, start=1):
        mid = f"{'c' if op.startswith('c') else 'm'}{i}"
        m = g.members.get(mid)
        if op == "cjoin":
            owned = {} if m is None else {k: set(v) for k, v in m.assigned.items()}
            if m is not None and not revoke:
                owned = {k: set(v) for k, v in m.assigned.items()} | {
                    k: set(v) for k, v in m.pending_revocation.items()}
            names = {"id-t": "t"}
            cc.join(g, cjoin(mid, {names[k]: v for k, v in owned.items()}), now, IMG, CONFIG, lambda: mid)
        elif op == "mjoin" and m is None:
            modern_join(g, mid, now)
        elif op == "cbeat" and m is not None and m.classic is not None:
            cc.heartbeat(g, mid, None, m.member_epoch, now)
        elif op == "mbeat" and m is not None and m.classic is None:
            owned = m.assigned if revoke else {**m.assigned, **m.pending_revocation}
            g.heartbeat(Heartbeat(mid, m.member_epoch, owned=tuple((k, tuple(sorted(v))) for k, v in owned.items())),
                        now, IMG, CONFIG)
        elif op == "leave" and m is not None:
            g.remove_member(mid)
            epochs.pop(mid, None)
        g.check_invariants()
        for x, mm in g.members.items():
            assert mm.member_epoch >= epochs.get(x, -1)
            epochs[x] = mm.member_epoch
