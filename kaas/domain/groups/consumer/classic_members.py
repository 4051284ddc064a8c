"""Classic-protocol members inside a KIP-848 consumer group, and the online conversions
between a classic group and a consumer group (Apache's ``group.consumer.migration.policy``).

A rolling upgrade moves an application's consumers from the classic protocol to the
consumer protocol one process at a time, so for a while one group has members of both.
Apache keeps such a group a *consumer* group and serves its classic members through their
own requests; kaas does the same, with the same rules:

* **upgrade**: the first ConsumerGroupHeartbeat for a classic group whose members use the
  ``consumer`` embedded protocol turns it into a consumer group (``upgrade_snapshot``):
  each classic member keeps its partitions, at member epoch = the classic generation, and
  the new member's arrival bumps the group epoch like any join. Members that were in the
  middle of a classic rebalance are answered REBALANCE_IN_PROGRESS and join again.
* **classic members of a consumer group**: a JoinGroup is a full heartbeat of that member
  (``join``), answered at once with its member epoch as the generation; the partitions
  it must give up are revoked the classic way: its Heartbeat answers
  REBALANCE_IN_PROGRESS while it has something to revoke or to catch up on
  (``heartbeat``), it joins again with what it still owns (cooperative protocols list
  their owned partitions; eager ones revoke everything before joining), and SyncGroup
  hands it what it may own now (``sync``). A partition is still never owned by two
  members: the consumer group's reconciliation is the same for both kinds.
* **downgrade**: when the last consumer-protocol member leaves (or is fenced) and only
  classic members remain, the group becomes a classic group again
  (``downgrade_snapshot``) at generation = the group epoch, each member keeping its
  partitions, and a rebalance starts so that the members agree on a new generation.

The policy: ``bidirectional`` (Kafka 4's default), ``upgrade``, ``downgrade`` or
``disabled``. Without upgrade, a consumer-protocol member cannot join a classic group with
members (GROUP_ID_NOT_FOUND, as Apache); a classic member can always join a consumer group
(INCONSISTENT_GROUP_PROTOCOL only when its protocols do not match the other classic
members').

Pure: the embedded protocol's bytes are decoded and encoded by the caller
(``kaas.wire.consumer_protocol``), which passes topic names; topic ids come from the
``TopicImage``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kaas.domain.groups.classic.records import ClassicMemberRecord, ClassicSnapshot, GroupState
from kaas.domain.groups.consumer.group import SNAPSHOT_FORMAT, ConsumerGroup
from kaas.domain.groups.consumer.heartbeat import GroupConfig, Heartbeat
from kaas.domain.groups.consumer.member import ClassicMeta, ConsumerMember, MemberState
from kaas.domain.groups.consumer.persistence import ConsumerMemberRecord, ConsumerSnapshot
from kaas.domain.groups.modern.topic_image import TopicImage

__all__ = ["MIGRATION_POLICIES", "ClassicJoin", "ClassicMember", "JoinResult", "downgrade_enabled",
           "downgrade_snapshot", "heartbeat", "join", "leave", "supports_protocols", "sync", "upgrade_enabled",
           "upgrade_snapshot"]

MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")
PROTOCOL_TYPE = "consumer"


def upgrade_enabled(policy: str) -> bool:
    return policy.lower() in ("bidirectional", "upgrade")


def downgrade_enabled(policy: str) -> bool:
    return policy.lower() in ("bidirectional", "downgrade")


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A classic member's JoinGroup, its subscription decoded (topic names)."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    topics: tuple[str, ...]
    owned: Mapping[str, frozenset[int]]  # what it still owns, by topic name (eager: nothing)
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class JoinResult:
    error_code: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_name: str | None = None
    changed: bool = False
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ClassicMember:
    """A member of a classic group, as an upgrade reads it (subscription and assignment
    decoded by the caller; ``assigned`` None while it has none)."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    topics: tuple[str, ...]
    rack_id: str | None
    assigned: Mapping[str, frozenset[int]] | None


def supports_protocols(group: ConsumerGroup, protocol_type: str, names: Iterable[str]) -> bool:
    """May a classic member offering ``names`` join? (Apache
    ``ConsumerGroup.supportsClassicProtocols``): the ``consumer`` protocol type, some
    protocol, and one name every classic member already in the group offers too."""
    offered = set(names)
    if protocol_type != PROTOCOL_TYPE or not offered:
        return False
    for m in group.members.values():
        if m.classic is not None:
            offered &= {n for n, _ in m.classic.protocols}
    return bool(offered)


