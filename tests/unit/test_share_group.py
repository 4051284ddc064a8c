"""The pure share-group machine (``kaas.domain.groups.share.group``): joins, leaves, epochs,
fencing, the session timer, the group's maximum size, the initialization of share
partitions before they are assigned (Apache 4.1+), and snapshots (the ``simple`` assignor:
test_share_assignor.py)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from kio.schema.errors import ErrorCode as E

from kaas.domain.groups.consumer.group import TopicImage, TopicInfo
from kaas.domain.groups.modern.state import ModernState
from kaas.domain.groups.share.group import (
    INITIALIZE_RETRY_MS,
    VALID_PREVIOUS,
    ShareConfig,
    ShareGroup,
    ShareHeartbeat,
    ShareMember,
    ShareReply,
    validate_share_heartbeat,
)
from kaas.domain.groups.transitions import IllegalTransition

IMAGE = TopicImage.of(1, [TopicInfo("id-a", "a", 3), TopicInfo("id-b", "b", 1)])
CFG = ShareConfig(session_timeout_ms=45_000, max_size=3)


def settled(g: ShareGroup, r: ShareReply) -> ShareReply:
    """What the runtime does after a heartbeat: initialize what it names."""
    if r.initialize:
        assert g.mark_initialized(r.initialize)
    return r


def join(g: ShareGroup, mid: str, topics=("a",), now: int = 0, image: TopicImage = IMAGE):
    return settled(g, g.heartbeat(ShareHeartbeat(mid, 0, subscribed_topic_names=tuple(topics)), now, image, CFG))


def beat(g: ShareGroup, mid: str, epoch: int, now: int = 0, image: TopicImage = IMAGE):
    return settled(g, g.heartbeat(ShareHeartbeat(mid, epoch), now, image, CFG))


def test_partitions_are_assigned_once_initialized():
    """Apache 4.1+: the first heartbeat of a new group assigns nothing and starts the
    initialization of the subscribed partitions; once initialized, the next heartbeat
    bumps the group epoch and assigns them."""
    g = ShareGroup("g")
    r = g.heartbeat(ShareHeartbeat("m1", 0, subscribed_topic_names=("a",)), 0, IMAGE, CFG)
    assert (r.error_code, r.member_epoch, r.assignment, r.changed) == (E.none, 1, {}, True)
    assert r.initialize == {"id-a": frozenset({0, 1, 2})}
    # not initialized yet (the runtime has not written it): nothing more to do
    r = g.heartbeat(ShareHeartbeat("m1", 1), 10, IMAGE, CFG)
    assert (r.member_epoch, r.assignment, r.initialize, r.changed) == (1, None, None, False)
    assert g.mark_initialized({"id-a": frozenset({0, 1, 2})}) and not g.initializing
    assert not g.mark_initialized({"id-a": frozenset({0, 1})})  # nothing new
    r = g.heartbeat(ShareHeartbeat("m1", 1), 20, IMAGE, CFG)
    assert (r.member_epoch, r.assignment, r.initialize) == (2, {"id-a": frozenset({0, 1, 2})}, None)
    # a second member joining later gets its share at once
    r = join(g, "m2")
    assert r.member_epoch == 3 and r.assignment and r.initialize is None


def test_an_initialization_not_done_is_tried_again_after_the_retry_interval():
    g = ShareGroup("g")
    r = g.heartbeat(ShareHeartbeat("m1", 0, subscribed_topic_names=("a",)), 0, IMAGE, CFG)
    assert r.initialize == {"id-a": frozenset({0, 1, 2})}
    assert g.heartbeat(ShareHeartbeat("m1", 1), INITIALIZE_RETRY_MS - 1, IMAGE, CFG).initialize is None
    r = g.heartbeat(ShareHeartbeat("m1", 1), INITIALIZE_RETRY_MS, IMAGE, CFG)
    assert r.initialize == {"id-a": frozenset({0, 1, 2})} and r.changed


def test_join_heartbeat_leave_and_epochs():
    g = ShareGroup("g")
    join(g, "m1")
    r = beat(g, "m1", 1)
    assert (r.error_code, r.member_epoch) == (E.none, 2)
    assert r.assignment == {"id-a": frozenset({0, 1, 2})}
    r = beat(g, "m1", 2, 10)
    assert (r.error_code, r.member_epoch, r.assignment, r.changed) == (E.none, 2, None, False)
    r2 = join(g, "m2")
    assert r2.member_epoch == 3 and g.group_epoch == 3
    r = beat(g, "m1", 2, 20)
    assert r.member_epoch == 3 and r.assignment is not None  # takes the new epoch at once
    # that answer lost: the retry with the previous epoch is answered with the current one
    # (Apache 4.4), no assignment (unchanged since the answer lost), nothing written
    r = beat(g, "m1", 2, 20)
    assert (r.error_code, r.member_epoch, r.assignment, r.changed, r.retried) == (E.none, 3, None, False, True)
    assert g.group_epoch == 3
    # ... and a full request (the subscription sent again) carries the assignment
    r = g.heartbeat(ShareHeartbeat("m1", 2, subscribed_topic_names=("a",)), 20, IMAGE, CFG)
    assert (r.error_code, r.member_epoch, r.assignment) == (E.none, 3, g.members["m1"].assignment)
    assert beat(g, "m1", 1, 20).error_code == E.fenced_member_epoch  # older than the previous
    assert beat(g, "m1", 4, 20).error_code == E.fenced_member_epoch  # ahead of the coordinator
    assert beat(g, "zz", 3, 20).error_code == E.unknown_member_id
    r = beat(g, "m2", -1, 30)
    assert (r.member_epoch, set(g.members), g.group_epoch) == (-1, {"m1"}, 4)


def test_a_retry_after_a_lost_answer_is_accepted_through_later_bumps():
    """The previous epoch is the one before the last handed out: a member whose answer
    was lost, and whose group moved on meanwhile, comes back with it and takes the newest
    epoch (and its assignment) at once."""
    g = ShareGroup("g")
    join(g, "m1")
    beat(g, "m1", 1)  # epoch 2, its partitions (answer received)
    join(g, "m2")  # group epoch 3
    assert beat(g, "m1", 2).member_epoch == 3  # this answer is lost
    join(g, "m3")  # group epoch 4
    r = beat(g, "m1", 2)
    assert (r.error_code, r.member_epoch) == (E.none, 4) and r.assignment == g.members["m1"].assignment
    assert g.members["m1"].previous_member_epoch == 3
    assert beat(g, "m1", 2).error_code == E.fenced_member_epoch  # no longer the previous one


def test_a_null_rack_keeps_the_members_rack():
    g = ShareGroup("g")
    g.heartbeat(ShareHeartbeat("m1", 0, rack_id="r1", subscribed_topic_names=("a",)), 0, IMAGE, CFG)
    r = g.heartbeat(ShareHeartbeat("m1", 1), 1, IMAGE, CFG)  # null: unchanged
    assert g.members["m1"].rack_id == "r1" and not r.changed
    g.heartbeat(ShareHeartbeat("m1", 1, rack_id="r2"), 2, IMAGE, CFG)
    assert g.members["m1"].rack_id == "r2" and g.describe()["members"][0]["rack_id"] == "r2"


def test_bad_requests_and_max_size():
    g = ShareGroup("g")
    assert g.heartbeat(ShareHeartbeat("", 0, subscribed_topic_names=("a",)), 0, IMAGE, CFG).error_code \
        == E.invalid_request
    assert g.heartbeat(ShareHeartbeat("m", 0), 0, IMAGE, CFG).error_code == E.invalid_request
    # Apache's checks of the request itself (GroupCoordinatorService), in its order
    cases = [(ShareHeartbeat(" ", 1), "g", "MemberId can't be empty."),
             (ShareHeartbeat("m", 1), " ", "GroupId can't be empty."),
             (ShareHeartbeat("m", 1, rack_id=""), "g", "RackId can't be empty."),
             (ShareHeartbeat("m", 0, subscribed_topic_names=()), "g",
              "SubscribedTopicNames must be set in first request."),
             (ShareHeartbeat("m", -2), "g", "MemberEpoch is invalid.")]
    for hb, gid, msg in cases:
        r = validate_share_heartbeat(hb, gid)
        assert r is not None and (r.error_code, r.error_message) == (E.invalid_request, msg)
    assert validate_share_heartbeat(ShareHeartbeat("m", 3), "g") is None
    assert g.heartbeat(ShareHeartbeat("m", 1, rack_id=" "), 0, IMAGE, CFG).error_code == E.invalid_request
    assert not g.members
    for m in ("m1", "m2", "m3"):
        assert join(g, m).error_code == E.none
    assert join(g, "m4").error_code == E.group_max_size_reached


def test_session_timer_fences_and_reassigns():
    g = ShareGroup("g")
    join(g, "m1", now=0)
    join(g, "m2", now=30_000)
    assert g.next_deadline() == 45_000
    assert g.tick(45_000, IMAGE) == ["m1"]
    assert set(g.members) == {"m2"} and g.members["m2"].assignment == {"id-a": frozenset({0, 1, 2})}


def test_topic_growth_and_deletion():
    g = ShareGroup("g")
    join(g, "m1")
    beat(g, "m1", 1)
    grown = TopicImage.of(2, [TopicInfo("id-a", "a", 5), TopicInfo("id-b", "b", 1)])
    r = beat(g, "m1", 2, 5, grown)  # the new partitions are initialized first
    # a new epoch, the assignment as it was: not sent (Apache's hasAssignedPartitionsChanged)
    assert r.member_epoch == 3 and r.assignment is None and g.members["m1"].assignment == {"id-a": frozenset(range(3))}
    r = beat(g, "m1", 3, 6, grown)
    assert r.member_epoch == 4 and r.assignment == {"id-a": frozenset(range(5))}
    # the topic is deleted and made again (a new id): initialized afresh
    again = TopicImage.of(3, [TopicInfo("id-a2", "a", 2)])
    r = beat(g, "m1", 4, 7, again)
    assert r.assignment == {} and g.initialized == {"id-a2": frozenset({0, 1})}
    assert beat(g, "m1", 5, 8, again).assignment == {"id-a2": frozenset({0, 1})}


def test_snapshot_round_trips():
    g = ShareGroup("g")
    join(g, "m1")
    join(g, "m2", topics=("a", "b"))
    g.heartbeat(ShareHeartbeat("m3", 0, subscribed_topic_names=("b", "c")), 0,
                TopicImage.of(2, [*IMAGE.by_id.values(), TopicInfo("id-c", "c", 2)]), CFG)  # c initializing
    back = ShareGroup.restore("g", g.snapshot(), now_ms=100, session_timeout_ms=1000)
    # heard from at 0: each member keeps the session it had (the rule of ``domain.groups.sessions``)
    assert back.snapshot() == g.snapshot() and back.next_deadline() == 1000
    untimed = g.snapshot()
    for m in untimed["members"]:
        del m["last_contact_ms"]
    assert ShareGroup.restore("g", untimed, now_ms=100, session_timeout_ms=1000).next_deadline() == 1100
    assert back.members["m1"].previous_member_epoch == g.members["m1"].previous_member_epoch == 0
    assert back.initializing == {"id-c": (frozenset({0, 1}), 100)}
    # a file written before initialization was kept: what was assigned was initialized
    old = g.snapshot()
    del old["initialized"], old["initializing"]
    assert ShareGroup.restore("g", old, now_ms=0, session_timeout_ms=1).initialized == \
        {"id-a": frozenset({0, 1, 2}), "id-b": frozenset({0})}


@given(st.lists(st.tuples(st.sampled_from(["join", "beat", "leave"]), st.sampled_from(["m1", "m2", "m3"])),
                max_size=25), st.integers(-1, 12))
def test_only_the_current_or_previous_epoch_is_accepted(script, probe):
    """Whatever the group went through, a member's heartbeat with its current epoch or the
    epoch before it is accepted and answered at the group's assignment epoch; any other
    positive epoch is FENCED_MEMBER_EPOCH, and a refused heartbeat changes nothing."""
    g = ShareGroup("g")
    for i, (what, mid) in enumerate(script):
        if what == "join":
            join(g, mid, now=i)
        elif what == "beat" and mid in g.members:
            beat(g, mid, g.members[mid].member_epoch, now=i)
        elif what == "leave" and mid in g.members:
            beat(g, mid, -1, now=i)
    for mid, m in list(g.members.items()):
        if probe <= 0:
            continue
        before = g.snapshot()
        ok = probe in (m.member_epoch, m.previous_member_epoch)
        r = beat(g, mid, probe, now=100)
        if ok:
            assert (r.error_code, r.member_epoch) == (E.none, g.assignment_epoch)
        else:
            assert r.error_code == E.fenced_member_epoch and g.snapshot() == before


# ---------------------------------------------------------------------------- transitions

def test_an_illegal_transition_is_refused():
    """Every operation checks the state it leaves the group in against the table: a member
    joins at the assignment epoch, so an Empty group never becomes Reconciling. A group
    whose members slipped in behind its back (a machine bug, forced here) refuses it."""
    assert ModernState.EMPTY not in VALID_PREVIOUS[ModernState.RECONCILING]
    assert not VALID_PREVIOUS[ModernState.ASSIGNING]  # a share group assigns as its epoch moves
    g = ShareGroup("g", group_epoch=1, assignment_epoch=1)
    g.members = {"m1": ShareMember("m1", 1, ("a",)), "m2": ShareMember("m2", 1, ("a",))}
    with pytest.raises(IllegalTransition) as e:
        g.heartbeat(ShareHeartbeat("m2", -1), 0, IMAGE, CFG)  # m2 leaves: m1 lags the new epoch
    assert (e.value.kind, e.value.old, e.value.new) == ("share", "Empty", "Reconciling")
    assert g._state is ModernState.EMPTY


def test_reported_state_is_empty_or_stable():
    """Apache's share groups report Empty or Stable only; the state checked underneath
    follows the members' epochs."""
    g = ShareGroup("g")
    join(g, "m1")
    join(g, "m2")
    assert g._state is ModernState.RECONCILING and g.state == "Stable"  # m1 is behind m2's epoch
    beat(g, "m1", g.members["m1"].member_epoch)
    assert g._state is ModernState.STABLE and g.state == "Stable"
    g.tick(CFG.session_timeout_ms, IMAGE)
    assert g._state is ModernState.EMPTY and g.state == "Empty"


