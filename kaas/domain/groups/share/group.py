"""A KIP-932 share group's membership as a pure machine: ShareGroupHeartbeat (76) and the
session timer, over the members, the group epoch and the partitions assigned to each.

A share group has no revocation phase: partitions are shared, so a member takes the
target assignment of the group epoch on its next heartbeat (its member epoch becomes the
group epoch). The group epoch rises when a member joins, leaves, is fenced, changes its
subscription, or a subscribed topic changes (created, deleted, grown); the assignment is
then computed again by the ``simple`` assignor (``domain.groups.share.assignor``), as Apache's.

As Apache's ``GroupMetadataManager`` (4.1 and later), only partitions whose share state
the group *initialized* are assigned. A heartbeat that finds subscribed partitions
neither initialized nor initializing (or initializing for longer than
``INITIALIZE_RETRY_MS``) marks them initializing and names them in its reply
(``ShareReply.initialize``); the runtime initializes them and ``mark_initialized`` s them
(in kaas nothing is written at the leaders, so the heartbeat's own write of the group
records them initialized); the next heartbeat finds initialized partitions no one
is assigned, bumps the group epoch and assigns them. So a new group's first member gets
its partitions on its second heartbeat, not its first (Apache initializes through its
share coordinator after answering the first). A deleted topic leaves both sets.

No I/O and no clock: times are handed in (``now_ms``). The runtime
(``kaas.coord.group.share.runtime``) writes ``snapshot()`` into the group's file before it
answers a heartbeat that changed the group (or whose member's last contact on file is a
third of a session late), and a successor ``restore``s it: sessions follow the rule all
group kinds share (``domain.groups.sessions``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from kio.schema.errors import ErrorCode

from kaas.domain.groups.modern.epochs import epoch_fenced
from kaas.domain.groups.modern.member_sessions import MemberSessions
from kaas.domain.groups.modern.state import ModernState, derive_state, settle
from kaas.domain.groups.modern.subscriptions import subscribed_metadata
from kaas.domain.groups.modern.topic_image import TopicImage
from kaas.domain.groups.share.assignor import Assignment, simple_assign

__all__ = ["LEAVE_EPOCH", "VALID_PREVIOUS", "ShareConfig", "ShareGroup", "ShareHeartbeat", "ShareMember",
           "ShareMemberRecord", "ShareReply", "ShareSnapshot", "simple_assign", "validate_share_heartbeat"]

LEAVE_EPOCH = -1
INITIALIZE_RETRY_MS = 30_000  # Apache's group.share.initialize.retry.interval.ms

_EMPTY, _ASSIGNING, _RECONCILING, _STABLE = (ModernState.EMPTY, ModernState.ASSIGNING, ModernState.RECONCILING,
                                             ModernState.STABLE)
VALID_PREVIOUS: dict[ModernState, frozenset[ModernState]] = {
    _EMPTY: frozenset({_ASSIGNING, _RECONCILING, _STABLE}),
    _ASSIGNING: frozenset(),
    _RECONCILING: frozenset({_ASSIGNING, _STABLE}),
    _STABLE: frozenset({_EMPTY, _ASSIGNING, _RECONCILING}),
}
"""For each state (``domain.groups.modern.state``, a member reconciled when it holds the
assignment epoch), the states a share group may enter it from. A share group computes its
assignment in the step that moves its group epoch, so it never enters Assigning (one
restored in it, from a file written otherwise, leaves it at its next heartbeat); and a
member joins at the assignment epoch, so an Empty group becomes Stable, never
Reconciling. It reports Empty or Stable only, as Apache's ``ShareGroup``."""


@dataclass(frozen=True, slots=True)
class ShareConfig:
    """What a heartbeat is handled with: the group's ``share.session.timeout.ms`` and the
    broker's ``group.share.max.size``."""

    session_timeout_ms: int
    max_size: int


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    member_id: str
    member_epoch: int
    rack_id: str | None = None  # None: unchanged
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareReply:
    error_code: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    assignment: Assignment | None = None  # None: unchanged since the member's last answer
    changed: bool = False  # the group's state changed (write it before answering)
    initialize: Assignment | None = None  # partitions to initialize once the file says so
    retried: bool = False  # the member came back with its previous epoch (an answer was lost)


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


