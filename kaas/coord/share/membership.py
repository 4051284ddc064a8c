"""A stand-in for the share-group coordinator's membership, until ShareGroupHeartbeat (76)
exists: the lead replaces ``ProvisionalShareMembership`` with the share-group
coordinator, which implements ``ports.ShareMembership`` and calls
``ShareRuntime.member_left`` when a member leaves or its session times out.

Until then every member id is taken for a member of its group, except those reported
gone through ``left`` (what the heartbeat's leave will do): their requests are refused as
Apache refuses a member whose share session was released (SHARE_SESSION_NOT_FOUND).
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["ProvisionalShareMembership"]

GONE_REMEMBERED = 10_000


class ProvisionalShareMembership:
    """Every member is in its group until reported gone (see the module docstring)."""

    def __init__(self) -> None:
        self._gone: OrderedDict[tuple[str, str], None] = OrderedDict()

    def is_member(self, group_id: str, member_id: str) -> bool:
        return (group_id, member_id) not in self._gone

    def left(self, group_id: str, member_id: str) -> None:
        """``member_id`` left ``group_id`` (the last ``GONE_REMEMBERED`` are remembered)."""
        self._gone[(group_id, member_id)] = None
        self._gone.move_to_end((group_id, member_id))
        while len(self._gone) > GONE_REMEMBERED:
            self._gone.popitem(last=False)
