"""A KIP-848 consumer group on file: ``snapshot`` (the ``consumer`` of the group's offsets
file, JSON-ready) and ``restore`` for the coordinator that takes the group over. Sessions
and revocations under way are restored by the rule every group kind shares
(``domain.groups.sessions``).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NotRequired, Self, TypedDict

from kaas.domain.groups import sessions
from kaas.domain.groups.consumer import topic_regex
from kaas.domain.groups.consumer.core import ConsumerCore
from kaas.domain.groups.consumer.member import Assignment, ClassicMeta, ConsumerMember, MemberState, freeze

__all__ = ["SNAPSHOT_FORMAT", "ClassicMetaRecord", "ConsumerMemberRecord", "ConsumerSnapshot", "StoredConsumerGroup"]

SNAPSHOT_FORMAT = 1


class ClassicMetaRecord(TypedDict):
    """What a classic member of a consumer group has of its own (``ClassicMeta``)."""

    session_timeout_ms: int
    protocols: list[list[str]]
    """Each ``[name, metadata in hex]``."""


class ConsumerMemberRecord(TypedDict):
    """One member of a ``ConsumerSnapshot``; partitions are ``{topic id: [partition, ...]}``."""

    member_id: str
    protocol: str
    """``consumer`` or ``classic``; absent in files written before classic members (read
    as ``consumer``)."""
    classic: NotRequired[ClassicMetaRecord]
    """A classic member's (``protocol`` ``classic``) alone."""
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_names: list[str]
    subscribed_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int
    member_epoch: int
    previous_member_epoch: int
    state: str
    """A ``MemberState`` value."""
    assigned: dict[str, list[int]]
    pending_revocation: dict[str, list[int]]
    target: dict[str, list[int]]
    last_contact_ms: int | None
    """None, or absent in files written before contact times were kept: a whole session
    from the restore."""
    revocation_asked_ms: NotRequired[int]
    """When the revocation under way was asked, for a member with one."""


class ConsumerSnapshot(TypedDict):
    """A KIP-848 consumer group on file, format ``SNAPSHOT_FORMAT``: the ``consumer`` of its
    offsets file (``ConsumerGroup.snapshot`` writes it, ``ConsumerGroup.restore`` checks it)."""

    format: int
    group_epoch: int
    assignment_epoch: int
    signature: str
    """The metadata signature the last target assignment was computed from."""
    regexes: dict[str, list[str]]
    """Each subscribed regex with the topics it resolved to."""
    members: list[ConsumerMemberRecord]


