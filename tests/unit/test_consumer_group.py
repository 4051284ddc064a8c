"""KIP-848 consumer group machine (kaas.domain.groups.consumer.group, consumer_member): event
scripts for each rule, and a stateful model with clients that heartbeat, acknowledge
revocations late or never, change subscriptions, leave, and die, while topics appear,
grow and disappear."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from kio.schema.errors import ErrorCode as E

from kaas.domain.groups.consumer.core import VALID_PREVIOUS
from kaas.domain.groups.consumer.group import (
    ConsumerGroup,
    GroupConfig,
    Heartbeat,
    HeartbeatReply,
    TopicImage,
    TopicInfo,
    validate_heartbeat,
)
from kaas.domain.groups.consumer.member import ConsumerMember, MemberState, reconcile
from kaas.domain.groups.modern.state import ModernState
from kaas.domain.groups.transitions import IllegalTransition

SESSION = 45_000
REBALANCE = 30_000
CONFIG = GroupConfig(session_timeout_ms=SESSION, assignors=("uniform", "range"))


def image(version: int = 1, **topics: int) -> TopicImage:
    return TopicImage.of(version, [TopicInfo(f"id-{n}", n, p) for n, p in topics.items()])


IMG = image(a=4, b=2)


def join(member: str, names: tuple[str, ...] | None = ("a",), *, instance: str | None = None,
         regex: str | None = None, assignor: str | None = None) -> Heartbeat:
    return Heartbeat(member, 0, instance_id=instance, rebalance_timeout_ms=REBALANCE,
                     subscribed_topic_names=names, subscribed_topic_regex=regex, server_assignor=assignor, owned=())


def beat(member: str, epoch: int, owned: dict[str, set[int]] | None = None, *,
         instance: str | None = None, names: tuple[str, ...] | None = None) -> Heartbeat:
    own = None if owned is None else tuple((k, tuple(sorted(v))) for k, v in sorted(owned.items()))
    return Heartbeat(member, epoch, instance_id=instance, owned=own, subscribed_topic_names=names)


def parts(reply: HeartbeatReply) -> dict[str, set[int]]:
    assert reply.assignment is not None
    return {k: set(v) for k, v in reply.assignment.items()}


class TestValidation:
    def check(self, hb: Heartbeat, version: int = 1, group: str = "g") -> tuple[E, str | None] | None:
        r = validate_heartbeat(hb, version, group, ("uniform", "range"))
        return None if r is None else (r.error_code, r.error_message)

    def test_a_well_formed_join_and_heartbeat_pass(self):
        assert self.check(join("m")) is None
        assert self.check(beat("m", 3)) is None
        assert self.check(Heartbeat("", 0, rebalance_timeout_ms=1, subscribed_topic_names=(), owned=()), 0) is None

    @pytest.mark.parametrize(("hb", "version", "message"), [
        (join(""), 1, "MemberId can't be empty."),
        (beat(" ", 2), 0, "MemberId can't be empty."),
        (Heartbeat("m", 0, instance_id=" ", rebalance_timeout_ms=1, subscribed_topic_names=(), owned=()), 1,
         "InstanceId can't be empty."),
        (Heartbeat("m", 0, rack_id="", rebalance_timeout_ms=1, subscribed_topic_names=(), owned=()), 1,
         "RackId can't be empty."),
        (Heartbeat("m", 0, subscribed_topic_names=("a",), owned=()), 1,
         "RebalanceTimeoutMs must be provided in first request."),
        (Heartbeat("m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("a",)), 1,
         "TopicPartitions must be empty when (re-)joining."),
        (Heartbeat("m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("a",), owned=(("x", ()),)), 1,
         "TopicPartitions must be empty when (re-)joining."),
        (Heartbeat("m", 0, rebalance_timeout_ms=1, owned=()), 1,
         "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
        (beat("m", -2), 1, "InstanceId can't be null."),
        (beat("m", -3), 1, "MemberEpoch is invalid."),
    ])
    def test_malformed_requests_are_invalid(self, hb, version, message):
        assert self.check(hb, version) == (E.invalid_request, message)

    def test_an_empty_group_id_is_invalid(self):
        assert self.check(join("m"), group=" ") == (E.invalid_request, "GroupId can't be empty.")

    def test_an_unknown_assignor_is_unsupported(self):
        code, msg = self.check(join("m", assignor="sticky"))
        assert code == E.unsupported_assignor
        assert msg == "ServerAssignor sticky is not supported. Supported assignors: uniform, range."


class TestMembership:
    def test_first_member_gets_everything_at_epoch_one(self):
        g = ConsumerGroup("g")
        r = g.heartbeat(join("m1", ("a", "b")), 0, IMG, CONFIG)
        assert (r.error_code, r.member_epoch, r.changed) == (E.none, 1, True)
        assert parts(r) == {"id-a": {0, 1, 2, 3}, "id-b": {0, 1}}
        assert g.state == "Stable" and g.group_epoch == g.assignment_epoch == 1
        # a steady heartbeat changes nothing and sends no assignment
        r = g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}, "id-b": {0, 1}}), 1000, IMG, CONFIG)
        assert (r.member_epoch, r.assignment, r.changed) == (1, None, False)

    def test_v0_join_without_member_id_gets_one(self):
        g = ConsumerGroup("g")
        r = g.heartbeat(join(""), 0, IMG, CONFIG, new_member_id=lambda: "minted")
        assert r.member_id == "minted" and "minted" in g.members

    def test_a_partition_moves_only_after_its_owner_revokes_it(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1"), 0, IMG, CONFIG)
        r2 = g.heartbeat(join("m2"), 10, IMG, CONFIG)
        assert g.group_epoch == 2 and r2.member_epoch == 2
        assert parts(r2) == {}  # its partitions are still m1's
        assert g.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
        # m1 learns it must give two up; it stays at epoch 1 meanwhile
        r1 = g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}}), 20, IMG, CONFIG)
        kept = parts(r1)["id-a"]
        assert r1.member_epoch == 1 and len(kept) == 2
        assert g.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
        moving = {0, 1, 2, 3} - kept
        # m2 asks again before m1 acknowledged: still nothing
        assert g.heartbeat(beat("m2", 2, {}), 30, IMG, CONFIG).assignment is None
        # m1 acknowledges: it moves to epoch 2
        r1 = g.heartbeat(beat("m1", 1, {"id-a": kept}), 40, IMG, CONFIG)
        assert r1.member_epoch == 2 and r1.assignment is None
        r2 = g.heartbeat(beat("m2", 2, {}), 50, IMG, CONFIG)
        assert parts(r2) == {"id-a": moving} and g.state == "Stable"
        g.check_invariants()

    def test_an_ack_that_still_lists_a_revoked_partition_is_not_one(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1"), 0, IMG, CONFIG)
        g.heartbeat(join("m2"), 1, IMG, CONFIG)
        g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}}), 2, IMG, CONFIG)
        assert g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}}), 3, IMG, CONFIG).member_epoch == 1
        assert g.heartbeat(beat("m1", 1), 4, IMG, CONFIG).member_epoch == 1  # owned not said: not acked
        assert g.members["m1"].state is MemberState.UNREVOKED_PARTITIONS

    def test_leave_bumps_the_epoch_and_frees_the_partitions(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1"), 0, IMG, CONFIG)
        g.heartbeat(join("m2"), 1, IMG, CONFIG)
        r = g.heartbeat(beat("m2", -1), 2, IMG, CONFIG)
        assert (r.error_code, r.member_epoch, r.changed) == (E.none, -1, True)
        assert "m2" not in g.members and g.group_epoch == 3
        r = g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}}), 3, IMG, CONFIG)
        assert r.member_epoch == 3 and g.state == "Stable"

    def test_unknown_member_and_unknown_group_member(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1"), 0, IMG, CONFIG)
        before = g.snapshot()
        for hb in (beat("ghost", 1, {}), beat("ghost", -1)):
            r = g.heartbeat(hb, 1, IMG, CONFIG)
            assert r.error_code == E.unknown_member_id and "ghost" in r.error_message
        assert g.snapshot() == before

    @pytest.mark.parametrize(("epoch", "owned", "code"), [
        (5, {"id-a": {0}}, E.fenced_member_epoch),       # from the future
        (1, {"id-a": {0}}, E.none),                      # one behind, owns a subset: accepted
        (1, {"id-a": {0, 1, 2, 3}}, E.fenced_member_epoch),  # one behind, owns more than it has
        (1, None, E.fenced_member_epoch),                # one behind, owned not said
        (0, {}, E.none),                                 # a re-join (KAFKA-19233)
    ])
    def test_member_epoch_rules(self, epoch, owned, code):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1"), 0, IMG, CONFIG)
        g.heartbeat(join("m2"), 1, IMG, CONFIG)
        kept = parts(g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}}), 2, IMG, CONFIG))["id-a"]
        assert g.heartbeat(beat("m1", 1, {"id-a": kept}), 3, IMG, CONFIG).member_epoch == 2
        assert g.members["m1"].previous_member_epoch == 1
        if owned is not None and epoch == 1 and owned == {"id-a": {0}}:
            owned = {"id-a": {min(kept)}}
        before = g.snapshot()
        hb = join("m1") if epoch == 0 else beat("m1", epoch, owned)
        r = g.heartbeat(hb, 4, IMG, CONFIG)
        assert r.error_code == code
        if code != E.none:
            assert g.snapshot() == before
        else:
            assert r.member_epoch == 2

    def test_max_size(self):
        g = ConsumerGroup("g")
        small = GroupConfig(SESSION, ("uniform",), max_size=1)
        g.heartbeat(join("m1"), 0, IMG, small)
        r = g.heartbeat(join("m2"), 1, IMG, small)
        assert r.error_code == E.group_max_size_reached and "m2" not in g.members
        assert g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}}), 2, IMG, small).error_code == E.none

    def test_the_assignor_most_members_ask_for_is_used(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1", assignor="range"), 0, IMG, CONFIG)
        assert g.preferred_assignor(CONFIG.assignors) == "range"
        assert g.describe(CONFIG.assignors)["assignor"] == "range"
        assert ConsumerGroup("h").preferred_assignor(CONFIG.assignors) == "uniform"


class TestSubscriptions:
    def test_changing_the_subscription_revokes_the_dropped_topic(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1", ("a", "b")), 0, IMG, CONFIG)
        r = g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}, "id-b": {0, 1}}, names=("a",)), 1, IMG, CONFIG)
        assert g.group_epoch == 2 and r.member_epoch == 1 and parts(r) == {"id-a": {0, 1, 2, 3}}
        r = g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}}), 2, IMG, CONFIG)
        assert r.member_epoch == 2 and g.state == "Stable"

    def test_regex_subscription_follows_topics(self):
        g = ConsumerGroup("g")
        img = image(1, orders=2, other=1)
        r = g.heartbeat(join("m1", None, regex="ord.*"), 0, img, CONFIG)
        # a regex new to the group is resolved at its next heartbeat (as Apache, shortly after)
        assert parts(r) == {} and g.heartbeat_interval_ms("m1", 0, 5000) == 500
        r = g.heartbeat(beat("m1", 1, {}), 100, img, CONFIG)
        assert parts(r) == {"id-orders": {0, 1}} and r.member_epoch == 2
        # a matching topic is created: resolved again, at most every 10 s (as Apache), so
        # that topics created together come in one rebalance
        img2 = image(2, orders=2, other=1, ordersx=3)
        r = g.heartbeat(beat("m1", 2, {"id-orders": {0, 1}}), 5_000, img2, CONFIG)
        assert g.group_epoch == 2 and r.assignment is None
        r = g.heartbeat(beat("m1", 2, {"id-orders": {0, 1}}), 10_100, img2, CONFIG)
        assert g.group_epoch == 3 and parts(r) == {"id-orders": {0, 1}, "id-ordersx": {0, 1, 2}}
        # a topic that does not match: nothing moves
        img3 = image(3, orders=2, other=1, ordersx=3, unrelated=5)
        r = g.heartbeat(beat("m1", 3, {"id-orders": {0, 1}, "id-ordersx": {0, 1, 2}}), 30_000, img3, CONFIG)
        assert g.group_epoch == 3 and r.assignment is None
        # a matched topic deleted: at once (the group's topics changed)
        img4 = image(4, orders=2, other=1, unrelated=5)
        r = g.heartbeat(beat("m1", 3, {"id-orders": {0, 1}, "id-ordersx": {0, 1, 2}}), 30_001, img4, CONFIG)
        assert g.group_epoch == 4 and parts(r) == {"id-orders": {0, 1}}

    def test_a_regex_adding_a_topic_another_member_has_by_name_rebalances(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1", ("a",)), 0, IMG, CONFIG)
        g.heartbeat(join("m2", None, regex="a"), 1, IMG, CONFIG)
        epoch = g.group_epoch
        g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}}), 2, IMG, CONFIG)  # resolves m2's regex
        assert g.group_epoch == epoch + 1 and g.target("m2") != {}

    def test_partitions_added_and_topic_deleted(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1", ("a", "b")), 0, IMG, CONFIG)
        grown = image(2, a=6, b=2)
        r = g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}, "id-b": {0, 1}}), 1, grown, CONFIG)
        assert g.group_epoch == 2 and parts(r)["id-a"] == set(range(6))
        gone = image(3, a=6)
        r = g.heartbeat(beat("m1", 2, {"id-a": set(range(6)), "id-b": {0, 1}}), 2, gone, CONFIG)
        assert g.group_epoch == 3 and parts(r) == {"id-a": set(range(6))}
        assert g.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
        r = g.heartbeat(beat("m1", 2, {"id-a": set(range(6))}), 3, gone, CONFIG)
        assert r.member_epoch == 3 and g.state == "Stable"

    def test_invalid_regex_is_refused_and_the_group_unharmed(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1"), 0, IMG, CONFIG)
        before = g.snapshot()
        r = g.heartbeat(join("m2", None, regex="("), 1, IMG, CONFIG)
        assert r.error_code == E.invalid_regular_expression and "not a valid regular expression" in r.error_message
        assert g.snapshot() == before and "m2" not in g.members

    def test_regex_resolution_sees_only_visible_topics(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1", None, regex=".*"), 0, IMG, CONFIG)
        r = g.heartbeat(beat("m1", 1, {}), 1, IMG, CONFIG, topic_visible=lambda t: t == "b")
        assert parts(r) == {"id-b": {0, 1}}

    def test_ten_thousand_names(self):
        g = ConsumerGroup("g")
        names = tuple(f"t{i}" for i in range(10_000)) + ("a",)
        r = g.heartbeat(join("m1", names), 0, IMG, CONFIG)
        assert r.error_code == E.none and parts(r) == {"id-a": {0, 1, 2, 3}}


class TestStaticMembers:
    def test_leave_with_minus_two_holds_the_partitions_until_the_instance_returns(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("s1", instance="i1"), 0, IMG, CONFIG)
        g.heartbeat(join("m2"), 1, IMG, CONFIG)
        kept = parts(g.heartbeat(beat("s1", 1, {"id-a": {0, 1, 2, 3}}, instance="i1"), 2, IMG, CONFIG))["id-a"]
        g.heartbeat(beat("s1", 1, {"id-a": kept}, instance="i1"), 3, IMG, CONFIG)
        epoch = g.group_epoch
        r = g.heartbeat(beat("s1", -2, instance="i1"), 4, IMG, CONFIG)
        assert (r.error_code, r.member_epoch) == (E.none, -2) and g.group_epoch == epoch
        assert g.members["s1"].member_epoch == -2 and all(g.owner("id-a", p) == "s1" for p in kept)
        # the returning instance takes the partitions over under a new member id, at once
        r = g.heartbeat(join("s1-new", instance="i1"), 6, IMG, CONFIG)
        assert r.error_code == E.none and parts(r) == {"id-a": kept}
        assert "s1" not in g.members and g.static_member_id("i1") == "s1-new"
        g.check_invariants()

    def test_an_instance_id_in_use_is_unreleased(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("s1", instance="i1"), 0, IMG, CONFIG)
        before = g.snapshot()
        r = g.heartbeat(join("s2", instance="i1"), 1, IMG, CONFIG)
        assert r.error_code == E.unreleased_instance_id and g.snapshot() == before

    def test_fenced_instance_and_unknown_instance(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("s1", instance="i1"), 0, IMG, CONFIG)
        assert g.heartbeat(beat("other", 1, {}, instance="i1"), 1, IMG, CONFIG).error_code == E.fenced_instance_id
        assert g.heartbeat(beat("s1", 1, {}, instance="nope"), 1, IMG, CONFIG).error_code == E.unknown_member_id

    def test_a_left_static_member_is_removed_when_its_session_ends(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("s1", instance="i1"), 0, IMG, CONFIG)
        g.heartbeat(beat("s1", -2, instance="i1"), 100, IMG, CONFIG)
        assert g.next_deadline() == 100 + SESSION  # a whole session from its leave
        assert g.tick(SESSION) == []
        assert [f.member_id for f in g.tick(100 + SESSION)] == ["s1"]
        assert g.is_empty() and g.owner("id-a", 0) is None


def test_members_heartbeat_faster_while_the_group_rebalances():
    g = ConsumerGroup("g")
    g.heartbeat(join("m1"), 0, IMG, CONFIG)
    assert g.heartbeat_interval_ms("m1", 10, 5000) == 500  # the epoch just moved
    assert g.heartbeat_interval_ms("m1", 5000, 5000) == 5000  # stable for an interval
    g.heartbeat(join("m2"), 6000, IMG, CONFIG)
    g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}}), 12_000, IMG, CONFIG)  # told to revoke
    assert g.heartbeat_interval_ms("m1", 20_000, 5000) == 500  # m1 has a revocation to finish
    assert g.heartbeat_interval_ms("m2", 20_000, 5000) == 500  # m2 waits for its partitions
    g.heartbeat(beat("m1", 1, {"id-a": set(g.members["m1"].assigned["id-a"])}), 21_000, IMG, CONFIG)
    g.heartbeat(beat("m2", 2, {}), 21_000, IMG, CONFIG)
    assert g.state == "Stable" and g.heartbeat_interval_ms("m2", 26_000, 5000) == 5000


class TestTimers:
    def test_session_timeout_fences(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1"), 0, IMG, CONFIG)
        g.heartbeat(join("m2"), 10_000, IMG, CONFIG)
        assert g.next_deadline() == SESSION
        assert g.tick(SESSION - 1) == []
        fenced = g.tick(SESSION)
        assert [f.member_id for f in fenced] == ["m1"] and fenced[0].reason == "session"
        assert g.next_deadline() == 10_000 + SESSION
        r = g.heartbeat(beat("m2", 2, {}), SESSION + 1, IMG, CONFIG)
        assert parts(r) == {"id-a": {0, 1, 2, 3}}

    def test_an_unacknowledged_revocation_fences_after_the_rebalance_timeout(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1"), 0, IMG, CONFIG)
        g.heartbeat(join("m2"), 0, IMG, CONFIG)
        g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}}), 1000, IMG, CONFIG)  # told to revoke
        for t in range(2000, REBALANCE + 1000, 5000):  # keeps heartbeating, never acks
            assert g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}}), t, IMG, CONFIG).error_code == E.none
            g.heartbeat(beat("m2", 2, {}), t, IMG, CONFIG)
        assert g.next_deadline() == 1000 + REBALANCE
        fenced = g.tick(1000 + REBALANCE)
        assert [(f.member_id, f.reason) for f in fenced] == [("m1", "rebalance")]
        assert g.heartbeat(beat("m1", 1, {}), 1000 + REBALANCE, IMG, CONFIG).error_code == E.unknown_member_id


class TestOffsets:
    def group(self) -> ConsumerGroup:
        g = ConsumerGroup("g")
        g.heartbeat(join("m1"), 0, IMG, CONFIG)
        return g

    def test_commit_rules(self):
        g = self.group()
        assert g.validate_commit("m1", None, 1, transactional=False, api_version=9) == E.none
        assert g.validate_commit("m1", None, 0, transactional=False, api_version=9) == E.stale_member_epoch
        assert g.validate_commit("m1", None, 0, transactional=True, api_version=4) == E.illegal_generation
        assert g.validate_commit("m1", None, 1, transactional=True, api_version=4) == E.none
        assert g.validate_commit("x", None, 1, transactional=False, api_version=9) == E.unknown_member_id
        assert g.validate_commit("", None, -1, transactional=False, api_version=9) == E.unknown_member_id
        assert g.validate_commit("m1", None, 1, transactional=False, api_version=8) == E.unsupported_version
        g.heartbeat(beat("m1", -1), 1, IMG, CONFIG)
        assert g.validate_commit("", None, -1, transactional=False, api_version=2) == E.none

    def test_fetch_rules(self):
        g = self.group()
        assert g.validate_fetch(None, -1) == E.none
        assert g.validate_fetch("m1", 1) == E.none
        assert g.validate_fetch("m1", 7) == E.stale_member_epoch
        assert g.validate_fetch("x", 1) == E.unknown_member_id


class TestPersistence:
    def test_snapshot_round_trips_through_json_and_restores_sessions_from_the_file(self):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1", ("a", "b"), assignor="range"), 0, IMG, CONFIG)
        g.heartbeat(join("m2", None, regex="a|b"), 1, IMG, CONFIG)
        g.heartbeat(beat("m1", 1, {"id-a": {0, 1, 2, 3}, "id-b": {0, 1}}), 2, IMG, CONFIG)
        snap = json.loads(json.dumps(g.snapshot()))
        r = ConsumerGroup.restore("g", snap, now_ms=10_000, session_timeout_ms=SESSION)
        assert r.snapshot() == g.snapshot()
        r.check_invariants()
        assert r.members == g.members and r.state == g.state
        # m1, revoking since 2, keeps the rebalance timeout it had left
        assert r.next_deadline() == 2 + REBALANCE
        # a file without the times (written before they were kept): Apache's reset on load
        for m in snap["members"]:
            del m["last_contact_ms"]
            m.pop("revocation_asked_ms", None)
        old = ConsumerGroup.restore("g", snap, now_ms=100_000, session_timeout_ms=SESSION)
        assert old.next_deadline() == 100_000 + min(SESSION, REBALANCE)
        # the same image: no rebalance after the restore
        m2 = r.members["m2"]
        reply = r.heartbeat(beat("m2", m2.member_epoch, {k: set(v) for k, v in m2.assigned.items()}),
                            10_001, IMG, CONFIG)
        assert reply.error_code == E.none and r.group_epoch == g.group_epoch

    @pytest.mark.parametrize("damage", [
        lambda s: s.pop("members"),
        lambda s: s.update(format=9),
        lambda s: s["members"][0].update(state="weird"),
        lambda s: s["members"][0].update(assigned={"id-a": ["x"]}),
        lambda s: s.update(regexes={"(": []}),
        lambda s: s.update(assignment_epoch=99),
    ])
    def test_a_damaged_snapshot_is_refused(self, damage):
        g = ConsumerGroup("g")
        g.heartbeat(join("m1"), 0, IMG, CONFIG)
        snap = json.loads(json.dumps(g.snapshot()))
        damage(snap)
        with pytest.raises(ValueError):
            ConsumerGroup.restore("g", snap, now_ms=0, session_timeout_ms=SESSION)


def test_reconcile_holds_a_partition_its_old_owner_still_has():
    m = ConsumerMember("m", member_epoch=1, subscribed_names=frozenset({"a"}))
    nxt = reconcile(m, target_epoch=2, target={"id-a": frozenset({0, 1})},
                    owner_epoch=lambda k, p: 1 if p == 1 else -1, owned=(), subscribed=frozenset({"id-a"}),
                    enforce_subscription=False)
    assert nxt.member_epoch == 2 and nxt.assigned == {"id-a": frozenset({0})}
    assert nxt.state is MemberState.UNRELEASED_PARTITIONS and nxt.previous_member_epoch == 1


# --------------------------------------------------------------------------- the model

TOPICS = ("a", "b", "c", "d")
def test_an_illegal_transition_is_refused():
    """Every operation checks the state it leaves the group in against the table: an Empty
    group never becomes Assigning (a join computes the target at once). A group forced
    into that change (a machine bug) refuses it and keeps its recorded state."""
    assert ModernState.EMPTY not in VALID_PREVIOUS[ModernState.ASSIGNING]
    g = ConsumerGroup("g")
    g._put(ConsumerMember("m1"))  # a member slipped in without a heartbeat...
    g._group_epoch = 1  # ... and its epoch bump without a target
    with pytest.raises(IllegalTransition) as e:
        g.tick(0)
    assert (e.value.kind, e.value.old, e.value.new) == ("consumer", "Empty", "Assigning")
    assert g._state is ModernState.EMPTY


def test_each_operation_records_the_state_it_leaves():
    g = ConsumerGroup("g")
    g.heartbeat(join("m1"), 0, IMG, CONFIG)
    g.heartbeat(join("m2"), 0, IMG, CONFIG)
    assert g._state is ModernState.RECONCILING and g.state == "Reconciling"
    g.remove_member("m2")  # a classic LeaveGroup: the epoch rises, no target yet
    assert g._state is ModernState.ASSIGNING and g.state == "Assigning"
    g.tick(SESSION + 1)
    assert g._state is ModernState.EMPTY and g.state == "Empty"
    g.check_invariants()


CLIENTS = ("c0", "c1", "c2", "c3")


class Client:
    """A consumer as the machine's rules expect one to behave: it owns what it was last
    given, and drops what it must revoke only when it acknowledges."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.member_id: str | None = None
        self.epoch = 0
        self.owned: dict[str, set[int]] = {}
        self.given: dict[str, set[int]] = {}  # the last assignment received
        self.names: tuple[str, ...] = ("a",)
        self.regex: str | None = None
        self.instance: str | None = None

    def reset(self) -> None:
        self.member_id, self.epoch, self.owned, self.given = None, 0, {}, {}


class ConsumerGroupMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.g = ConsumerGroup("g")
        self.now = 0
        self.version = 1
        self.topics: dict[str, tuple[str, int]] = {"a": ("id-a-1", 3), "b": ("id-b-1", 2)}
        self.incarnations = itertools.count(2)
        self.clients = [Client(n) for n in CLIENTS]
        self.clients[3].instance = "static-3"
        self.ids = itertools.count()
        self.epochs_seen: dict[str, int] = {}
        self.last_state = self.g.state

    def image(self) -> TopicImage:
        return TopicImage.of(self.version, [TopicInfo(tid, n, p) for n, (tid, p) in self.topics.items()])

    def send(self, c: Client, ack: bool) -> HeartbeatReply:
        if c.member_id is None:
            c.member_id = f"{c.name}-{next(self.ids)}"
            hb = Heartbeat(c.member_id, 0, instance_id=c.instance, rebalance_timeout_ms=REBALANCE,
                           subscribed_topic_names=None if c.regex else c.names, subscribed_topic_regex=c.regex,
                           owned=())
        else:
            owned = tuple((k, tuple(sorted(v))) for k, v in sorted(c.owned.items()) if v)
            hb = Heartbeat(c.member_id, c.epoch, instance_id=c.instance, owned=owned,
                           subscribed_topic_names=None if c.regex else c.names,
                           subscribed_topic_regex=c.regex if c.regex else None)
        r = self.g.heartbeat(hb, self.now, self.image(), CONFIG)
        if r.error_code in (E.unknown_member_id, E.fenced_member_epoch, E.unreleased_instance_id):
            c.reset()
            return r
        assert r.error_code == E.none, r
        assert r.member_id == c.member_id
        last = self.epochs_seen.get(c.member_id, 0)
        assert r.member_epoch >= last, "member epochs never go backwards"
        self.epochs_seen[c.member_id] = r.member_epoch
        c.epoch = r.member_epoch
        if r.assignment is not None:
            c.given = {k: set(v) for k, v in r.assignment.items()}
        if ack:  # done revoking what it was told to give up; consumes what it was given
            c.owned = {k: set(v) for k, v in c.given.items()}
        else:  # still revoking: keeps what it had, and already consumes what is new
            for k, v in c.given.items():
                c.owned.setdefault(k, set()).update(v)
        return r

    @rule(i=st.integers(0, len(CLIENTS) - 1), ack=st.booleans())
    def heartbeat(self, i: int, ack: bool) -> None:
        self.send(self.clients[i], ack)

    @rule(i=st.integers(0, len(CLIENTS) - 1), names=st.sets(st.sampled_from(TOPICS), max_size=3),
          regex=st.sampled_from([None, None, "[ab]", "c|d", ".*"]))
    def resubscribe(self, i: int, names: set[str], regex: str | None) -> None:
        c = self.clients[i]
        c.names, c.regex = tuple(sorted(names)), regex
        if c.member_id is not None:
            self.send(c, ack=False)

    @rule(i=st.integers(0, len(CLIENTS) - 1))
    def leave(self, i: int) -> None:
        c = self.clients[i]
        if c.member_id is None:
            return
        epoch = -2 if c.instance is not None else -1
        r = self.g.heartbeat(Heartbeat(c.member_id, epoch, instance_id=c.instance), self.now, self.image(), CONFIG)
        assert r.error_code in (E.none, E.unknown_member_id)
        c.reset()

    @rule(ms=st.sampled_from([1000, 20_000, 46_000]))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        for f in self.g.tick(self.now):
            for c in self.clients:
                if c.member_id == f.member_id:
                    c.reset()  # it finds out on its next heartbeat; it stops consuming
        d = self.g.next_deadline()
        assert d is None or d > self.now

    @rule(name=st.sampled_from(TOPICS), change=st.sampled_from(["create", "grow", "delete"]))
    def metadata(self, name: str, change: str) -> None:
        if change == "create" and name not in self.topics:
            self.topics[name] = (f"id-{name}-{next(self.incarnations)}", 1)
        elif change == "grow" and name in self.topics:
            tid, n = self.topics[name]
            self.topics[name] = (tid, n + 1)
        elif change == "delete" and name in self.topics:
            del self.topics[name]
        else:
            return
        self.version += 1

    @rule(dt=st.sampled_from([0, 1_000, 30_000]))
    def coordinator_moves(self, dt: int) -> None:
        """Another coordinator restores the group from its snapshot, ``dt`` later: it is in
        the state it was in."""
        snap = json.loads(json.dumps(self.g.snapshot()))
        state = self.g.state
        self.now += dt
        self.g = ConsumerGroup.restore("g", snap, now_ms=self.now, session_timeout_ms=SESSION)
        assert self.g.state == state

    @invariant()
    def every_state_change_is_in_the_table(self) -> None:
        """Each rule makes one operation at most: the change it made is one transition."""
        old, new = ModernState(self.last_state), ModernState(self.g.state)
        assert new is old or old in VALID_PREVIOUS[new], f"{old} -> {new}"
        assert not (old is ModernState.EMPTY and new is ModernState.ASSIGNING)
        self.last_state = self.g.state

    @invariant()
    def no_partition_held_twice(self) -> None:
        self.g.check_invariants()
        # and on the clients' side: a live member consumes only what the group says it holds
        held: dict[tuple[str, int], str] = {}
        for c in self.clients:
            if c.member_id is None or c.member_id not in self.g.members:
                continue
            m = self.g.members[c.member_id]
            for k, ps in c.owned.items():
                for p in ps:
                    assert (k, p) not in held, f"{(k, p)} consumed by {held[(k, p)]} and {c.name}"
                    held[(k, p)] = c.name
                    assert p in m.assigned.get(k, ()) or p in m.pending_revocation.get(k, ()), \
                        f"{c.name} consumes {(k, p)} the group does not give it"

    def teardown(self) -> None:
        # Everyone heartbeats and acknowledges: the group settles with every subscribed
        # partition owned by exactly one member subscribed to it.
        # First the members no client speaks for any more (a static member that left with
        # -2, or whose client was fenced) go when their sessions end.
        self.now += SESSION + 1
        for c in self.clients:
            if c.member_id is not None:
                self.send(c, ack=True)
        self.g.tick(self.now)
        for _ in range(4 * len(CLIENTS) + 4):
            for c in self.clients:
                self.send(c, ack=True)
        live = [c for c in self.clients if c.member_id is not None]
        assert self.g.state == "Stable", self.g.describe(CONFIG.assignors)
        image = self.image()
        for name, (tid, n) in self.topics.items():
            subscribers = [c for c in live if name in self.g._names_of(self.g.members[c.member_id])]
            for p in range(n):
                owners = [c.name for c in live if p in c.owned.get(tid, ())]
                if subscribers:
                    assert len(owners) == 1, (name, p, owners)
                else:
                    assert owners == []
        assert image.version == self.version


ConsumerGroupMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)
TestConsumerGroupMachine = ConsumerGroupMachine.TestCase
