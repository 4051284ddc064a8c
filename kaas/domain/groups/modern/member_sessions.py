"""Modern group members' sessions: when each one's session ends unless it is heard from,
when it was last heard from (its *last contact*, kept on file) and when the file last
recorded that, for consumer (KIP-848) and share (KIP-932) groups alike. The rules are the
ones every group kind shares (``domain.groups.sessions``): a successor restores a
member's session with ``restored_deadline`` of its last contact on file, and the
contact is written again once it lags by ``PERSIST_FRACTION`` of the session.

Pure: no I/O, times handed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kaas.domain.groups import sessions

__all__ = ["MemberSessions"]


@dataclass(slots=True)
class MemberSessions:
    """Per member id: the session deadline, the last contact, the last contact on file.

    Invariants: a member with a deadline has a last contact; the machine that owns this
    forgets a member it removes (``forget``).
    """

    deadlines: dict[str, int] = field(default_factory=dict)
    contacts: dict[str, int] = field(default_factory=dict)
    filed: dict[str, int] = field(default_factory=dict)

    def copy(self) -> MemberSessions:
        return MemberSessions(dict(self.deadlines), dict(self.contacts), dict(self.filed))

    def heard_from(self, member_id: str, now_ms: int, timeout_ms: int) -> bool:
        """The member was heard from: its session starts again. Returns whether its last
        contact on file is late enough to write the group (``contact_persist_due``)."""
        self.deadlines[member_id] = now_ms + timeout_ms
        self.contacts[member_id] = now_ms
        return sessions.contact_persist_due(self.filed.get(member_id), now_ms, timeout_ms)

    def contact_due(self, member_id: str, timeout_ms: int) -> bool:
        """Is the member's last contact on file late enough to write the group again?"""
        contact = self.contacts.get(member_id)
        return contact is not None and sessions.contact_persist_due(self.filed.get(member_id), contact, timeout_ms)

    def mark_filed(self) -> None:
        """The group was written: every member's last contact is on file."""
        self.filed = dict(self.contacts)

    def restore(self, member_id: str, last_contact_ms: int | None, timeout_ms: int, now_ms: int) -> None:
        """A member restored at ``now_ms`` with its last contact on file (None: the file
        does not say): its session ends at ``sessions.restored_deadline``."""
        self.deadlines[member_id] = sessions.restored_deadline(last_contact_ms, timeout_ms, now_ms)
        self.contacts[member_id] = now_ms if last_contact_ms is None else min(last_contact_ms, now_ms)
        if last_contact_ms is not None:
            self.filed[member_id] = last_contact_ms

    def forget(self, member_id: str) -> None:
        """The member left the group."""
        self.deadlines.pop(member_id, None)
        self.contacts.pop(member_id, None)
        self.filed.pop(member_id, None)

    def last_contact(self, member_id: str) -> int | None:
        return self.contacts.get(member_id)

    def expired(self, now_ms: int) -> list[str]:
        """The members whose session ended by ``now_ms``, in the order they were first seen."""
        return [mid for mid, deadline in self.deadlines.items() if deadline <= now_ms]

    def next_deadline(self) -> int | None:
        return min(self.deadlines.values(), default=None)
