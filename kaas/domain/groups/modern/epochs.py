"""A modern group member's epoch check, the rule consumer (KIP-848) and share (KIP-932)
groups share: a member that sends an epoch ahead of the one the coordinator gave it, or
behind it and not its previous epoch (a retry whose answer was lost), is fenced
(FENCED_MEMBER_EPOCH) and must rejoin. Apache's
``throwIfConsumerGroupMemberEpochIsInvalid`` and ``throwIfShareGroupMemberEpochIsInvalid``.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["epoch_fenced"]


def epoch_fenced(got: int, have: int, previous: int, *, retry_ok: bool = True) -> Literal["greater", "smaller"] | None:
    """Why a member that sends ``got`` while the group knows it at ``have`` is fenced, or
    None when it is not.

    Args:
        got: the epoch in the request (not 0, a join, which the caller handles).
        have: the member's epoch as the group knows it.
        previous: the epoch before ``have``: a request carrying it is a retry.
        retry_ok: the retry may be accepted (a consumer member: only while it owns no more
            than its assignment).

    Returns:
        ``"greater"`` (the member is ahead), ``"smaller"`` (behind, and not an accepted
        retry) or None.
    """
    if got > have:
        return "greater"
    if got < have and (got != previous or not retry_ok):
        return "smaller"
    return None