def validate_share_heartbeat(hb: ShareHeartbeat, group_id: str) -> ShareReply | None:
    """The request checks Apache makes before it looks at any group
    (``GroupCoordinatorService.throwIfShareGroupHeartbeatRequestIsInvalid``, 4.4): an
    INVALID_REQUEST reply, or None. Blank means empty or only whitespace; a null RackId
    is allowed (it leaves the member's rack as it is)."""
    def invalid(msg: str) -> ShareReply:
        return ShareReply(ErrorCode.invalid_request, msg)

    if not hb.member_id.strip():
        return invalid("MemberId can't be empty.")
    if not group_id.strip():
        return invalid("GroupId can't be empty.")
    if _blank(hb.rack_id):
        return invalid("RackId can't be empty.")
    if hb.member_epoch == 0 and not hb.subscribed_topic_names:
        return invalid("SubscribedTopicNames must be set in first request.")
    if hb.member_epoch < LEAVE_EPOCH:
        return invalid("MemberEpoch is invalid.")
    return None


class ShareMemberRecord(TypedDict):
    """One member of a ``ShareSnapshot`` (``ShareMember.to_json``). Files written before
    ``previous_member_epoch`` read as -1, before ``client_id``/``client_host`` as ``""``."""

    member_id: str
    member_epoch: int
    previous_member_epoch: int
    subscribed: list[str]
    rack_id: str | None
    client_id: str
    client_host: str
    assignment: dict[str, list[int]]
    """``{topic id: [partition, ...]}``."""
    last_contact_ms: int | None
    """None (or absent): a whole session from the restore."""