class StoredConsumerGroup(ConsumerCore):
    """A consumer group's snapshot and its restore."""

    def snapshot(self) -> ConsumerSnapshot:
        """What a successor coordinator needs to carry on: epochs, members with their
        subscriptions, epochs and assignments, the target assignment, the resolved regexes
        and the metadata signature the last target was computed from (JSON-ready)."""
        return {
            "format": SNAPSHOT_FORMAT, "group_epoch": self._group_epoch, "assignment_epoch": self._assignment_epoch,
            "signature": self._signature,
            "regexes": {r: sorted(ts) for r, ts in sorted(self._regexes.items())},
            "members": [self._member_record(m) for m in self._members.values()],
        }

    def _member_record(self, m: ConsumerMember) -> ConsumerMemberRecord:
        rec: ConsumerMemberRecord = {
            "member_id": m.member_id, "protocol": "consumer" if m.classic is None else "classic",
            "instance_id": m.instance_id, "rack_id": m.rack_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_names": sorted(m.subscribed_names), "subscribed_regex": m.subscribed_regex,
            "server_assignor": m.server_assignor, "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
            "state": m.state.value, "assigned": _encode(m.assigned),
            "pending_revocation": _encode(m.pending_revocation), "target": _encode(self.target(m.member_id)),
            "last_contact_ms": self._sessions.last_contact(m.member_id),
        }
        if m.classic is not None:
            rec["classic"] = {"session_timeout_ms": m.classic.session_timeout_ms,
                              "protocols": [[n, md.hex()] for n, md in m.classic.protocols]}
        if m.member_id in self._asked:
            rec["revocation_asked_ms"] = self._asked[m.member_id]
        return rec


    @classmethod
    def restore(cls, group_id: str, snap: ConsumerSnapshot, *, now_ms: int, session_timeout_ms: int) -> Self:
        """The group as ``snapshot()`` left it, for a coordinator taking it over at
        ``now_ms``: each member's session ends by the rule all group kinds share
        (``domain.groups.sessions.restored_deadline`` of its last contact on file), and so does a
        revocation under way (of when it was asked, with the rebalance timeout). A file
        without those times gives a whole session (rebalance timeout) from ``now_ms``, as
        Apache's load does.

        Raises:
            ValueError: the snapshot is malformed (a corrupt file: reported, never reset);
                each field is checked here (``snap`` is read from a file, typed only by
                its record).
        """
        try:
            if snap.get("format") != SNAPSHOT_FORMAT:
                raise ValueError(f"unknown format {snap.get('format')!r}")
            g = cls(group_id)
            g._group_epoch = int(snap["group_epoch"])
            g._assignment_epoch = int(snap["assignment_epoch"])
            g._signature = str(snap["signature"])
            g._regexes = {str(r): frozenset(map(str, ts)) for r, ts in snap["regexes"].items()}
            for r in g._regexes:
                g._compiled[r] = topic_regex.compile_regex(r)
            for raw in snap["members"]:
                g._restore_member(raw, now_ms, session_timeout_ms)
            if g._assignment_epoch > g._group_epoch:
                raise ValueError("assignment epoch ahead of the group epoch")
            g._state = g._derive_state()  # where it starts: not a transition
            return g
        except (KeyError, TypeError, AttributeError, topic_regex.InvalidRegex) as exc:
            raise ValueError(f"bad consumer group state: {exc!r}") from None

    def _restore_member(self, raw: ConsumerMemberRecord, now_ms: int, session_timeout_ms: int) -> None:
        """One member as ``snapshot`` wrote it, with its target, its session and any
        revocation under way."""
        protocol = raw.get("protocol", "consumer")
        if protocol not in ("consumer", "classic"):
            raise ValueError(f"member protocol {protocol!r} is not known here")
        classic = None
        if protocol == "classic":
            c = raw["classic"]
            classic = ClassicMeta(int(c["session_timeout_ms"]),
                                  tuple((str(n), bytes.fromhex(md)) for n, md in c["protocols"]))
        m = ConsumerMember(
            member_id=str(raw["member_id"]), instance_id=raw["instance_id"], rack_id=raw["rack_id"],
            client_id=str(raw["client_id"]), client_host=str(raw["client_host"]),
            subscribed_names=frozenset(map(str, raw["subscribed_names"])),
            subscribed_regex=raw["subscribed_regex"], server_assignor=raw["server_assignor"],
            rebalance_timeout_ms=int(raw["rebalance_timeout_ms"]), member_epoch=int(raw["member_epoch"]),
            previous_member_epoch=int(raw["previous_member_epoch"]), state=MemberState(raw["state"]),
            assigned=_decode(raw["assigned"]), pending_revocation=_decode(raw["pending_revocation"]),
            classic=classic)
        if m.member_id in self._members:
            raise ValueError(f"member {m.member_id} twice")
        for tp in m.owned_keys():  # on file, two owners is a corrupt file (in memory, _put asserts)
            if tp in self._owners:
                raise ValueError(f"{tp} held by {self._owners[tp]} and {m.member_id}")
        self._put(m)
        target = _decode(raw["target"])
        if target:
            self._target[m.member_id] = target
        session_ms = session_timeout_ms if classic is None else classic.session_timeout_ms
        self._sessions.restore(m.member_id, _time(raw.get("last_contact_ms")), session_ms, now_ms)
        if m.state is MemberState.UNREVOKED_PARTITIONS:
            asked = _time(raw.get("revocation_asked_ms"))
            self._rebalance[m.member_id] = (m.member_epoch,
                                            sessions.restored_deadline(asked, m.rebalance_timeout_ms, now_ms))
            self._asked[m.member_id] = now_ms if asked is None else min(asked, now_ms)


def _time(raw: int | None) -> int | None:
    """A time on file (ms), or None when absent (a file from before it was kept)."""
    return None if raw is None else int(raw)


def _encode(a: Assignment) -> dict[str, list[int]]:
    return {k: sorted(ps) for k, ps in sorted(a.items())}


def _decode(raw: Mapping[str, Iterable[int]]) -> dict[str, frozenset[int]]:
    return freeze({str(k): [int(p) for p in ps] for k, ps in raw.items()})