SHARE_CLIENTS = ("m1", "m2", "m3", "m4")
SHARE_TOPICS = ("a", "b", "c")


class ShareGroupMachine(RuleBasedStateMachine):
    """Members join, heartbeat (some with a lost answer's previous epoch), change their
    subscriptions, leave and die; topics appear, grow and disappear; the runtime
    initializes what heartbeats name, late or never; the coordinator moves. No
    operation makes a transition outside the table, and the epochs move together."""

    @initialize()
    def setup(self) -> None:
        self.g = ShareGroup("g")
        self.now = 0
        self.version = 1
        self.topics: dict[str, tuple[str, int]] = {"a": ("id-a-1", 3), "b": ("id-b-1", 1)}
        self.incarnations = itertools.count(2)
        self.pending: list[dict[str, frozenset[int]]] = []  # initializations not yet done
        self.last_state = self.g._state
        self.max_epoch = 0

    def image(self) -> TopicImage:
        return TopicImage.of(self.version, [TopicInfo(tid, n, p) for n, (tid, p) in self.topics.items()])

    def send(self, hb: ShareHeartbeat) -> ShareReply:
        r = self.g.heartbeat(hb, self.now, self.image(), CFG)
        assert r.error_code in (E.none, E.unknown_member_id, E.fenced_member_epoch, E.group_max_size_reached), r
        if r.initialize:
            self.pending.append(r.initialize)
        return r

    @rule(mid=st.sampled_from(SHARE_CLIENTS), topics=st.sets(st.sampled_from(SHARE_TOPICS), min_size=1))
    def join(self, mid: str, topics: set[str]) -> None:
        self.send(ShareHeartbeat(mid, 0, subscribed_topic_names=tuple(sorted(topics))))

    @rule(mid=st.sampled_from(SHARE_CLIENTS), retry=st.booleans(),
          topics=st.none() | st.sets(st.sampled_from(SHARE_TOPICS), min_size=1))
    def heartbeat(self, mid: str, retry: bool, topics: set[str] | None) -> None:
        m = self.g.members.get(mid)
        if m is None:
            return
        epoch = m.previous_member_epoch if retry and m.previous_member_epoch > 0 else m.member_epoch
        self.send(ShareHeartbeat(mid, epoch, subscribed_topic_names=None if topics is None else tuple(sorted(topics))))

    @rule(mid=st.sampled_from(SHARE_CLIENTS))
    def leave(self, mid: str) -> None:
        self.send(ShareHeartbeat(mid, -1))

    @rule(done=st.booleans())
    def runtime_initializes(self, done: bool) -> None:
        if self.pending:
            what = self.pending.pop(0)
            if done:
                self.g.mark_initialized(what)

    @rule(ms=st.sampled_from([1_000, 20_000, 46_000]))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        self.g.tick(self.now, self.image())
        d = self.g.next_deadline()
        assert d is None or d > self.now

    @rule(name=st.sampled_from(SHARE_TOPICS), change=st.sampled_from(["create", "grow", "delete"]))
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
        snap = json.loads(json.dumps(self.g.snapshot()))
        self.now += dt
        back = ShareGroup.restore("g", snap, now_ms=self.now, session_timeout_ms=CFG.session_timeout_ms)
        assert back._state is self.g._state and back.snapshot() == snap
        self.g = back

    @invariant()
    def every_state_change_is_in_the_table(self) -> None:
        """Each rule makes one operation (``tick`` removes members one at a time, each
        change checked; what it adds up to is in the table too)."""
        old, new = self.last_state, self.g._state
        assert new is old or old in VALID_PREVIOUS[new], f"{old} -> {new}"
        assert new is not ModernState.ASSIGNING
        assert self.g.state == ("Empty" if new is ModernState.EMPTY else "Stable")
        self.last_state = new

    @invariant()
    def the_group_is_as_the_machine_leaves_it(self) -> None:
        self.g.check_invariants()
        assert self.g.group_epoch == self.g.assignment_epoch >= self.max_epoch
        self.max_epoch = self.g.group_epoch
        for m in self.g.members.values():
            assert m.member_epoch <= self.g.assignment_epoch


ShareGroupMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestShareGroupMachine = ShareGroupMachine.TestCase
