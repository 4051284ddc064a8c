"""A classic group on file: ``snapshot`` (what a coordinator taking the group over needs),
``persist_due`` (when to write it again) and ``restore``. The format is the
``membership`` of the group's offsets file (docs/groups.rst); a rebalance in progress is
kept, and each member's last heartbeat, so that a restored member's session ends by the
rule every group kind shares (``domain.groups.sessions``).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

from kaas.domain.groups.classic.core import _COMPLETING, _DEAD, _EMPTY, _PREPARING, _STABLE, GroupCore
from kaas.domain.groups.classic.records import (
    HEARTBEAT_PERSIST_FRACTION,
    ClassicMemberRecord,
    ClassicSnapshot,
    Member,
    restored_session_deadline,
)

__all__ = ["StoredGroup"]


class StoredGroup(GroupCore):
    """A classic group's snapshot, the rule for writing it again, and its restore."""

    def snapshot(self, now_ms: int) -> ClassicSnapshot | None:
        """The membership to keep on file, so that a coordinator taking the group over
        carries on where this one stopped (Apache keeps only a Stable generation, in
        ``__consumer_offsets``; here a rebalance in progress is kept too).

        For a group with members: its state, generation, protocol, leader, when it entered
        its state (``since_ms``: for a rebalance, when the join or sync phase began) and
        every member with its metadata, assignment (``None`` while it has none) and
        ``last_heartbeat_ms``: when it was last heard from, ``now_ms`` for a member whose
        JoinGroup or SyncGroup is parked here (it is waiting on us, so alive). For an Empty
        group its generation, protocol type and when it became Empty. ``None`` for a Dead
        group.
        """
        if self._state is _DEAD:
            return None
        if self._state is _EMPTY:  # since_ms: when it became Empty (offset retention, KIP-211)
            return {"state": _EMPTY.value, "generation": self._generation_id,
                    "protocol_type": self._protocol_type, "since_ms": self._state_since_ms}
        return {
            "state": self._state.value,
            "generation": self._generation_id,
            "protocol_type": self._protocol_type,
            "protocol": self._protocol_name,
            "leader": self._leader_id,
            "since_ms": self._state_since_ms,
            "members": [_member_record(m, now_ms) for m in self._members.values()],
        }

    def persist_due(self, on_file: ClassicSnapshot | None, now_ms: int) -> bool:
        """Should ``snapshot(now_ms)`` be written over ``on_file`` (the membership the
        group's file holds)?

        Yes when the membership changed (state, generation, leader, members, assignments),
        or when some member was heard from at least ``HEARTBEAT_PERSIST_FRACTION`` of its
        session after the time on file, so that the file's heartbeat times lag the truth
        by about that much at most, at a cost of one write per group per that interval
        (and none while nobody is heard from, e.g. a group whose members all died). Never
        for a group that never had a generation (reading a group must not create its file)
        nor for a Dead one.
        """
        snap = self.snapshot(now_ms)
        if snap is None:
            return False
        if on_file is None:
            return not (self._state is _EMPTY and self._generation_id == 0)
        if _shape(snap) != _shape(on_file):
            return True
        seen_on_file = {}
        for raw in on_file.get("members") or ():
            if isinstance(raw, Mapping):  # (read from a file: may be anything)
                seen_on_file[raw.get("member_id")] = raw.get("last_heartbeat_ms")
        for m in self._members.values():
            old = seen_on_file.get(m.member_id)
            if not isinstance(old, int):
                return True  # written before heartbeat times were kept
            if _last_seen_ms(m, now_ms) - old >= m.session_timeout_ms * HEARTBEAT_PERSIST_FRACTION:
                return True
        return False

    @classmethod
    def restore(cls, group_id: str, snap: ClassicSnapshot, *, now_ms: int, **settings: object) -> Self:
        """The group as ``snapshot()`` left it, for a coordinator taking it over at
        ``now_ms`` (this coordinator's wall clock; the file's times are the writer's).

        A Stable group keeps its generation, leader, members and assignments. A group
        caught in a rebalance stays in it: PreparingRebalance keeps its members (each
        must rejoin, or have its session end), CompletingRebalance its new generation and
        leader (each member must send SyncGroup); the phase ends at its rebalance timeout
        counted from when it began (``since_ms``), but not before the latest restored
        member's session deadline below, so that no live member is dropped before it could rejoin.

        Each member's session ends at ``restored_session_deadline``
        (``domain.groups.sessions.restored_deadline`` of its last heartbeat on file). A member
        the file gives no heartbeat time for (a file written before they were kept) gets a
        whole session from ``now_ms``, as Apache does on load.

        Raises:
            ValueError: the snapshot is malformed.
        """
        try:
            g = cls(group_id, now_ms=now_ms, **settings)  # type: ignore[arg-type]
            g._generation_id = int(snap["generation"])
            pt = snap.get("protocol_type")
            g._protocol_type = None if pt is None else str(pt)
            state = snap.get("state")
            if state not in _RESTORABLE:
                raise ValueError(f"bad group snapshot: state {state!r}")
            members = snap.get("members") or []
            since = snap.get("since_ms")  # (None: a file older than that)
            g._state_since_ms = now_ms if since is None else min(int(since), now_ms)
            if state == _EMPTY.value or not members:
                return g  # since_ms: when it became Empty
            proto = snap.get("protocol")
            g._protocol_name = None if proto is None else str(proto)
            g._leader_id = str(snap["leader"])
            for raw in members:
                m = _restore_member(raw, now_ms)
                g._members[m.member_id] = m
                if m.group_instance_id is not None:
                    g._static[m.group_instance_id] = m.member_id
            if g._leader_id not in g._members:
                raise ValueError(f"leader {g._leader_id!r} is not a member")
            g._restore_phase(str(state))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"bad group snapshot: {exc!r}") from None
        return g

    def _restore_phase(self, state: str) -> None:
        """Put a restored group with members in its state: Stable as it was; a rebalance
        phase ends at its rebalance timeout from ``since_ms``, but not before the latest
        member's session deadline (no live member is dropped before it could rejoin)."""
        if state == _STABLE.value:
            if self._protocol_name is None or any(m.assignment is None for m in self._members.values()):
                raise ValueError("a Stable member without an assignment or protocol")
            self._state = _STABLE
            return
        phase_end = max(
            self._state_since_ms + self._rebalance_timeout_ms(),
            max(m.session_deadline_ms for m in self._members.values()),
        )
        if state == _PREPARING.value:
            self._state = _PREPARING
            self._join_deadline_ms = phase_end
            return
        if self._protocol_name is None:
            raise ValueError("CompletingRebalance without a protocol")
        self._state = _COMPLETING
        self._pending_sync = set(self._members)
        self._sync_deadline_ms = phase_end