def _member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember | ErrorCode:
    """Apache ``validateConsumerGroupMember``: the member by instance id (static) or id."""
    if instance_id is None:
        m = group.members.get(member_id)
        return ErrorCode.unknown_member_id if m is None else m
    mid = group.static_member_id(instance_id)
    if mid is None:
        return ErrorCode.unknown_member_id
    if mid != member_id:
        return ErrorCode.fenced_instance_id
    return group.members[mid]


def _names_to_ids(parts: Mapping[str, frozenset[int]], image: TopicImage) -> tuple[tuple[str, tuple[int, ...]], ...]:
    out = []
    for name, ps in sorted(parts.items()):
        t = image.by_name.get(name)
        if t is not None:
            out.append((t.topic_id, tuple(sorted(p for p in ps if 0 <= p < t.partitions))))
    return tuple(out)


def join(group: ConsumerGroup, j: ClassicJoin, now_ms: int, image: TopicImage, config: GroupConfig,
         new_member_id: Callable[[], str]) -> JoinResult:
    """A classic member's JoinGroup to a consumer group with members (Apache
    ``classicGroupJoinToConsumerGroup``); its ``member_id`` is known or freshly minted
    by the caller (MEMBER_ID_REQUIRED is the caller's)."""
    names = [n for n, _ in j.protocols]
    if not supports_protocols(group, j.protocol_type, names):
        return JoinResult(ErrorCode.inconsistent_group_protocol, j.member_id,
                          message=f"Member {j.member_id}'s protocols are not supported.")
    existing: ConsumerMember | None = group.members.get(j.member_id)
    if existing is None and j.instance_id is not None:
        sid = group.static_member_id(j.instance_id)
        existing = group.members.get(sid) if sid == j.member_id else None
    epoch = existing.member_epoch if existing is not None and existing.member_epoch > 0 else 0
    hb = Heartbeat(member_id=j.member_id, member_epoch=epoch, instance_id=j.instance_id, rack_id=j.rack_id,
                   rebalance_timeout_ms=j.rebalance_timeout_ms, subscribed_topic_names=tuple(j.topics),
                   owned=_names_to_ids(j.owned, image), client_id=j.client_id, client_host=j.client_host)
    reply = group.heartbeat(hb, now_ms, image, config, new_member_id=new_member_id,
                            classic=ClassicMeta(j.session_timeout_ms, j.protocols))
    if reply.error_code != ErrorCode.none:
        return JoinResult(reply.error_code, j.member_id, message=reply.error_message)
    return JoinResult(ErrorCode.none, reply.member_id or j.member_id, reply.member_epoch, names[0], reply.changed)


def sync(group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int,
         protocol_type: str | None, protocol_name: str | None) -> tuple[ErrorCode, ConsumerMember | None]:
    """A classic member's SyncGroup (Apache ``classicGroupSyncToConsumerGroup``): (NONE,
    the member, whose ``assigned`` is its assignment) or (the error, None)."""
    m = _member(group, member_id, instance_id)
    if isinstance(m, ErrorCode):
        return m, None
    if m.classic is None:
        return ErrorCode.unknown_member_id, None
    if generation_id != m.member_epoch:
        return ErrorCode.illegal_generation, None
    if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or \
            (protocol_name is not None and protocol_name != m.classic.protocols[0][0]):
        return ErrorCode.inconsistent_group_protocol, None
    if group.group_epoch > m.member_epoch and m.state is not MemberState.UNREVOKED_PARTITIONS:
        return ErrorCode.rebalance_in_progress, None
    return ErrorCode.none, m


def heartbeat(group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int,
              now_ms: int) -> ErrorCode:
    """A classic member's Heartbeat (Apache ``classicGroupHeartbeatToConsumerGroup``): its
    session starts again; REBALANCE_IN_PROGRESS when it must join again to catch up with
    the group epoch, to revoke, or to collect partitions that are free now."""
    m = _member(group, member_id, instance_id)
    if isinstance(m, ErrorCode):
        return m
    if m.classic is None:
        return ErrorCode.unknown_member_id
    if generation_id != m.member_epoch:
        return ErrorCode.illegal_generation
    group.renew_session(m.member_id, now_ms, m.classic.session_timeout_ms)
    if m.member_epoch < group.group_epoch or m.state is MemberState.UNREVOKED_PARTITIONS or (
            m.state is MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(m.member_id)):
        return ErrorCode.rebalance_in_progress
    return ErrorCode.none


