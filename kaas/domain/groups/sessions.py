"""The session rule every group kind shares across coordinator moves: classic groups
(``domain.groups.classic.group``), consumer-protocol groups (KIP-848, ``domain.groups.consumer.group``) and
share groups (KIP-932, ``domain.groups.share.group``). docs/groups.rst states the rule, its bound
and a proof sketch.

A group's membership lives in memory on its coordinator and on file for its successor.
For each member the file holds ``P``, its *last contact*: when a coordinator last heard
from it. A coordinator that takes the group over at ``R`` (its wall clock) gives the
member, with ``s`` its session timeout and ``g = grace_ms(s)``::

    restored_deadline(P, s, R) = max(P + s, min(R + g, P + s + g))

* ``P + s``: the member keeps the time it had left, as if nothing had moved;
* ``R + g``: a member whose time left is short gets ``g`` from the restore to find its new
  coordinator and reach it (``R`` is the first moment any client could);
* ``P + s + g``: but never more than ``g`` beyond the session the file gives it. The grace
  belongs to the member's outage (everything since ``P``), not to the move: a member that
  is never heard from again is removed by ``P + s + g`` however many coordinators restore
  it, and each of them computes the same cap from the same ``P``.

The same rule bounds a deadline that is not a session: a revocation the member must
acknowledge within its rebalance timeout ``t`` counts from when it was asked (on file),
``restored_deadline(asked, t, R)``.

``P`` is written with the group's other changes, and besides when it lags the truth by
``PERSIST_FRACTION`` of the session (``contact_persist_due``), which is what keeps a live
member's ``R`` within ``P + s``. No module here does I/O or reads a clock.
"""

from __future__ import annotations

__all__ = [
    "PERSIST_FRACTION",
    "contact_persist_due",
    "grace_ms",
    "restored_deadline",
]

PERSIST_FRACTION = 1 / 3
"""A member's last contact on file is rewritten once it lags the truth by this fraction of
the member's session (``contact_persist_due``): one write per group per third of a session
at most, none while nobody is heard from."""

GRACE_FRACTION = 1 / 2
"""The grace is this fraction of the timeout it extends (``grace_ms``)."""


def grace_ms(timeout_ms: int) -> int:
    """The time a restored member is given, from the restore, to reach its new coordinator
    (at most once per outage): half the timeout. Clients heartbeat every third of a
    session or more often and look for the new coordinator within about a second of
    losing the old one, so half a session is at least one and a half heartbeat intervals
    after the first moment they could succeed."""
    return int(timeout_ms * GRACE_FRACTION)


def restored_deadline(last_contact_ms: int | None, timeout_ms: int, now_ms: int) -> int:
    """When the session (or revocation) of a member restored at ``now_ms`` ends unless
    the member is heard from.

    Args:
        last_contact_ms: ``P``, when the previous coordinator last heard from the member
            (for a revocation: when it was asked), by the file and the writer's wall clock;
            ``None`` when the file does not say (the upper end: Apache's reset on load).
            A time after ``now_ms`` (the writer's clock ahead) counts as ``now_ms``.
        timeout_ms: ``s``, the session (or rebalance) timeout.
        now_ms: ``R``, the restoring coordinator's wall clock.

    Returns:
        ``max(P + s, min(R + g, P + s + g))`` with ``g = grace_ms(s)``: never before the
        time the member had left, at least ``g`` from the restore while that does not pass
        ``P + s + g``, never after ``P + s + g``.
    """
    if last_contact_ms is None:
        return now_ms + timeout_ms
    p = min(last_contact_ms, now_ms)
    g = grace_ms(timeout_ms)
    return max(p + timeout_ms, min(now_ms + g, p + timeout_ms + g))


def contact_persist_due(on_file_ms: int | None, last_contact_ms: int, timeout_ms: int) -> bool:
    """Should a member's last contact be written now? Yes when the file has none for it, or
    when the file's lags ``last_contact_ms`` by ``PERSIST_FRACTION`` of ``timeout_ms`` or
    more."""
    return on_file_ms is None or last_contact_ms - on_file_ms >= timeout_ms * PERSIST_FRACTION