def _member_record(m: Member, now_ms: int) -> ClassicMemberRecord:
    return {
        "member_id": m.member_id,
        "group_instance_id": m.group_instance_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "session_timeout_ms": m.session_timeout_ms,
        "rebalance_timeout_ms": m.rebalance_timeout_ms,
        "protocol_type": m.protocol_type,
        "protocols": [[name, md.hex()] for name, md in m.protocols],
        "assignment": None if m.assignment is None else m.assignment.hex(),
        "last_heartbeat_ms": _last_seen_ms(m, now_ms),
    }


def _restore_member(raw: ClassicMemberRecord, now_ms: int) -> Member:
    """A member as ``snapshot`` wrote it, its session ending at ``restored_session_deadline``
    of its last heartbeat on file (a whole session from ``now_ms`` when the file has none).
    Each field is checked here (``raw`` is read from a file, typed only by its record):
    ``KeyError``, ``TypeError``, ``AttributeError`` or ``ValueError`` for one that does not
    match."""
    iid = raw["group_instance_id"]
    seen = raw.get("last_heartbeat_ms")
    assignment = raw.get("assignment")
    m = Member(
        member_id=str(raw["member_id"]),
        group_instance_id=None if iid is None else str(iid),
        client_id=str(raw["client_id"]),
        client_host=str(raw["client_host"]),
        session_timeout_ms=int(raw["session_timeout_ms"]),
        rebalance_timeout_ms=int(raw["rebalance_timeout_ms"]),
        protocol_type=str(raw["protocol_type"]),
        protocols=tuple((str(n), bytes.fromhex(md)) for n, md in raw["protocols"]),
        last_heartbeat_ms=now_ms if seen is None else min(int(seen), now_ms),
        assignment=None if assignment is None else bytes.fromhex(assignment),
    )
    if seen is not None:
        m.grace_until_ms = restored_session_deadline(int(seen), m.session_timeout_ms, now_ms)
    return m

_RESTORABLE = (_EMPTY.value, _PREPARING.value, _COMPLETING.value, _STABLE.value)


def _last_seen_ms(m: Member, now_ms: int) -> int:
    """When ``m`` was last heard from: now if its JoinGroup or SyncGroup is parked here."""
    if m.join_key is not None or m.sync_key is not None:
        return now_ms
    return m.last_heartbeat_ms


def _shape(snap: ClassicSnapshot) -> object:
    """A snapshot without its members' heartbeat times: what a membership change changes."""
    members = snap.get("members")
    if not isinstance(members, list):
        return dict(snap)
    stripped = [{k: v for k, v in raw.items() if k != "last_heartbeat_ms"} if isinstance(raw, Mapping) else raw
                for raw in members]
    return {**snap, "members": stripped}

