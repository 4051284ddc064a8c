"""Classic consumer group machine (kaas.domain.groups.classic.group): event scripts plus a stateful model."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from kio.schema.errors import ErrorCode as E

from kaas.domain.groups.classic.group import (
    Group,
    GroupState,
    JoinMember,
    JoinReply,
    LeaveMemberResult,
    SyncReply,
    restored_session_deadline,
)
from kaas.domain.groups.classic.records import VALID_PREVIOUS
from kaas.domain.groups.transitions import IllegalTransition

SESSION = 10_000
REBALANCE = 30_000
PROTOS = (("range", b"r-meta"), ("roundrobin", b"rr-meta"))


def new_group(delay: int = 0, **kw: object) -> Group:
    counter = itertools.count(1)
    return Group("g", initial_rebalance_delay_ms=delay, id_factory=lambda: str(next(counter)), **kw)


_keys = itertools.count(1000)


def join(
    g: Group,
    now: int,
    member_id: str = "",
    *,
    client: str = "c",
    instance: str | None = None,
    protocols: tuple[tuple[str, bytes], ...] = PROTOS,
    ptype: str = "consumer",
    session: int = SESSION,
    rebalance: int = REBALANCE,
    require: bool = True,
    key: object | None = None,
    skip_ok: bool = False,
) -> list:
    return g.join(
        now, member_id, instance, client, "/10.0.0.1", session, rebalance, ptype, protocols,
        require, key if key is not None else next(_keys), skip_assignment_ok=skip_ok,
    )


def only(effects: list):
    assert len(effects) == 1, effects
    return effects[0]


def by_key(effects: list) -> dict:
    out = {e.request_key: e for e in effects}
    assert len(out) == len(effects), "a request answered twice in one batch"
    return out


def two_step(g: Group, now: int, client: str = "c", **kw: object) -> tuple[str, list]:
    """KIP-394: MEMBER_ID_REQUIRED, then the real join. Returns (member id, effects)."""
    r = only(join(g, now, client=client, **kw))
    assert r.error_code is E.member_id_required and r.generation_id == -1
    return r.member_id, join(g, now, r.member_id, client=client, **kw)


def stable_group(n: int, session: int = SESSION) -> tuple[Group, list[str]]:
    """n dynamic members c0..; Stable at generation 1 (all at t=0); member i assigned A<i>."""
    g = new_group()
    ids = [only(join(g, 0, client=f"c{i}", session=session)).member_id for i in range(n)]  # all pending
    effects = []
    for i, mid in enumerate(ids):
        effects += join(g, 0, mid, client=f"c{i}", key=("setup", i), session=session)
    replies = by_key(effects)  # pending members held the phase until the last one joined
    assert {r.generation_id for r in replies.values()} == {1} and len(replies) == n
    out = g.sync(0, ids[0], None, 1, {mid: f"A{i}".encode() for i, mid in enumerate(ids)}, "s0")
    assert len(out) == 1
    for i, mid in enumerate(ids[1:], start=1):
        out += g.sync(0, mid, None, 1, {}, f"s{i}")
    assert g.state is GroupState.STABLE
    return g, ids


# ---------------------------------------------------------------------------- join


def test_two_step_join_single_member_completes_at_once():
    g = new_group()
    r = only(join(g, 0, client="app"))
    assert r == JoinReply(r.request_key, E.member_id_required, -1, None, None, "", "app-1", ())
    assert g.pending_member_ids == {"app-1"} and g.state is GroupState.EMPTY
    r = only(join(g, 5, "app-1", client="app", key="k"))
    assert r.request_key == "k" and r.error_code is E.none
    assert (r.generation_id, r.protocol_type, r.protocol_name, r.leader, r.member_id) == (
        1, "consumer", "range", "app-1", "app-1",
    )
    assert r.members == (JoinMember("app-1", None, b"r-meta"),)
    assert g.state is GroupState.COMPLETING_REBALANCE and not g.pending_member_ids
    # sync -> Stable
    s = only(g.sync(6, "app-1", None, 1, {"app-1": b"A"}, "s"))
    assert s == SyncReply("s", E.none, "consumer", "range", b"A")
    assert g.state is GroupState.STABLE


def test_old_versions_join_without_member_id_step():
    g = new_group()
    r = only(join(g, 0, client="old", require=False))
    assert r.error_code is E.none and r.member_id == "old-1" and r.generation_id == 1


def test_unknown_member_id_on_join():
    g = new_group()
    assert only(join(g, 0, "ghost")).error_code is E.unknown_member_id


def test_three_members_leader_gets_members_followers_none():
    g = new_group(delay=3000)
    ids = []
    for i in range(3):
        r = only(join(g, i, client=f"c{i}"))
        ids.append(r.member_id)
    keys = {}
    for i, mid in enumerate(ids):
        keys[mid] = ("j", i)
        assert join(g, 10 * i, mid, client=f"c{i}", key=("j", i)) == []
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.next_deadline() == 3000
    assert g.tick(2999) == []
    # members were added during the initial delay: extended once by the delay
    assert g.tick(3000) == [] and g.next_deadline() == 6000
    replies = by_key(g.tick(6000))
    assert set(replies) == set(keys.values())
    leader = replies[keys[ids[0]]]
    assert leader.leader == ids[0] and leader.generation_id == 1
    assert [m.member_id for m in leader.members] == ids
    for mid in ids[1:]:
        r = replies[keys[mid]]
        assert r.members == () and r.leader == ids[0] and r.member_id == mid
        assert r.generation_id == 1 and r.protocol_name == "range"


def test_sync_distributes_assignments_and_followers_wait_for_leader():
    g = new_group(delay=3000)
    ids = [only(join(g, 0, client=f"c{i}")).member_id for i in range(3)]
    for i, mid in enumerate(ids):
        join(g, 0, mid, client=f"c{i}")
    g.tick(3000)  # extended: members kept arriving during the delay
    g.tick(6000)
    assert g.state is GroupState.COMPLETING_REBALANCE
    # followers park
    assert g.sync(1, ids[1], None, 1, {}, "s1") == []
    assert g.sync(1, ids[2], None, 1, {}, "s2") == []
    assert g.heartbeat(2, ids[1], None, 1) is E.none
    out = by_key(g.sync(3, ids[0], None, 1, {ids[0]: b"a0", ids[1]: b"a1", "stranger": b"x"}, "s0"))
    assert {k: r.assignment for k, r in out.items()} == {"s0": b"a0", "s1": b"a1", "s2": b""}
    assert all(r.error_code is E.none and r.protocol_name == "range" for r in out.values())
    assert g.state is GroupState.STABLE
    # a late sync in Stable gets its assignment at once
    assert only(g.sync(4, ids[1], None, 1, {}, "again")).assignment == b"a1"
    d = g.describe()
    assert d["state"] == "Stable" and d["protocol"] == "range" and d["protocol_type"] == "consumer"
    assert [m["assignment"] for m in d["members"]] == [b"a0", b"a1", b""]
    assert d["members"][0]["metadata"] == b"r-meta" and d["members"][0]["client_id"] == "c0"


def test_second_parked_sync_wins_and_a_leaving_member_releases_its_sync():
    g = new_group(delay=3000)
    ids = [only(join(g, 0, client=f"c{i}")).member_id for i in range(3)]
    for i, mid in enumerate(ids):
        join(g, 0, mid, client=f"c{i}")
    g.tick(3000)
    g.tick(6000)
    assert g.sync(6001, ids[1], None, 1, {}, "a") == []
    r = only(g.sync(6002, ids[1], None, 1, {}, "b"))
    assert r.request_key == "a" and r.error_code is E.rebalance_in_progress
    assert g.sync(6003, ids[2], None, 1, {}, "c") == []
    res = g.leave(6004, [(ids[1], None)])
    out = by_key(list(res.effects))
    assert out["b"].error_code is E.unknown_member_id  # the leaver's own parked sync
    assert out["c"].error_code is E.rebalance_in_progress  # the round is void
    assert g.state is GroupState.PREPARING_REBALANCE
    assert all(m.assignment is None for m in g.members.values())
    g.mark_dead(6005)
    assert only(g.sync(6006, ids[0], None, 1, {}, "d")).error_code is E.coordinator_not_available


def test_stable_group_helper():
    g, ids = stable_group(3)
    assert g.generation_id == 1 and g.leader_id == ids[0]
    assert [m.assignment for m in g.members.values()] == [b"A0", b"A1", b"A2"]


def test_sync_errors():
    g, ids = stable_group(2)
    assert only(g.sync(0, "ghost", None, 1, {}, "x")).error_code is E.unknown_member_id
    assert only(g.sync(0, ids[1], None, 0, {}, "x")).error_code is E.illegal_generation
    assert only(g.sync(0, ids[1], None, 1, {}, "x", protocol_type="connect")).error_code is (
        E.inconsistent_group_protocol
    )
    assert only(g.sync(0, ids[1], None, 1, {}, "x", protocol_name="sticky")).error_code is (
        E.inconsistent_group_protocol
    )
    join(g, 1, ids[0], client="c0")  # leader rejoin -> PreparingRebalance
    assert only(g.sync(1, ids[1], None, 1, {}, "x")).error_code is E.rebalance_in_progress


def test_member_leaves_and_rest_rejoin():
    g, ids = stable_group(3)
    res = g.leave(100, [(ids[2], None)])
    assert res.error_code is E.none and res.effects == ()
    assert res.members == (LeaveMemberResult(ids[2], None, E.none),)
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.heartbeat(101, ids[0], None, 1) is E.rebalance_in_progress
    assert g.heartbeat(101, ids[2], None, 1) is E.unknown_member_id
    assert join(g, 102, ids[0], client="c0", key="j0") == []
    replies = by_key(join(g, 103, ids[1], client="c1", key="j1"))
    assert replies["j0"].generation_id == 2
    assert [m.member_id for m in replies["j0"].members] == ids[:2]
    assert replies["j1"].members == () and replies["j1"].leader == ids[0]
    assert g.state is GroupState.COMPLETING_REBALANCE


def test_leave_unknown_and_last_member_empties_group():
    g, ids = stable_group(1)
    res = g.leave(5, [("ghost", None), (ids[0], None)])
    assert [m.error_code for m in res.members] == [E.unknown_member_id, E.none]
    assert g.state is GroupState.EMPTY and g.generation_id == 2 and g.leader_id is None
    assert g.next_deadline() is None


def test_leave_answers_parked_join_and_completes_for_the_rest():
    g, ids = stable_group(2)
    assert join(g, 1, ids[0], client="c0", key="j0") == []
    res = g.leave(2, [(ids[1], None)])
    r = only(list(res.effects))
    assert r.request_key == "j0" and r.error_code is E.none and r.generation_id == 2


def test_member_vanishing_mid_rebalance_is_dropped_at_rebalance_timeout():
    g, ids = stable_group(3)
    t0 = 1_000
    assert join(g, t0, ids[0], client="c0", key="j0") == []
    assert join(g, t0, ids[1], client="c1", key="j1") == []
    # c2 keeps heartbeating (stuck in its poll loop) but never rejoins
    for t in range(t0, t0 + REBALANCE, SESSION // 2):
        assert g.heartbeat(t, ids[2], None, 1) is E.rebalance_in_progress
        assert g.tick(t) == []
    replies = by_key(g.tick(t0 + REBALANCE))
    assert set(replies) == {"j0", "j1"}
    assert [m.member_id for m in replies["j0"].members] == ids[:2]
    assert ids[2] not in g.members and g.generation_id == 2
    assert g.heartbeat(t0 + REBALANCE, ids[2], None, 1) is E.unknown_member_id


def test_dead_member_session_expiry_completes_rebalance_early():
    g, ids = stable_group(2)
    join(g, 1000, ids[0], client="c0", key="j0")
    # ids[1] last heartbeat was at 0: its session ends at SESSION, before the rebalance timeout
    assert g.next_deadline() == SESSION
    r = only(g.tick(SESSION))
    assert r.request_key == "j0" and r.generation_id == 2 and len(r.members) == 1


def test_session_timeout_of_stable_member():
    g, ids = stable_group(2)
    assert g.heartbeat(4_000, ids[0], None, 1) is E.none
    assert g.next_deadline() == SESSION  # ids[1]'s session
    assert g.tick(SESSION - 1) == []
    assert g.tick(SESSION) == []
    assert ids[1] not in g.members and g.state is GroupState.PREPARING_REBALANCE
    assert g.heartbeat(SESSION, ids[0], None, 1) is E.rebalance_in_progress
    assert only(join(g, SESSION + 1, ids[0], client="c0")).generation_id == 2


def test_member_that_never_syncs_is_removed_after_rebalance_timeout():
    g = new_group(delay=3000)
    ids = [only(join(g, 0, client=f"c{i}", session=60_000)).member_id for i in range(2)]
    for i, mid in enumerate(ids):
        join(g, 0, mid, client=f"c{i}", session=60_000)
    g.tick(3000)
    g.tick(6000)
    assert g.state is GroupState.COMPLETING_REBALANCE
    assert g.sync(6001, ids[1], None, 1, {}, "s1") == []
    # the leader never syncs; the parked follower keeps its session alive
    replies = by_key(g.tick(6000 + REBALANCE))
    assert replies["s1"].error_code is E.rebalance_in_progress
    assert list(g.members) == [ids[1]] and g.leader_id == ids[1]
    assert g.state is GroupState.PREPARING_REBALANCE


def test_replaced_parked_join_is_answered_with_rebalance_in_progress():
    g, ids = stable_group(2)
    assert join(g, 1, ids[0], client="c0", key="old") == []
    r = only(join(g, 2, ids[0], client="c0", key="new"))
    assert r.request_key == "old" and r.error_code is E.rebalance_in_progress
    assert set(by_key(join(g, 3, ids[1], client="c1", key="j1"))) == {"new", "j1"}
    assert g.members[ids[0]].join_key is None


def test_inconsistent_group_protocol():
    g, ids = stable_group(1)
    assert only(join(g, 0, ptype="connect")).error_code is E.inconsistent_group_protocol
    r = only(join(g, 0, protocols=(("sticky", b""),)))
    assert r.error_code is E.inconsistent_group_protocol
    # the sole member cannot swap its protocols wholesale either (Apache rule)
    assert only(join(g, 0, ids[0], protocols=(("sticky", b""),))).error_code is (
        E.inconsistent_group_protocol
    )
    assert only(new_group().join(0, "", None, "c", "h", SESSION, REBALANCE, "", PROTOS, True, 1)
                ).error_code is E.inconsistent_group_protocol
    assert only(join(new_group(), 0, protocols=())).error_code is E.inconsistent_group_protocol


def test_invalid_session_timeout():
    g = new_group()
    assert only(join(g, 0, session=5_999)).error_code is E.invalid_session_timeout
    assert only(join(g, 0, session=1_800_001)).error_code is E.invalid_session_timeout
    assert not g.pending_member_ids


def test_protocol_selection_by_votes():
    g = new_group(delay=3000)
    prefs = [
        (("roundrobin", b"1"), ("range", b"1")),
        (("range", b"2"), ("roundrobin", b"2"), ("sticky", b"2")),
        (("range", b"3"), ("roundrobin", b"3")),
    ]
    for i, p in enumerate(prefs):
        join(g, 0, client=f"c{i}", protocols=p, require=False, key=("j", i))
    replies = by_key(g.tick(3000) + g.tick(6000))
    assert {r.protocol_name for r in replies.values()} == {"range"}
    assert [m.metadata for m in replies[("j", 0)].members] == [b"1", b"2", b"3"]


def test_compatible_protocol_subset_joins():
    g, ids = stable_group(1)
    r = only(join(g, 0, client="x", protocols=(("roundrobin", b"x"),)))
    assert r.error_code is E.member_id_required


# ---------------------------------------------------------------------------- KIP-394


def test_pending_member_expires_after_session_timeout():
    g = new_group()
    mid = only(join(g, 0)).member_id
    assert g.next_deadline() == SESSION
    assert g.tick(SESSION) == [] and not g.pending_member_ids
    assert only(join(g, SESSION + 1, mid)).error_code is E.unknown_member_id


def test_pending_member_holds_join_phase_until_it_joins():
    g, ids = stable_group(1)
    pending = only(join(g, 0, client="new")).member_id
    # the leader rejoins: not complete while a pending member may still come
    assert join(g, 1, ids[0], client="c0", key="j0") == []
    replies = by_key(join(g, 2, pending, client="new", key="jn"))
    assert set(replies) == {"j0", "jn"} and len(replies["j0"].members) == 2


def test_pending_member_may_leave():
    g, ids = stable_group(1)
    pending = only(join(g, 0, client="new")).member_id
    assert join(g, 1, ids[0], client="c0", key="j0") == []
    res = g.leave(2, [(pending, None)])
    assert res.members[0].error_code is E.none and only(list(res.effects)).request_key == "j0"


# ---------------------------------------------------------------------------- static


def static_stable() -> tuple[Group, str, str]:
    g = new_group()
    r = only(join(g, 0, client="c", instance="i1", key="a"))
    assert r.error_code is E.none and r.member_id == "i1-1"  # no MEMBER_ID_REQUIRED step
    dyn, eff = two_step(g, 1, client="d")
    join(g, 1, "i1-1", client="c", instance="i1", key="b")
    g.sync(1, "i1-1", "i1", 2, {"i1-1": b"S", dyn: b"D"}, "s")
    g.sync(1, dyn, None, 2, {}, "s2")
    assert g.state is GroupState.STABLE
    return g, "i1-1", dyn


def test_static_rejoin_in_stable_replaces_member_without_rebalance():
    g, old, dyn = static_stable()
    r = only(join(g, 10, client="c", instance="i1", key="re"))
    new = r.member_id
    assert new != old and r.error_code is E.none and r.generation_id == 2
    assert r.leader == old and r.members == ()  # the pre-replacement leader (Apache)
    assert g.state is GroupState.STABLE and g.leader_id == new
    assert g.static_member_id("i1") == new
    # the old incarnation is fenced everywhere
    assert g.heartbeat(11, old, "i1", 2) is E.fenced_instance_id
    assert only(g.sync(11, old, "i1", 2, {}, "x")).error_code is E.fenced_instance_id
    assert g.validate_commit(old, "i1", 2) is E.fenced_instance_id
    assert only(join(g, 11, old, instance="i1")).error_code is E.fenced_instance_id
    assert g.leave(11, [(old, "i1")]).members[0].error_code is E.fenced_instance_id
    # the new one keeps the assignment
    assert g.heartbeat(12, new, "i1", 2) is E.none
    assert only(g.sync(12, new, "i1", 2, {}, "y")).assignment == b"S"
    assert g.validate_commit(new, "i1", 2) is E.none


def test_static_leader_rejoin_v9_leads_and_skips_the_assignment():
    """JoinGroup v9 (KIP-814): the rejoined static leader is told it leads, with every
    member's metadata, and to skip the assignment; the group stays Stable and SyncGroup
    still hands it its old assignment (before v9: the test above)."""
    g, old, dyn = static_stable()
    r = only(join(g, 10, client="c", instance="i1", key="re", skip_ok=True))
    new = r.member_id
    assert r.error_code is E.none and r.generation_id == 2 and g.state is GroupState.STABLE
    assert (r.leader, r.skip_assignment) == (new, True)
    assert {m.member_id for m in r.members} == {new, dyn}
    assert only(g.sync(12, new, "i1", 2, {}, "y")).assignment == b"S"
    assert g.state is GroupState.STABLE and g.generation_id == 2


def test_static_rejoin_with_new_protocol_choice_rebalances():
    g, old, dyn = static_stable()
    # dyn still supports both; i1 now only roundrobin -> the selected protocol changes
    assert join(g, 10, client="c", instance="i1", protocols=(("roundrobin", b"x"),), key="re") == []
    assert g.state is GroupState.PREPARING_REBALANCE
    replies = by_key(join(g, 11, dyn, client="d", key="jd"))
    assert {r.protocol_name for r in replies.values()} == {"roundrobin"}


def test_static_replacement_during_rebalance_fences_old_parked_join():
    g, old, dyn = static_stable()
    assert join(g, 10, old, client="c", instance="i1", key="j-old") == []  # leader rejoin
    assert g.state is GroupState.PREPARING_REBALANCE
    eff = by_key(join(g, 11, client="c", instance="i1", key="j-new"))
    assert eff["j-old"].error_code is E.fenced_instance_id
    assert "j-new" not in eff
    replies = by_key(join(g, 12, dyn, client="d", key="jd"))
    new = g.static_member_id("i1")
    assert replies["j-new"].member_id == new and replies["j-new"].generation_id == 3
    assert replies["j-new"].leader == new and len(replies["j-new"].members) == 2


def test_static_replacement_during_completing_fences_parked_sync_and_rebalances():
    g = new_group()
    d = only(join(g, 0, client="d", require=False)).member_id  # generation 1, leader d
    assert join(g, 0, client="c", instance="i1", key="ji") == []
    assert set(by_key(join(g, 0, d, client="d", key="jd"))) == {"ji", "jd"}
    old = g.static_member_id("i1")
    assert g.state is GroupState.COMPLETING_REBALANCE and g.generation_id == 2
    assert g.sync(1, old, "i1", 2, {}, "so") == []  # follower parked, leader not yet synced
    eff = by_key(join(g, 2, client="c", instance="i1", key="jn"))
    assert set(eff) == {"so"} and eff["so"].error_code is E.fenced_instance_id
    assert g.state is GroupState.PREPARING_REBALANCE
    new = g.static_member_id("i1")
    assert new != old and g.members[new].join_key == "jn"
    replies = by_key(join(g, 3, d, client="d", key="jd2"))
    assert set(replies) == {"jn", "jd2"} and replies["jn"].generation_id == 3


def test_static_member_not_rejoining_is_kept_past_rebalance_timeout():
    g = new_group()
    old = only(join(g, 0, client="c", instance="i1", session=100_000)).member_id  # gen 1
    dyn, _ = two_step(g, 0, client="d")
    join(g, 0, old, client="c", instance="i1", session=100_000)  # gen 2
    g.sync(0, old, "i1", 2, {old: b"S", dyn: b"D"}, "s0")
    g.sync(0, dyn, None, 2, {}, "s1")
    assert g.heartbeat(1000, dyn, None, 2) is E.none
    join(g, 1000, dyn, client="d", protocols=(("range", b"changed"),), key="jd")
    r = only(g.tick(1000 + REBALANCE))  # the static member is kept, the rejoined one leads
    assert r.leader == dyn and [m.member_id for m in r.members] == [old, dyn]
    assert old in g.members and g.generation_id == 3
    # it never sends SyncGroup for generation 3: dropped one rebalance timeout later
    t3 = 1000 + REBALANCE
    assert only(g.sync(t3, dyn, None, 3, {old: b"S", dyn: b"D"}, "s2")).assignment == b"D"
    for t in range(t3, t3 + REBALANCE, 5_000):
        assert g.heartbeat(t, dyn, None, 3) is E.none
        assert g.tick(t) == []
    assert g.tick(t3 + REBALANCE) == []
    assert old not in g.members and g.state is GroupState.PREPARING_REBALANCE


def test_silent_static_member_is_removed_when_its_session_ends():
    g, old, dyn = static_stable()
    join(g, 1000, dyn, client="d", protocols=(("range", b"changed"),), key="jd")
    assert g.state is GroupState.PREPARING_REBALANCE
    # the static member is silent; its session (from t=1) ends at 1 + SESSION, before the
    # rebalance timeout, so it is removed then and the phase completes.
    r = only(g.tick(1 + SESSION))
    assert r.request_key == "jd" and len(r.members) == 1 and g.static_member_id("i1") is None


def test_static_leave_by_instance_id_only():
    g, old, dyn = static_stable()
    res = g.leave(5, [("", "i1"), ("", "nobody")])
    assert [m.error_code for m in res.members] == [E.none, E.unknown_member_id]
    assert list(g.members) == [dyn]


# ---------------------------------------------------------------------------- heartbeat


def test_heartbeat_codes_in_each_state():
    g = new_group(delay=3000)
    assert g.heartbeat(0, "ghost", None, 0) is E.unknown_member_id  # Empty
    a = only(join(g, 0, client="a")).member_id
    join(g, 0, a, client="a")
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.heartbeat(1, a, None, 0) is E.rebalance_in_progress
    assert g.heartbeat(1, a, None, 7) is E.illegal_generation
    g.tick(3000)
    assert g.state is GroupState.COMPLETING_REBALANCE
    assert g.heartbeat(3001, a, None, 1) is E.none
    assert g.heartbeat(3001, a, None, 0) is E.illegal_generation
    assert g.heartbeat(3001, "ghost", None, 1) is E.unknown_member_id
    assert g.heartbeat(3001, a, "inst", 1) is E.unknown_member_id
    g.sync(3002, a, None, 1, {a: b""}, "s")
    assert g.state is GroupState.STABLE
    assert g.heartbeat(3003, a, None, 1) is E.none
    g.leave(3004, [(a, None)])
    assert g.state is GroupState.EMPTY
    assert g.heartbeat(3005, a, None, 1) is E.unknown_member_id
    g.mark_dead(3006)
    assert g.heartbeat(3007, a, None, 1) is E.coordinator_not_available


def test_heartbeat_refreshes_session():
    g, ids = stable_group(1)
    for t in range(0, 100_000, SESSION - 1):
        assert g.heartbeat(t, ids[0], None, 1) is E.none
        assert g.tick(t) == []
    assert g.state is GroupState.STABLE


# ---------------------------------------------------------------------------- commits, admin


def test_validate_commit():
    g = new_group()
    assert g.validate_commit("", None, -1) is E.none  # admin / manual assignment
    assert g.validate_commit("x", None, -1) is E.none  # Apache: any member on an Empty group
    assert g.validate_commit("x", None, 3) is E.unknown_member_id
    g, ids = stable_group(2)
    gen = g.generation_id
    assert g.validate_commit(ids[0], None, gen) is E.none
    assert g.validate_commit(ids[0], None, gen - 1) is E.illegal_generation
    assert g.validate_commit("ghost", None, gen) is E.unknown_member_id
    assert g.validate_commit("", None, -1) is E.unknown_member_id  # simple commit, live group
    assert g.validate_txn_commit("", None, -1) is E.none  # TxnOffsetCommit v0-2
    assert g.validate_txn_commit("ghost", None, gen) is E.unknown_member_id
    assert g.validate_txn_commit(ids[0], None, gen + 1) is E.illegal_generation
    # commit refreshes the session when now_ms is given
    assert g.validate_commit(ids[1], None, gen, now_ms=9_000) is E.none
    assert g.members[ids[1]].last_heartbeat_ms == 9_000
    # PreparingRebalance: commits with the old generation still go through
    join(g, 9_001, ids[0], client="c0")
    assert g.validate_commit(ids[1], None, gen) is E.none
    join(g, 9_002, ids[1], client="c1")
    assert g.state is GroupState.COMPLETING_REBALANCE
    assert g.validate_commit(ids[1], None, gen + 1) is E.rebalance_in_progress
    assert g.validate_txn_commit(ids[1], None, gen + 1) is E.none
    g.mark_dead(9_003)
    assert g.validate_commit("", None, -1) is E.coordinator_not_available


def test_delete_check():
    g = new_group(delay=3000)
    assert g.delete_check() is E.none
    mid = only(join(g, 0)).member_id
    assert g.delete_check() is E.none  # a pending member is not a member
    join(g, 0, mid)
    assert g.delete_check() is E.non_empty_group  # PreparingRebalance
    g.tick(3000)
    assert g.delete_check() is E.non_empty_group  # CompletingRebalance
    g.sync(3000, mid, None, 1, {}, "s")
    assert g.delete_check() is E.non_empty_group  # Stable
    g.leave(3001, [(mid, None)])
    assert g.delete_check() is E.none
    assert g.mark_dead(3002) == []
    assert g.delete_check() is E.group_id_not_found and g.state.value == "Dead"
    assert only(join(g, 3003)).error_code is E.coordinator_not_available
    assert g.leave(3003, [("x", None)]).error_code is E.coordinator_not_available


def test_mark_dead_answers_parked_requests():
    g, ids = stable_group(2)
    join(g, 1, ids[0], client="c0", key="j0")
    eff = g.mark_dead(2)
    assert only(eff).request_key == "j0" and eff[0].error_code is E.not_coordinator
    assert g.next_deadline() is None and g.describe()["members"] == []


def test_describe_outside_stable_hides_metadata():
    g = new_group(delay=3000)
    mid = only(join(g, 0, client="c")).member_id
    join(g, 0, mid, client="c")
    d = g.describe()
    assert d["state"] == "PreparingRebalance" and d["protocol"] == ""
    assert d["members"] == [
        {"member_id": mid, "group_instance_id": None, "client_id": "c", "client_host": "/10.0.0.1",
         "metadata": b"", "assignment": b""}
    ]
    assert new_group().describe()["state"] == "Empty"


# ---------------------------------------------------------------------------- initial delay


def test_initial_rebalance_delay_holds_first_generation():
    g = new_group(delay=3000)
    mid = only(join(g, 0)).member_id
    assert join(g, 0, mid, key="j") == []
    assert g.next_deadline() == 3000
    assert g.tick(2999) == []
    r = only(g.tick(3000))  # nobody else came: no extension
    assert r.request_key == "j" and r.generation_id == 1


def test_initial_delay_not_cut_short_when_everyone_joined():
    g = new_group(delay=3000)
    assert join(g, 0, require=False, key="a") == []
    # the only member joined, but the delay still runs (Apache)
    assert g.state is GroupState.PREPARING_REBALANCE and g.next_deadline() == 3000


def test_initial_delay_extends_while_members_arrive_bounded_by_rebalance_timeout():
    g = new_group(delay=3000)
    join(g, 0, require=False, rebalance=7_000, key="a")
    t = 0
    for i in range(10):
        t += 1_000
        eff = join(g, t, require=False, client=f"n{i}", rebalance=7_000, key=("n", i))
        eff += g.tick(t)
        if eff:
            break
    # remaining = 7000 - 3000 = 4000: fire at 3000 (extend 3000 -> 6000, remaining 1000),
    # fire at 6000 (extend min(3000, 1000) -> 7000, remaining 0), complete at 7000.
    assert t == 7_000
    assert {r.generation_id for r in eff} == {1} and len(eff) == 8


def test_all_members_leaving_during_initial_delay_empties_group():
    g = new_group(delay=3000)
    join(g, 0, require=False, key="a")
    res = g.leave(1, [("c-1", None)])
    assert only(list(res.effects)).error_code is E.unknown_member_id
    assert g.state is GroupState.EMPTY and g.next_deadline() is None


# ---------------------------------------------------------------------------- stateful model


@dataclass
class Client:
    instance: str | None
    member_id: str = ""
    generation: int = -1
    members: tuple[str, ...] = ()  # from the last leader JoinGroup response
    session: int = SESSION
    rebalance: int = 20_000
    protocols: tuple[tuple[str, bytes], ...] = PROTOS
    keys: set = field(default_factory=set)


CLIENT_INSTANCES = [None, None, None, "s1", "s2", "s2"]  # two incarnations fight over s2
# Mostly below the session timeouts, so that rebalance/sync timeouts fire before sessions end.
CLIENT_REBALANCE = [8_000, 5_000, 20_000, 6_000, 8_000, 8_000]
PROTOCOL_CHOICES = [
    PROTOS,
    (("roundrobin", b"x"), ("range", b"x")),
    (("range", b"y"),),
    (("sticky", b"z"),),
]
NOT_A_NONE = {
    E.unknown_member_id, E.illegal_generation, E.rebalance_in_progress, E.fenced_instance_id,
}


# ---------------------------------------------------------------------------- transitions

_S = GroupState
APACHE_VALID_PREVIOUS = {  # Apache 4.4 ClassicGroupState.validPreviousStates
    _S.EMPTY: {_S.PREPARING_REBALANCE},
    _S.PREPARING_REBALANCE: {_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY},
    _S.COMPLETING_REBALANCE: {_S.PREPARING_REBALANCE},
    _S.STABLE: {_S.COMPLETING_REBALANCE},
    _S.DEAD: {_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD},
}


def test_the_transition_table_is_apaches():
    assert {s: set(prev) for s, prev in VALID_PREVIOUS.items()} == APACHE_VALID_PREVIOUS


def test_an_illegal_transition_is_refused():
    """A state change outside the table raises an internal error and leaves the group as
    it was: Empty cannot become Stable without a rebalance, nothing leaves Dead."""
    g = new_group()
    with pytest.raises(IllegalTransition) as e:
        g._transition(GroupState.STABLE, 5)
    assert (e.value.kind, e.value.old, e.value.new) == ("classic", "Empty", "Stable")
    assert g.state is GroupState.EMPTY and g.state_since_ms == 0
    g.mark_dead(1)
    with pytest.raises(IllegalTransition):
        g._transition(GroupState.PREPARING_REBALANCE, 2)
    assert g.state is GroupState.DEAD


def test_a_public_operation_that_would_skip_a_phase_is_refused():
    """The check guards every operation: a group wrongly left Stable while its join phase
    runs (a machine bug, forced here) cannot complete the phase into CompletingRebalance."""
    g = new_group(delay=3000)
    join(g, 0, require=False)
    assert g.state is GroupState.PREPARING_REBALANCE
    g._state = GroupState.STABLE
    with pytest.raises(IllegalTransition, match="Stable -> CompletingRebalance"):
        g.tick(3000)


class GroupMachine(RuleBasedStateMachine):
    @initialize(delay=st.sampled_from([0, 3000]))
    def setup(self, delay: int) -> None:
        counter = itertools.count(1)
        self.group_settings = {"initial_rebalance_delay_ms": delay, "id_factory": lambda: str(next(counter))}
        self.transitions: set[tuple[GroupState, GroupState]] = set()
        self.g = self._watch(Group("g", **self.group_settings))
        self.now = 0
        self.keys = itertools.count(1)
        self.outstanding: dict[int, int] = {}  # request key -> client index
        self.answered: set[int] = set()
        self.max_generation = 0
        self.clients = [
            Client(instance=i, rebalance=r) for i, r in zip(CLIENT_INSTANCES, CLIENT_REBALANCE)
        ]

    # -------------------------------------------------------------- plumbing

    def _watch(self, g: Group) -> Group:
        """Record every state change the group makes, before its own check runs."""
        original = g._transition

        def recording(state: GroupState, now_ms: int) -> None:
            if state is not g.state:
                self.transitions.add((g.state, state))
            original(state, now_ms)

        g._transition = recording  # type: ignore[method-assign]
        return g

    def _new_key(self, client: int) -> int:
        k = next(self.keys)
        self.outstanding[k] = client
        return k

    def _apply(self, effects: list) -> None:
        for e in effects:
            assert e.request_key in self.outstanding, f"unknown or repeated answer {e}"
            assert e.request_key not in self.answered
            self.answered.add(e.request_key)
            c = self.clients[self.outstanding.pop(e.request_key)]
            if isinstance(e, JoinReply):
                self._on_join(c, e)
            else:
                assert isinstance(e, SyncReply)
                if e.error_code in (E.unknown_member_id, E.fenced_instance_id):
                    c.member_id, c.generation, c.members = "", -1, ()

    def _on_join(self, c: Client, r: JoinReply) -> None:
        if r.error_code is E.none:
            assert 0 < r.generation_id <= self.g.generation_id
            assert r.protocol_type == "consumer" and r.protocol_name is not None
            c.member_id, c.generation = r.member_id, r.generation_id
            if r.members:
                assert r.leader == r.member_id
                c.members = tuple(m.member_id for m in r.members)
            else:
                c.members = ()
        elif r.error_code is E.member_id_required:
            c.member_id = r.member_id
        elif r.error_code in (E.unknown_member_id, E.fenced_instance_id):
            c.member_id, c.generation, c.members = "", -1, ()
        else:
            assert r.error_code in {E.rebalance_in_progress, E.inconsistent_group_protocol,
                                    E.invalid_session_timeout, E.not_coordinator}, r

    # -------------------------------------------------------------- rules

    def _join(self, c: int, fresh: bool, protocols: int, require: bool, session: int) -> None:
        cl = self.clients[c]
        mid = "" if fresh else cl.member_id
        key = self._new_key(c)
        effects = self.g.join(
            self.now, mid, cl.instance, f"client{c}", "h", session, cl.rebalance, "consumer",
            PROTOCOL_CHOICES[protocols], require, key,
        )
        self._apply(effects)

    def _sync(self, c: int, stale: bool = False) -> None:
        cl = self.clients[c]
        gen = cl.generation - 1 if stale else cl.generation
        assignments = {m: f"{m}@{gen}".encode() for m in cl.members}
        key = self._new_key(c)
        self._apply(self.g.sync(self.now, cl.member_id, cl.instance, gen, assignments, key))

    @rule(
        c=st.integers(0, len(CLIENT_INSTANCES) - 1),
        fresh=st.sampled_from([False, False, False, True]),
        protocols=st.sampled_from([0, 0, 0, 1, 1, 2, 3]),
        require=st.booleans(),
        session=st.sampled_from([SESSION, SESSION, 15_000, 1_000]),
    )
    def join(self, c: int, fresh: bool, protocols: int, require: bool, session: int) -> None:
        self._join(c, fresh, protocols, require, session)

    @rule(c=st.integers(0, len(CLIENT_INSTANCES) - 1), stale=st.sampled_from([False, False, True]))
    def sync(self, c: int, stale: bool) -> None:
        self._sync(c, stale)

    # The collective rules leave out the last client (the second incarnation of "s2").

    @rule(protocols=st.sampled_from([0, 1]))
    def everyone_rejoins(self, protocols: int) -> None:
        """Each client that is not parked sends JoinGroup with what it knows."""
        for c in range(len(self.clients) - 1):
            if c not in self.outstanding.values():
                self._join(c, False, protocols, True, SESSION)

    @rule()
    def everyone_syncs(self) -> None:
        """Each client with a generation sends SyncGroup, leaders last."""
        clients = range(len(self.clients) - 1)
        for c in sorted(clients, key=lambda c: bool(self.clients[c].members)):
            if self.clients[c].member_id and c not in self.outstanding.values():
                self._sync(c)

    @rule()
    def everyone_heartbeats(self) -> None:
        for c in range(len(self.clients)):
            self.heartbeat(c)

    @rule()
    def converge(self) -> None:
        """Rejoin (twice, for KIP-394), wait out the join phase, then sync: usually Stable."""
        self.everyone_rejoins(0)
        self.everyone_rejoins(0)
        for _ in range(5):
            if not self.outstanding:
                break
            self.tick_at_deadline()
        self.everyone_syncs()

    @rule(c=st.integers(0, len(CLIENT_INSTANCES) - 1))
    def heartbeat(self, c: int) -> None:
        cl = self.clients[c]
        code = self.g.heartbeat(self.now, cl.member_id, cl.instance, cl.generation)
        assert code is E.none or code in NOT_A_NONE
        if code is E.none:
            assert self.g.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)

    @rule(c=st.integers(0, len(CLIENT_INSTANCES) - 1))
    def leave(self, c: int) -> None:
        cl = self.clients[c]
        left = cl.member_id  # the released replies may give the client another id (a fresh join)
        res = self.g.leave(self.now, [(left, cl.instance)])
        assert res.error_code is E.none and len(res.members) == 1
        self._apply(list(res.effects))
        if res.members[0].error_code is E.none:
            assert left not in self.g.members or left == ""

    @rule(c=st.integers(0, len(CLIENT_INSTANCES) - 1))
    def commit(self, c: int) -> None:
        cl = self.clients[c]
        code = self.g.validate_commit(cl.member_id, cl.instance, cl.generation, self.now)
        if code is E.none and cl.generation >= 0 and self.g.state is not GroupState.EMPTY:
            assert self.g.generation_id == cl.generation

    @rule(dt=st.sampled_from([0, 1, 500, 3_000, 3_000, 6_000, 9_000, 20_000, 40_000]))
    def advance(self, dt: int) -> None:
        self.now += dt
        self._apply(self.g.tick(self.now))
        d = self.g.next_deadline()
        assert d is None or d > self.now

    @rule(dt=st.sampled_from([0, 1_000, 4_000, 20_000]))
    def coordinator_moves(self, dt: int) -> None:
        """The coordinator dies (its parked requests fail with NOT_COORDINATOR) and, ``dt``
        later, another one restores the group from the snapshot it wrote last."""
        snap = self.g.snapshot(self.now)
        self._apply(self.g.mark_dead(self.now))
        self.now += dt
        self.g = self._watch(Group.restore("g", snap, now_ms=self.now, **self.group_settings))
        assert self.g.generation_id == snap["generation"]
        # a member silent for longer than its session and the grace is past its deadline
        # already: the first tick removes it
        self._apply(self.g.tick(self.now))
        d = self.g.next_deadline()
        assert d is None or d > self.now

    @rule()
    def tick_at_deadline(self) -> None:
        d = self.g.next_deadline()
        if d is not None and d > self.now:
            self.now = d
        self._apply(self.g.tick(self.now))

    # -------------------------------------------------------------- invariants

    @invariant()
    def every_state_change_is_in_apaches_table(self) -> None:
        for old, new in self.transitions:
            assert old in APACHE_VALID_PREVIOUS[new], f"{old} -> {new}"

    @invariant()
    def generation_never_decreases(self) -> None:
        assert self.g.generation_id >= self.max_generation
        self.max_generation = self.g.generation_id

    @invariant()
    def empty_iff_no_members(self) -> None:
        g = self.g
        assert (g.state is GroupState.EMPTY) == (not g.members)
        assert g.state is not GroupState.DEAD
        if g.members:
            assert g.leader_id in g.members
        else:
            assert g.leader_id is None

    @invariant()
    def stable_members_have_assignments(self) -> None:
        if self.g.state is GroupState.STABLE:
            assert all(m.assignment is not None for m in self.g.members.values())

    @invariant()
    def parked_requests_are_exactly_the_outstanding_ones(self) -> None:
        g = self.g
        joins = {m.join_key for m in g.members.values() if m.join_key is not None}
        syncs = {m.sync_key for m in g.members.values() if m.sync_key is not None}
        assert joins | syncs == set(self.outstanding)
        if joins:
            assert g.state is GroupState.PREPARING_REBALANCE
        if syncs:
            assert g.state is GroupState.COMPLETING_REBALANCE
        if self.outstanding:
            assert g.next_deadline() is not None

    @invariant()
    def static_map_is_consistent(self) -> None:
        for m in self.g.members.values():
            if m.group_instance_id is not None:
                assert self.g.static_member_id(m.group_instance_id) == m.member_id

    def teardown(self) -> None:
        if not hasattr(self, "g"):
            return
        # Silence: every parked request is answered and every session ends.
        for _ in range(50):
            d = self.g.next_deadline()
            if d is None:
                break
            self.now = max(self.now, d)
            self._apply(self.g.tick(self.now))
        assert not self.outstanding
        assert self.g.state is GroupState.EMPTY and self.g.next_deadline() is None


GroupMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestGroupMachine = GroupMachine.TestCase


@pytest.mark.parametrize("n", [1, 2, 4])
def test_stable_group_sizes(n: int):
    g, ids = stable_group(n)
    assert len(g.members) == n and g.leader_id == ids[0]


# ---------------------------------------------------------------------------- snapshot / restore


def test_a_restored_stable_group_carries_on_with_the_same_generation_and_assignments():
    g, ids = stable_group(3)
    snap = g.snapshot(0)
    assert snap["state"] == "Stable" and snap["generation"] == 1
    assert [m["last_heartbeat_ms"] for m in snap["members"]] == [0, 0, 0]
    r = Group.restore("g", snap, now_ms=8_000)
    assert r.state is GroupState.STABLE and r.generation_id == 1
    assert r.leader_id == g.leader_id and r.protocol_name == g.protocol_name
    assert list(r.members) == ids
    for mid in ids:
        assert r.members[mid].assignment == g.members[mid].assignment
        assert r.members[mid].protocols == g.members[mid].protocols
    # little time left: half a session from the restore to reach the new coordinator
    assert r.next_deadline() == 8_000 + SESSION // 2
    assert r.tick(8_000 + SESSION // 2 - 1) == []
    assert all(r.heartbeat(8_100, mid, None, 1) is E.none for mid in ids)
    assert r.heartbeat(8_100, ids[0], None, 0) is E.illegal_generation
    assert r.heartbeat(8_100, "stranger", None, 1) is E.unknown_member_id
    assert r.tick(8_100 + SESSION - 1) == [] and len(r.members) == 3  # heard from: a whole session
    # restored later than its session and the grace after its last heartbeat: removed at once
    late = Group.restore("g", snap, now_ms=50_000)
    assert late.next_deadline() == SESSION + SESSION // 2
    late.tick(50_000)
    assert late.state is GroupState.EMPTY and not late.members
    # the leader's rejoin starts the next generation's rebalance, as before the move
    join(r, 8_200, ids[0], client="c0", key="rejoin")
    assert r.state is GroupState.PREPARING_REBALANCE
    # and a member that stops heartbeating is removed after its session
    r2 = Group.restore("g", snap, now_ms=0)
    for mid in ids[1:]:
        r2.heartbeat(SESSION - 1, mid, None, 1)
    r2.tick(SESSION + 1)
    assert ids[0] not in r2.members


def test_static_members_are_restored_with_their_instance_ids():
    g = new_group()
    mid = only(join(g, 0, client="s", instance="inst-1", key="j")).member_id
    g.sync(0, mid, "inst-1", 1, {mid: b"A"}, "s")
    r = Group.restore("g", g.snapshot(0), now_ms=1)
    assert r.static_member_id("inst-1") == mid
    assert r.heartbeat(2, mid, "inst-1", 1) is E.none


def test_snapshots_of_each_state():
    g = new_group()
    assert g.snapshot(0) == {"state": "Empty", "generation": 0, "protocol_type": None, "since_ms": 0}
    mid, _ = two_step(g, 0, client="a")  # parked: heard from "now" whenever the snapshot is taken
    snap = g.snapshot(700)
    assert snap["state"] == "CompletingRebalance" and snap["generation"] == 1 and snap["since_ms"] == 0
    assert snap["members"][0]["last_heartbeat_ms"] == 0  # its join was answered at 0: not parked
    g.sync(5, mid, None, 1, {mid: b"A"}, "sync")
    assert g.state is GroupState.STABLE and g.snapshot(9)["members"][0]["last_heartbeat_ms"] == 5
    g, (leader, follower) = stable_group(2)
    join(g, 10, leader, client="c0", key="rejoin")  # parked in PreparingRebalance
    snap = g.snapshot(4_000)
    assert snap["state"] == "PreparingRebalance" and snap["since_ms"] == 10
    assert [(m["member_id"], m["last_heartbeat_ms"], m["assignment"]) for m in snap["members"]] == [
        (leader, 4_000, b"A0".hex()), (follower, 0, b"A1".hex())]
    g.mark_dead(5_000)
    assert g.snapshot(5_000) is None
    e = Group.restore("g", {"state": "Empty", "generation": 7, "protocol_type": "consumer"}, now_ms=0)
    assert e.state is GroupState.EMPTY and e.generation_id == 7 and e.members == {}


@given(
    heard=st.one_of(st.none(), st.integers(-10**9, 10**9)),
    session=st.integers(6_000, 1_800_000),
    now=st.integers(0, 10**9),
)
def test_a_restored_session_keeps_its_time_left_and_gets_a_grace_once_per_outage(heard, session, now):
    d = restored_session_deadline(heard, session, now)
    grace = session // 2
    # never later than Apache's reset on load
    assert d <= now + session
    if heard is None:
        assert d == now + session
    else:
        p = min(heard, now)  # a time on file from the future (the writer's clock ahead) counts as now
        # never earlier than the session the previous coordinator would have given, never
        # more than the grace beyond it, however late the restore
        assert p + session <= d <= p + session + grace
        if p + session >= now:  # the member could still be alive: the grace from the restore
            assert d >= now + grace
        if now - grace <= heard <= now:
            assert d == heard + session
    # and it is the session a restored group gives the member
    g, (mid,) = stable_group(1)
    snap = g.snapshot(0)
    snap["members"][0]["session_timeout_ms"] = session
    if heard is None:
        del snap["members"][0]["last_heartbeat_ms"]
    else:
        snap["members"][0]["last_heartbeat_ms"] = heard
    assert Group.restore("g", snap, now_ms=now).members[mid].session_deadline_ms == d


def test_restored_sessions_count_from_the_heartbeats_on_file():
    g, (a, b) = stable_group(2)
    assert g.heartbeat(9_000, b, None, 1) is E.none
    snap = g.snapshot(9_500)
    assert [m["last_heartbeat_ms"] for m in snap["members"]] == [0, 9_000]
    r = Group.restore("g", snap, now_ms=10_000)
    assert r.members[a].session_deadline_ms == 15_000  # silent for a session: half a session left
    assert r.members[b].session_deadline_ms == 19_000  # heard from at 9 000: its session on
    assert r.tick(14_999) == [] and r.next_deadline() == 15_000
    r.tick(15_000)
    assert list(r.members) == [b] and r.state is GroupState.PREPARING_REBALANCE
    # a file without heartbeat times (written before they were kept): Apache's reset on load
    old = {**snap, "members": [{k: v for k, v in m.items() if k != "last_heartbeat_ms"}
                               for m in snap["members"]]}
    del old["since_ms"]
    r = Group.restore("g", old, now_ms=10_000)
    assert {m.session_deadline_ms for m in r.members.values()} == {10_000 + SESSION}
    # a time on file from the future (the writer's clock ahead) counts as the restore time
    ahead = {**snap, "members": [{**m, "last_heartbeat_ms": 99_000} for m in snap["members"]]}
    r = Group.restore("g", ahead, now_ms=10_000)
    assert {m.session_deadline_ms for m in r.members.values()} == {10_000 + SESSION}


def test_persist_due_for_changes_and_heartbeats_a_third_of_a_session_late():
    g, (a, b) = stable_group(2)
    assert not new_group().persist_due(None, 0)  # never had a generation: no file
    assert g.persist_due(None, 0)
    on_file = g.snapshot(0)
    assert not g.persist_due(on_file, 1)
    g.heartbeat(SESSION // 3 - 1, a, None, 1)
    assert not g.persist_due(on_file, SESSION // 3)
    g.heartbeat(SESSION // 3 + 1, a, None, 1)
    assert g.persist_due(on_file, SESSION // 3 + 2)
    on_file = g.snapshot(SESSION // 3 + 2)
    # a restore changes nothing on file, and writes nothing until someone is heard from
    r = Group.restore("g", on_file, now_ms=40_000)
    assert not r.persist_due(on_file, 40_000)
    assert r.heartbeat(40_100, b, None, 1) is E.none and r.persist_due(on_file, 40_100)
    # a membership change is due at once
    join(g, 4_000, a, client="c0", key="rejoin")
    assert g.state is GroupState.PREPARING_REBALANCE and g.persist_due(on_file, 4_000)
    assert not g.persist_due(g.snapshot(4_000), 4_001)
    # a parked member counts as heard from whenever the snapshot is taken
    assert not g.persist_due(g.snapshot(4_000), 4_000 + SESSION // 3 - 1)
    assert g.persist_due(g.snapshot(4_000), 4_000 + SESSION // 3 + 1)


def test_a_rebalance_in_progress_is_restored_and_completes():
    g, (a, b) = stable_group(2)
    g.heartbeat(1_000, b, None, 1)
    join(g, 2_000, a, client="c0", key="a-rejoin")  # PreparingRebalance since 2 000, a parked
    snap = g.snapshot(3_000)
    r = Group.restore("g", snap, now_ms=4_000)
    assert r.state is GroupState.PREPARING_REBALANCE and r.generation_id == 1
    assert r.state_since_ms == 2_000 and r.members[a].join_key is None
    # the survivors' heartbeats say "rejoin"; a rejoins, b (dead since 1 000) is removed when
    # its session ends (11 000), and the phase completes then, not at the rebalance timeout
    assert r.heartbeat(4_500, a, None, 1) is E.rebalance_in_progress
    assert join(r, 4_600, a, client="c0", key="a-again") == []
    assert r.next_deadline() == 11_000
    reply = by_key(r.tick(11_000))["a-again"]
    assert reply.error_code is E.none and reply.generation_id == 2 and reply.leader == a
    assert list(r.members) == [a] and r.state is GroupState.COMPLETING_REBALANCE
    # restored in CompletingRebalance: the leader's SyncGroup completes the generation
    c = Group.restore("g", r.snapshot(11_500), now_ms=12_000)
    assert c.state is GroupState.COMPLETING_REBALANCE and c.generation_id == 2 and c.leader_id == a
    assert only(c.sync(12_100, a, None, 2, {a: b"all"}, "s")).assignment == b"all"
    assert c.state is GroupState.STABLE
    # a member that rejoins having missed its JoinGroup answer gets this generation's
    c2 = Group.restore("g", r.snapshot(11_500), now_ms=12_000)
    again = only(join(c2, 12_050, a, client="c0", key="missed"))
    assert again.generation_id == 2 and again.members == (JoinMember(a, None, b"r-meta"),)


def test_a_restored_rebalance_ends_by_its_timeout_from_when_it_began_but_not_before_a_member_could_rejoin():
    g, (a, b) = stable_group(2)
    join(g, 0, a, client="c0", key="k", rebalance=REBALANCE)
    snap = g.snapshot(REBALANCE - 5_000)  # a (parked) was heard from then, b not since 0
    late = Group.restore("g", snap, now_ms=REBALANCE + 1_000)  # long past the rebalance timeout
    assert late._join_deadline_ms == REBALANCE + 1_000 + SESSION // 2  # a's grace
    late.tick(REBALANCE + 1_000)
    assert list(late.members) == [a]  # b, silent for longer than its session and the grace, is gone
    early = Group.restore("g", g.snapshot(0), now_ms=1_000)
    assert early._join_deadline_ms == REBALANCE


@pytest.mark.parametrize("bad_state", ["Dead", "Bogus", None])
def test_a_snapshot_in_an_unknown_state_is_refused(bad_state):
    g, _ = stable_group(1)
    with pytest.raises(ValueError):
        Group.restore("g", {**g.snapshot(0), "state": bad_state}, now_ms=0)
    snap = g.snapshot(0)
    snap["members"][0]["assignment"] = None  # Stable, yet without an assignment
    with pytest.raises(ValueError):
        Group.restore("g", snap, now_ms=0)


# ------------------------------------------------------------ coordinator churn (simulated)

CHURN_SESSION = 6_000
STEP = 100


class LiveClient:
    """A live member as a client library drives it: heartbeats every ``hb`` ms, rejoins and
    syncs when told to, and re-sends what it had parked at a coordinator that died."""

    def __init__(self, member_id: str, generation: int, hb: int) -> None:
        self.member_id, self.generation, self.hb = member_id, generation, hb
        self.next_at = 0
        self.parked: tuple[str, object] | None = None  # ("join"|"sync", key)
        self.want = "heartbeat"
        self.assignment: bytes | None = b"A?"
        self.keys = itertools.count()

    def act(self, g: Group, now: int) -> list:
        if self.parked is not None or now < self.next_at:
            return []
        self.next_at = now + self.hb
        if self.want == "join":
            key = ("join", next(self.keys))
            self.parked = key
            return g.join(now, self.member_id, None, "live", "h", CHURN_SESSION, REBALANCE,
                          "consumer", PROTOS, True, key)
        if self.want == "sync":
            key = ("sync", next(self.keys))
            self.parked = key
            mine = {m: m.encode() for m in self.members} if self.members else {}
            return g.sync(now, self.member_id, None, self.generation, mine, key)
        code = g.heartbeat(now, self.member_id, None, self.generation)
        assert code is not E.unknown_member_id, f"live member dropped at {now}"
        if code in (E.rebalance_in_progress, E.illegal_generation):
            self.want = "join"
        return []

    def answer(self, effects: list) -> None:
        for e in effects:
            if self.parked is None or e.request_key != self.parked:
                continue
            self.parked = None
            self.next_at = 0  # act on the answer at once
            assert e.error_code is not E.unknown_member_id, f"live member dropped: {e}"
            if isinstance(e, JoinReply):
                if e.error_code is E.none:
                    self.generation, self.want = e.generation_id, "sync"
                    self.members = [m.member_id for m in e.members]
                    self.assignment = None
                else:
                    self.want = "join"
            elif e.error_code is E.none:
                self.want, self.assignment = "heartbeat", e.assignment
            else:
                self.want = "join"

    def coordinator_died(self, reach_at: int) -> None:
        self.next_at = reach_at
        if self.parked is not None:
            self.want = self.parked[0]  # re-send it to the next coordinator
            self.parked = None


def run_churn(tenures: list[int], gap: int, reach: int, hb: int, dead_leader: bool, reset_on_load: bool = False):
    """A Stable group of two at 0; one member dies at 0, the other lives. The coordinator
    serves for each of ``tenures`` (ms) in turn, ``gap`` ms apart, each restoring the group
    from the last snapshot its predecessor wrote (checked at every step with
    ``persist_due``: a heartbeat that makes it due wakes the runtime's loop). The live
    member reaches each new coordinator ``reach`` ms after it loaded the group. With
    ``reset_on_load`` the heartbeat times on file are ignored (every session restarts on
    load, Apache's rule). Returns (group, client, [(end of each tenure, whether the dead
    member was still there then)], the dead member's id)."""
    g, (m0, m1) = stable_group(2, CHURN_SESSION)
    dead, live = (m0, m1) if dead_leader else (m1, m0)
    client = LiveClient(live, 1, hb)
    on_file = g.snapshot(0)
    now, history = 0, []
    for length in tenures:
        snap = on_file
        if reset_on_load and "members" in snap:
            snap = {**snap, "members": [{k: v for k, v in m.items() if k != "last_heartbeat_ms"}
                                        for m in snap["members"]]}
        g = Group.restore("g", snap, now_ms=now)
        assert g.generation_id == on_file["generation"]
        client.coordinator_died(now + reach)
        end = now + length
        while now < end:
            client.answer(g.tick(now))
            before = g.state
            effects = client.act(g, now)
            if g.state is GroupState.STABLE and before is not GroupState.STABLE:
                on_file = g.snapshot(now)  # on file before the assignments go out, as the runtime does
            client.answer(effects)
            if g.persist_due(on_file, now):  # the runtime's loop is woken when a heartbeat makes it due
                on_file = g.snapshot(now)
            now += STEP
        history.append((now, dead in g.members))
        now += gap
    return g, client, history, dead


