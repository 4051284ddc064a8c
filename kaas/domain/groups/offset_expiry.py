"""Which committed offsets of a group have expired, and whether the group goes with them:
``offsets.retention.minutes`` as Apache Kafka 4 applies it (KIP-211). Pure: no clock, no
files; the coordinator's expiry pass (``kaas.coord.group.expiry``) supplies the group as it
is now, its offsets, and the time.

The retention period counts from a *base time* that depends on the group:

================================================  ==========================================
group                                             base time of an offset
================================================  ==========================================
classic, Empty (it had members once)              when the group became Empty (KIP-211);
                                                  the offset's commit time when that is not
                                                  known (a file written before it was kept)
classic, never had members (standalone commits)   the offset's commit time
classic, Stable, ``consumer`` protocol            the commit time, for topics no member
                                                  subscribes to
classic, any other state (rebalancing, or Stable  none: nothing expires
with another protocol type)
consumer (KIP-848), any state                     the commit time, for topics no member
                                                  subscribes to
share (KIP-932)                                   none: a share group has no committed
                                                  offsets and never expires
================================================  ==========================================

An offset expires once ``now - base >= retention``, or, when its commit carried a retention
of its own (OffsetCommit v2-v4 ``retention_time_ms``), once ``now`` reaches the expiry time
that gave it. An offset a member's subscription still covers, or whose partition has a
transactional offset commit pending, never expires. A group whose offsets have all expired
(or which has none), with no transactional offset commit pending, is deleted when it is
empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

__all__ = ["Basis", "Expiry", "GroupView", "Stored", "basis_of", "expire"]

TP = tuple[str, int]

CLASSIC, CONSUMER, SHARE = "classic", "consumer", "share"


class Basis(Enum):
    """What an offset's retention counts from."""

    NONE = "none"  # nothing expires
    EMPTY_SINCE = "empty_since"  # when the group became Empty
    COMMIT_TIME = "commit_time"  # the offset's commit


@dataclass(frozen=True, slots=True)
class GroupView:
    """A group as the expiry rule needs it.

    Attributes:
        kind: ``classic``, ``consumer`` or ``share``.
        state: the group's state, Kafka's spelling (``Empty``, ``Stable``, ...).
        protocol_type: a classic group's protocol type; None for a group that never had
            members (offsets committed without group membership).
        empty_since_ms: when a classic group became Empty (None: not known).
        subscribed: the topics its members subscribe to (empty when it has none).
    """

    kind: str
    state: str
    protocol_type: str | None = None
    empty_since_ms: int | None = None
    subscribed: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return self.state == "Empty"


@dataclass(frozen=True, slots=True)
class Stored:
    """One committed offset's times: its commit (``commit_ms``) and the expiry time its
    commit asked for (``expire_ms``, OffsetCommit v2-v4; -1: none)."""

    commit_ms: int
    expire_ms: int = -1


@dataclass(frozen=True, slots=True)
class Expiry:
    """What a pass does to one group: the offsets to remove (``expired``, sorted), whether
    the group itself goes (``delete_group``), and why, in words (``reason``; empty when
    nothing happens)."""

    expired: tuple[TP, ...] = ()
    delete_group: bool = False
    reason: str = ""

    @property
    def changes(self) -> bool:
        return bool(self.expired) or self.delete_group


def basis_of(view: GroupView) -> Basis:
    """What the retention of ``view``'s offsets counts from (the module docstring's table)."""
    if view.kind == SHARE:
        return Basis.NONE
    if view.kind == CONSUMER:
        return Basis.COMMIT_TIME
    if view.protocol_type is None:
        return Basis.COMMIT_TIME  # no membership: a standalone consumer's commits
    if view.empty:
        return Basis.EMPTY_SINCE
    if view.protocol_type == "consumer" and view.state == "Stable":
        return Basis.COMMIT_TIME
    return Basis.NONE


def _expired(stored: Stored, basis: Basis, empty_since_ms: int | None, now_ms: int, retention_ms: int) -> bool:
    if stored.expire_ms >= 0:  # the commit's own retention (OffsetCommit v2-v4)
        return now_ms >= stored.expire_ms
    base = empty_since_ms if basis is Basis.EMPTY_SINCE and empty_since_ms is not None else stored.commit_ms
    return now_ms - base >= retention_ms


def expire(view: GroupView, offsets: Mapping[TP, Stored], pending: Iterable[TP], now_ms: int,
           retention_ms: int) -> Expiry:
    """The expiry pass over one group at ``now_ms`` (the module docstring's rule).

    Args:
        offsets: its committed offsets.
        pending: the partitions with a transactional offset commit pending (any producer).
        retention_ms: ``offsets.retention.minutes`` in milliseconds.
    """
    basis = basis_of(view)
    if basis is Basis.NONE:
        return Expiry()
    held = set(pending)
    expired: list[TP] = []
    kept = 0
    for tp, stored in offsets.items():
        if tp[0] in view.subscribed or tp in held or not _expired(stored, basis, view.empty_since_ms, now_ms,
                                                                  retention_ms):
            kept += 1
        else:
            expired.append(tp)
    delete = kept == 0 and not held and view.empty
    if not expired and not delete:
        return Expiry()
    return Expiry(tuple(sorted(expired)), delete, _reason(view, basis, now_ms, retention_ms, kept))


def _reason(view: GroupView, basis: Basis, now_ms: int, retention_ms: int, kept: int) -> str:
    limit = f"offsets.retention.minutes = {retention_ms / 60_000:g}"
    if basis is Basis.EMPTY_SINCE and view.empty_since_ms is not None:
        why = f"the group has been Empty for {(now_ms - view.empty_since_ms) / 1000:.1f} s ({limit})"
    elif view.kind == CLASSIC and view.protocol_type is None:
        why = f"committed without group membership, longer ago than {limit}"
    elif view.empty:
        why = f"the group is Empty and they were committed longer ago than {limit}"
    else:
        why = f"no member subscribes to their topics and they were committed longer ago than {limit}"
    if kept:
        why += f"; {kept} offsets kept"
    return why