class ShareSnapshot(TypedDict):
    """A share group on file: the ``share`` of its offsets file, which gives the format
    (``ShareGroup.snapshot`` writes it, ``ShareGroup.restore`` checks it). Files written
    before ``metadata`` read as none, before ``initialized`` as holding initialized what
    was assigned, before ``initializing`` as none."""

    group_epoch: int
    assignment_epoch: int
    metadata: dict[str, list[str | int]]
    """Each subscribed topic as the last assignment saw it: ``[topic id, partitions]``."""
    members: list[ShareMemberRecord]
    initialized: dict[str, list[int]]
    initializing: dict[str, list[int]]
    """Topic id to partitions (when they began initializing is not kept)."""


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed: tuple[str, ...]
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    assignment: Assignment = field(default_factory=dict)
    # the epoch before the last one handed out: a heartbeat carrying it is a retry whose
    # answer was lost, accepted as Apache does (-1: none)
    previous_member_epoch: int = -1
    # its assignment as last handed out with a new epoch (None: unknown since a restore):
    # an epoch move that leaves it as it was sends none, as Apache
    reconciled: Assignment | None = None

    def to_json(self, last_contact: int | None) -> ShareMemberRecord:
        """The member on file, with when it was last heard from."""
        return {"member_id": self.member_id, "member_epoch": self.member_epoch,
                "previous_member_epoch": self.previous_member_epoch, "subscribed": list(self.subscribed),
                "rack_id": self.rack_id, "client_id": self.client_id, "client_host": self.client_host,
                "assignment": {t: sorted(ps) for t, ps in sorted(self.assignment.items())},
                "last_contact_ms": last_contact}


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    # the subscribed topics as the last assignment saw them: name -> (topic id, partitions)
    metadata: dict[str, tuple[str, int]] = field(default_factory=dict)
    # partitions whose share state the group initialized: topic id -> partitions
    initialized: dict[str, frozenset[int]] = field(default_factory=dict)
    # ... and those being initialized: topic id -> (partitions, since when, ms)
    initializing: dict[str, tuple[frozenset[int], int]] = field(default_factory=dict)
    # the members' session deadlines and last contacts (kept on file)
    sessions: MemberSessions = field(default_factory=MemberSessions)
    _state: ModernState = field(default=_EMPTY, init=False, compare=False, repr=False)  # as last settled

    def __post_init__(self) -> None:
        self._state = self._derive_state()  # where it starts (a new, copied or restored group): not a transition

    # ------------------------------------------------------------------ queries

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}

    def next_deadline(self) -> int | None:
        return self.sessions.next_deadline()

    def copy(self) -> ShareGroup:
        return ShareGroup(self.group_id, self.group_epoch, self.assignment_epoch,
                          {k: replace(m) for k, m in self.members.items()}, dict(self.metadata),
                          dict(self.initialized), dict(self.initializing), self.sessions.copy())

    def _derive_state(self) -> ModernState:
        return derive_state(bool(self.members), self.group_epoch, self.assignment_epoch,
                            (m.member_epoch == self.assignment_epoch for m in self.members.values()))

    def _settle(self) -> None:
        """Record the state an operation left the group in, checked against ``VALID_PREVIOUS``.

        Raises:
            IllegalTransition: the change is not in the table (a bug in the machine).
        """
        self._state = settle("share", VALID_PREVIOUS, self._state, self._derive_state())

    def check_invariants(self) -> None:
        """Raise AssertionError if the group is not as its machine leaves it."""
        assert self.group_epoch >= self.assignment_epoch
        assert set(self.sessions.deadlines) == set(self.members) == set(self.sessions.contacts)
        assert self._state is self._derive_state(), f"settled {self._state}, is {self._derive_state()}"

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(self, hb: ShareHeartbeat, now_ms: int, image: TopicImage, config: ShareConfig) -> ShareReply:
        """One ShareGroupHeartbeat (v1: the client names its member id).

        As Apache: a member whose answer was lost may come back with its previous epoch
        and is answered as if it had sent the current one; the assignment is in the
        answer when the member joins, sends its subscription (a full request, as a
        client does after a failed heartbeat) or moves to a new epoch whose assignment
        differs from the one it was last given."""
        bad = validate_share_heartbeat(hb, self.group_id)
        if bad is not None:
            return bad
        if hb.member_epoch == LEAVE_EPOCH:
            if hb.member_id not in self.members:
                return ShareReply(ErrorCode.unknown_member_id, f"Member {hb.member_id} is not a member.")
            self.remove(hb.member_id, image)
            return ShareReply(ErrorCode.none, None, hb.member_id, LEAVE_EPOCH, changed=True)
        m = self.members.get(hb.member_id)
        changed = False
        if hb.member_epoch == 0:
            if m is None:
                if len(self.members) >= config.max_size:
                    return ShareReply(ErrorCode.group_max_size_reached,
                                      f"The share group has reached its maximum capacity of {config.max_size}.")
                m = ShareMember(hb.member_id, 0, ())
                self.members[hb.member_id] = m
                changed = True
        elif m is None:
            return ShareReply(ErrorCode.unknown_member_id, f"Member {hb.member_id} is not a member.")
        elif (fenced := epoch_fenced(hb.member_epoch, m.member_epoch, m.previous_member_epoch)) is not None:
            return ShareReply(ErrorCode.fenced_member_epoch, _fenced_message(fenced, hb.member_epoch, m))
        reply = self._heartbeat(hb, m, changed, now_ms, image, config)
        self._settle()
        return reply

    def _heartbeat(self, hb: ShareHeartbeat, m: ShareMember, changed: bool, now_ms: int, image: TopicImage,
                   config: ShareConfig) -> ShareReply:
        """A heartbeat of a member the group has (or just took in), its epoch checked."""
        retried = 0 < hb.member_epoch < m.member_epoch
        info = (hb.rack_id if hb.rack_id is not None else m.rack_id, hb.client_id, hb.client_host)
        if (m.rack_id, m.client_id, m.client_host) != info:
            m.rack_id, m.client_id, m.client_host = info
            changed = True
        if hb.subscribed_topic_names is not None and tuple(sorted(set(hb.subscribed_topic_names))) != m.subscribed:
            m.subscribed = tuple(sorted(set(hb.subscribed_topic_names)))
            changed = True
            self.group_epoch += 1
        changed |= self._forget_deleted(image)
        if self.assignment_epoch == self.group_epoch and (self._metadata(image) != self.metadata
                                                          or self._initialized_unassigned(image)):
            self.group_epoch += 1  # a subscribed topic changed, or partitions were initialized (one bump)
            changed = True
        if self.assignment_epoch != self.group_epoch:
            self._assign(image)
            changed = True
        changed |= self.sessions.heard_from(m.member_id, now_ms, config.session_timeout_ms)
        new_assignment = False
        if m.member_epoch != self.assignment_epoch:
            m.previous_member_epoch, m.member_epoch = m.member_epoch, self.assignment_epoch
            new_assignment, m.reconciled = m.reconciled != m.assignment, dict(m.assignment)
            changed = True
        full = hb.member_epoch == 0 or hb.subscribed_topic_names is not None
        send = dict(m.assignment) if full or new_assignment else None
        init = self._start_initializing(image, now_ms)
        if changed or init:  # the runtime writes ``snapshot()`` before it answers
            self.mark_filed()
        return ShareReply(ErrorCode.none, None, m.member_id, m.member_epoch, send, changed or bool(init),
                          init or None, retried)

    def mark_initialized(self, partitions: Mapping[str, frozenset[int]]) -> bool:
        """The share state of ``partitions`` (topic id -> partitions) was initialized: they
        become assignable (Apache's ``initializeShareGroupState``; the group epoch moves at
        the next heartbeat). True when the group changed."""
        changed = False
        for tid, ps in partitions.items():
            done = self.initialized.get(tid, frozenset())
            if not ps <= done:
                self.initialized[tid] = done | ps
                changed = True
            busy = self.initializing.get(tid)
            if busy is not None and busy[0] & ps:
                rest = busy[0] - ps
                if rest:
                    self.initializing[tid] = (rest, busy[1])
                else:
                    del self.initializing[tid]
                changed = True
        return changed

    def mark_filed(self) -> None:
        """``snapshot()`` was written: the members' last contacts are on file."""
        self.sessions.mark_filed()

    def remove(self, member_id: str, image: TopicImage) -> None:
        """The member leaves (or is fenced): the group epoch rises, the rest is reassigned."""
        del self.members[member_id]
        self.sessions.forget(member_id)
        self.group_epoch += 1
        self._assign(image)
        self._settle()

    def tick(self, now_ms: int, image: TopicImage) -> list[str]:
        """Fence the members whose session ended; their ids."""
        gone = sorted(self.sessions.expired(now_ms))
        for mid in gone:
            self.remove(mid, image)
        return gone

    def _metadata(self, image: TopicImage) -> dict[str, tuple[str, int]]:
        return subscribed_metadata(self.subscribed_topics(), image)

    def _initialized_unassigned(self, image: TopicImage) -> bool:
        """Apache's ``initializedAssignmentPending``: the initialized partitions of a
        subscribed topic are not what the members hold of it."""
        if not self.members or not self.initialized:
            return False
        for name in self.subscribed_topics():
            t = image.by_name.get(name)
            done = self.initialized.get(t.topic_id) if t is not None else None
            if t is not None and done is not None and \
                    frozenset().union(*(m.assignment.get(t.topic_id, ()) for m in self.members.values())) != done:
                return True
        return False

    def _start_initializing(self, image: TopicImage, now_ms: int) -> Assignment:
        """Apache's ``subscribedTopicsChangeMap``: the subscribed partitions neither
        initialized nor initializing since less than ``INITIALIZE_RETRY_MS``, now
        initializing."""
        out: Assignment = {}
        for name in sorted(self.subscribed_topics()):
            t = image.by_name.get(name)
            if t is None:
                continue
            busy = self.initializing.get(t.topic_id)
            recent = busy[0] if busy is not None and now_ms - busy[1] < INITIALIZE_RETRY_MS else frozenset()
            todo = frozenset(range(t.partitions)) - self.initialized.get(t.topic_id, frozenset()) - recent
            if todo:
                out[t.topic_id] = todo
                self.initializing[t.topic_id] = ((busy[0] if busy is not None else frozenset()) | todo, now_ms)
        return out

    def _forget_deleted(self, image: TopicImage) -> bool:
        """Drop the initialized and initializing partitions of topics gone (a topic made
        again has a new id). True when something was dropped."""
        gone = [t for t in (*self.initialized, *self.initializing) if t not in image.by_id]
        for t in gone:
            self.initialized.pop(t, None)
            self.initializing.pop(t, None)
        return bool(gone)

    def _assign(self, image: TopicImage) -> None:
        target = simple_assign({mid: m.subscribed for mid, m in self.members.items()},
                               {mid: m.assignment for mid, m in self.members.items()}, image, self.initialized)
        for mid, m in self.members.items():
            m.assignment = target[mid]
        self.metadata = self._metadata(image)
        self.assignment_epoch = self.group_epoch

    # ------------------------------------------------------------------ admin

    def describe(self) -> dict[str, Any]:
        """ShareGroupDescribe's view (topic ids; the runtime names them)."""
        return {"group_id": self.group_id, "group_state": self.state, "group_epoch": self.group_epoch,
                "assignment_epoch": self.assignment_epoch, "assignor_name": "simple",
                "members": [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": list(m.subscribed), "assignment": dict(m.assignment)}
                            for m in sorted(self.members.values(), key=lambda m: m.member_id)]}

    # ------------------------------------------------------------------ on file

    def snapshot(self) -> ShareSnapshot:
        return {"group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "metadata": {n: [tid, p] for n, (tid, p) in sorted(self.metadata.items())},
                "members": [m.to_json(self.sessions.last_contact(m.member_id))
                            for m in sorted(self.members.values(), key=lambda m: m.member_id)],
                "initialized": {t: sorted(ps) for t, ps in sorted(self.initialized.items())},
                "initializing": {t: sorted(ps) for t, (ps, _since) in sorted(self.initializing.items())}}

    @classmethod
    def restore(cls, group_id: str, snap: ShareSnapshot, *, now_ms: int, session_timeout_ms: int) -> ShareGroup:
        """The group a snapshot holds; each member's session ends by the rule all group
        kinds share (``domain.groups.sessions.restored_deadline`` of its last contact on file; a
        whole session from ``now_ms`` when the file has none, as Apache's load), and what
        was initializing counts from ``now_ms`` (as Apache's replay stamps it). A
        snapshot from before initialization was kept holds as initialized what was assigned.

        Raises:
            ValueError: the snapshot does not parse (each field is checked here: ``snap``
                is read from a file, typed only by its record).
        """
        try:
            members = {}
            member_sessions = MemberSessions()
            for mj in snap["members"]:
                raw_seen = mj.get("last_contact_ms")
                m = ShareMember(str(mj["member_id"]), int(mj["member_epoch"]), tuple(str(t) for t in mj["subscribed"]),
                                mj.get("rack_id"), str(mj.get("client_id", "")), str(mj.get("client_host", "")),
                                {str(t): frozenset(int(p) for p in ps) for t, ps in mj["assignment"].items()},
                                previous_member_epoch=int(mj.get("previous_member_epoch", -1)))
                member_sessions.restore(m.member_id, None if raw_seen is None else int(raw_seen),
                                        session_timeout_ms, now_ms)
                members[m.member_id] = m
            metadata = {str(n): (str(v[0]), int(v[1])) for n, v in snap.get("metadata", {}).items()}
            if "initialized" in snap:
                initialized = {str(t): frozenset(int(p) for p in ps) for t, ps in snap["initialized"].items()}
            else:
                initialized = {}
                for m in members.values():
                    for t, ps in m.assignment.items():
                        initialized[t] = initialized.get(t, frozenset()) | ps
            initializing = {str(t): (frozenset(int(p) for p in ps), now_ms)
                            for t, ps in snap.get("initializing", {}).items()}
            return cls(group_id, int(snap["group_epoch"]), int(snap["assignment_epoch"]), members, metadata,
                       initialized, initializing, member_sessions)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise ValueError(f"bad share group state: {exc!r}") from None


def _fenced_message(fenced: str, got: int, m: ShareMember) -> str:
    if fenced == "greater":
        return (f"The share group member has a greater member epoch ({got}) than the one known by the group "
                f"coordinator ({m.member_epoch}). The member must abandon all its partitions and rejoin.")
    return (f"The share group member has a smaller member epoch ({got}) than the one known by the group "
            f"coordinator ({m.member_epoch}), and it does not match the previous member epoch "
            f"({m.previous_member_epoch}). The member must abandon all its partitions and rejoin.")