def contact_gaps(tenures: list[int], gap: int, reach: int, hb: int) -> list[int]:
    """The longest times a live member goes unheard under ``run_churn``'s schedule: from
    its last possible heartbeat at one coordinator to its first at the next one it can
    reach (a coordinator that serves less than ``reach`` is never reached)."""
    out, start, last = [], 0, 0
    for length in tenures:
        if length > reach:
            out.append(start + reach - last)
            last = start + length - hb
        start += length + gap
    return out


@given(
    tenures=st.lists(st.integers(5, 90).map(lambda x: x * STEP), min_size=1, max_size=12),
    gap=st.integers(0, 30).map(lambda x: x * STEP),
    reach=st.integers(0, (CHURN_SESSION // 2 - 2 * STEP) // STEP).map(lambda x: x * STEP),
    hb=st.sampled_from([500, 1_000, CHURN_SESSION // 3]),
    dead_leader=st.booleans(),
)
def test_under_coordinator_churn_a_live_member_stays_and_a_dead_one_goes(tenures, gap, reach, hb, dead_leader):
    """However often the coordinator moves, a live member that reaches each new coordinator
    within half a session (the grace), and is never unheard for longer than its session
    and the grace less the lag of its time on file (a third of a session), is never
    dropped (``LiveClient`` asserts it); the dead member is gone by the end of the first
    tenure that outlasts the grace after its session since it died, and
    by its death + session + grace under any tenure."""
    tenures = tenures + [4 * CHURN_SESSION]
    s, grace = CHURN_SESSION, CHURN_SESSION // 2
    assume(max(contact_gaps(tenures, gap, reach, hb)) < s + grace - s // 3 - STEP)
    g, client, history, dead = run_churn(tenures, gap, reach, hb, dead_leader)
    start = 0
    for length, (end, dead_present) in zip(tenures, history):
        if length > grace + STEP and end > s + STEP:
            assert not dead_present, (start, end)
            break
        start = end + gap
    for end, dead_present in history:
        assert not (dead_present and end > s + grace + STEP), end
    assert g.state is GroupState.STABLE and list(g.members) == [client.member_id]
    assert client.generation == g.generation_id and client.assignment == client.member_id.encode()


def test_a_dead_member_outlives_churn_only_with_sessions_restarted_on_load():
    """Coordinator moves every 4 s, a 6 s session: with the heartbeat times on file the dead
    member goes within a few moves; with every session restarted on load (Apache's rule,
    what a file without heartbeat times gets) it would stay for as long as the churn."""
    churn = [4_000] * 8 + [4 * CHURN_SESSION]
    g, client, history, _ = run_churn(churn, 500, 1_000, 1_000, True)
    assert [present for _, present in history[:4]] == [True, False, False, False]
    assert list(g.members) == [client.member_id]
    g, client, history, dead = run_churn(churn, 500, 1_000, 1_000, True, reset_on_load=True)
    assert all(present for _, present in history[:8])  # through all the churn
    assert list(g.members) == [client.member_id]  # gone once a coordinator lasts a session


@pytest.mark.parametrize("bad", [
    {},
    {"state": "Stable", "generation": 1, "protocol": "range", "leader": "x", "members": [{"member_id": "x"}]},
    {"state": "Stable", "generation": 1, "protocol": "range", "leader": "nobody", "members": [
        {"member_id": "x", "group_instance_id": None, "client_id": "c", "client_host": "h",
         "session_timeout_ms": 1, "rebalance_timeout_ms": 1, "protocol_type": "consumer",
         "protocols": [["range", "zz"]], "assignment": ""}]},
])
def test_a_malformed_snapshot_is_refused(bad):
    with pytest.raises(ValueError):
        Group.restore("g", bad, now_ms=0)