def leave(group: ConsumerGroup, members: Iterable[tuple[str, str | None]]) -> list[tuple[str, str | None, ErrorCode]]:
    """A classic LeaveGroup to a consumer group: each (member id, instance id) with its
    result; the ones that left are removed (the group epoch rises)."""
    out = []
    for member_id, instance_id in members:
        if instance_id is not None and not member_id:
            m = _static(group, instance_id)
        else:
            m = _member(group, member_id, instance_id)
        if isinstance(m, ErrorCode):
            out.append((member_id, instance_id, m))
            continue
        group.remove_member(m.member_id)
        out.append((m.member_id, instance_id, ErrorCode.none))
    return out


def _static(group: ConsumerGroup, instance_id: str) -> ConsumerMember | ErrorCode:
    """A static member named by its instance id alone (LeaveGroup v3+ with no member id)."""
    mid = group.static_member_id(instance_id)
    return ErrorCode.unknown_member_id if mid is None else group.members[mid]


def upgrade_snapshot(members: Iterable[ClassicMember], generation: int, image: TopicImage) -> ConsumerSnapshot:
    """The consumer group (``ConsumerGroup.snapshot`` format, for ``ConsumerGroup.restore``)
    that a classic group becomes (Apache ``ConsumerGroup.fromClassicGroup``): the group and
    assignment epochs are the classic generation; each member keeps its assignment (of
    topics that exist), as its current and target assignment, at member epoch = the
    generation; a member with no assignment yet holds nothing."""
    taken: set[tuple[str, int]] = set()
    out_members: list[ConsumerMemberRecord] = []
    for m in members:
        assigned: dict[str, list[int]] = {}
        for tid, parts in _names_to_ids(m.assigned or {}, image):
            free = [p for p in parts if (tid, p) not in taken]
            taken.update((tid, p) for p in free)
            if free:
                assigned[tid] = free
        out_members.append({
            "member_id": m.member_id, "protocol": "classic",
            "classic": {"session_timeout_ms": m.session_timeout_ms,
                        "protocols": [[n, md.hex()] for n, md in m.protocols]},
            "instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id,
            "client_host": m.client_host, "subscribed_names": sorted(set(m.topics)), "subscribed_regex": None,
            "server_assignor": None, "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "member_epoch": generation, "previous_member_epoch": -1, "state": MemberState.STABLE.value,
            "assigned": assigned, "pending_revocation": {}, "target": assigned, "last_contact_ms": None})
    return {"format": SNAPSHOT_FORMAT, "group_epoch": generation, "assignment_epoch": generation,
            "signature": "", "regexes": {}, "members": out_members}


def downgrade_snapshot(group: ConsumerGroup, leaving: str | None, image: TopicImage, now_ms: int,
                       encode: Callable[[list[tuple[str, frozenset[int]]], int], bytes],
                       version_of: Callable[[bytes], int]) -> ClassicSnapshot:
    """The classic group (``domain.groups.classic.group.Group.snapshot`` format, for ``Group.restore``;
    its state in classic's vocabulary, ``domain.groups.classic.records``)
    that a consumer group of classic members becomes once ``leaving`` (its last
    consumer-protocol member) is gone (Apache ``ClassicGroup.fromConsumerGroup``): at
    generation = the group epoch, each member with its current partitions encoded in its
    subscription's version, in PreparingRebalance, so that the members join a new
    generation together.

    Raises:
        ValueError: a remaining member does not speak the classic protocol, or they share
            no protocol name.
    """
    members = [m for mid, m in group.members.items() if mid != leaving]
    if not members or any(m.classic is None for m in members):
        raise ValueError("not every remaining member speaks the classic protocol")
    common: list[str] | None = None
    for m in members:
        assert m.classic is not None
        names = [n for n, _ in m.classic.protocols]
        common = names if common is None else [n for n in common if n in names]
    if not common:
        raise ValueError("the classic members share no protocol")
    out_members: list[ClassicMemberRecord] = []
    for m in members:
        assert m.classic is not None
        by_name = [(image.by_id[k].name, ps) for k, ps in m.assigned.items() if k in image.by_id]
        version = version_of(m.classic.protocols[0][1])
        out_members.append({
            "member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "session_timeout_ms": m.classic.session_timeout_ms,
            "rebalance_timeout_ms": m.rebalance_timeout_ms, "protocol_type": PROTOCOL_TYPE,
            "protocols": [[n, md.hex()] for n, md in m.classic.protocols],
            "assignment": encode(by_name, version).hex(), "last_heartbeat_ms": now_ms})
    return {"state": GroupState.PREPARING_REBALANCE.value, "generation": group.group_epoch,
            "protocol_type": PROTOCOL_TYPE, "protocol": common[0], "leader": members[0].member_id, "since_ms": now_ms,
            "members": out_members}
