"""Offset retention (``offsets.retention.minutes``, KIP-211): the group coordinator's pass
that removes the expired committed offsets of the groups it coordinates, and the groups
left empty with none, every ``offsets.retention.check.interval.ms``
(``kaas.tasks.offset_expiry`` runs it).

The rule is ``kaas.domain.groups.offset_expiry``'s; this module feeds it each group as it is now
and carries its verdict out. A group is the coordinator's to change: the pass writes its
file (``__cluster/consumer_offsets/<group>.json``) through the coordinator's own write
path, under the group's lock and only while this broker owns the group and holds its
lease, as an OffsetCommit would (``GroupCoordinator.save``: tmp + fsync + rename, refused
if another coordinator changed the file meanwhile). A group deleted by the pass is
unloaded and its file removed, as DeleteGroups does. Each group whose offsets expire is
logged once (``group_offsets_expired``), with the partitions, whether the group went, and
the reason.

The times compared are the coordinator's wall clock against the commit times and
Empty-since times on file, which its predecessors wrote with theirs (``docs/groups.rst``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import structlog
from kio.schema.errors import ErrorCode

from kaas.coord.group.classic.runtime import subscribed_topics
from kaas.coord.group.entry import GroupEntry
from kaas.coord.group.kinds import ClassicKind, ConsumerKind, ShareKind
from kaas.domain.groups import offset_expiry
from kaas.domain.groups.classic.group import GroupState
from kaas.domain.groups.offset_expiry import GroupView, Stored
from kaas.errors import KaasError
from kaas.storage.offset_store import GroupOffsets

if TYPE_CHECKING:
    from kaas.coord.group.coordinator import GroupCoordinator
    from kaas.settings import Settings

__all__ = ["RETENTION_ENV", "expire_offsets", "retention_ms", "view_of"]

log = structlog.get_logger()

RETENTION_ENV = "KAAS_OFFSETS_RETENTION_MS"
"""A test setting: the retention in milliseconds, in place of ``offsets.retention.minutes``
(whose least value, as in Apache, is one minute)."""


def retention_ms(settings: Settings) -> int:
    """``offsets.retention.minutes`` in milliseconds, or ``$KAAS_OFFSETS_RETENTION_MS`` (tests)."""
    override = os.environ.get(RETENTION_ENV)
    if override:
        return max(1, int(override))
    return settings.offsets_retention_minutes * 60_000


def view_of(e: GroupEntry) -> GroupView | None:
    """The group as the expiry rule sees it; None while its state on file is unreadable
    (nothing is expired from a group kaas cannot read)."""
    k = e.kind
    if e.error is not None or k.unreadable is not None:
        return None
    if isinstance(k, ShareKind) and k.group is not None:
        return GroupView(offset_expiry.SHARE, k.group.state)
    if isinstance(k, ConsumerKind) and k.group is not None:
        return GroupView(offset_expiry.CONSUMER, k.group.state, subscribed=frozenset(k.group.subscribed_topics()))
    assert isinstance(k, ClassicKind) and k.group is not None
    g = k.group
    subscribed: frozenset[str] = frozenset()
    if g.state is GroupState.STABLE and g.protocol_type == "consumer":
        subscribed = frozenset(subscribed_topics(g))
    since = g.state_since_ms if g.state is GroupState.EMPTY else None
    return GroupView(offset_expiry.CLASSIC, g.state.value, g.protocol_type, since, subscribed)


def _verdict(e: GroupEntry, offsets: GroupOffsets, now_ms: int, retention: int) -> offset_expiry.Expiry | None:
    view = view_of(e)
    if view is None:
        return None
    stored = {tp: Stored(c.timestamp, c.expire_timestamp) for tp, c in offsets.offsets.items()}
    pending = {tp for staged in offsets.pending.values() for tp in staged}
    return offset_expiry.expire(view, stored, pending, now_ms, retention)


async def expire_offsets(coord: GroupCoordinator) -> int:
    """One pass over the groups this broker coordinates that have a file (a group only in
    memory has nothing committed). Returns how many groups it changed."""
    broker = coord.broker
    try:
        on_file = await broker.run_io(coord.store.list_groups)
    except OSError as exc:
        log.warning("offset_expiry_list_failed", error=str(exc))
        return 0
    changed = 0
    for gid in sorted(on_file):
        if not broker.owns_group(gid):
            continue
        try:
            if await _expire_group(coord, gid):
                changed += 1
        except KaasError as exc:  # not ours any more, lease lapsed, a write failed: next pass
            log.debug("offset_expiry_skipped", group=gid, error=exc.code.name)
    return changed


async def _expire_group(coord: GroupCoordinator, gid: str) -> bool:
    coord.check_owner(gid)
    if not coord.store.path(gid).exists():
        return False  # deleted since the listing
    e = coord.entry(gid)
    now = coord.now()
    retention = retention_ms(coord.broker.settings)
    async with e.lock:
        if coord.groups.get(gid) is not e:
            return False  # deleted or unloaded meanwhile
        try:
            offsets = await coord.offsets(e)
        except KaasError:
            return False  # unreadable: reported by offsets(), never reset
        verdict = _verdict(e, offsets, now, retention)
        if verdict is None or not verdict.changes:
            return False
        if verdict.delete_group:
            await _delete(coord, gid, e)
        else:
            new = offsets.copy()
            for tp in verdict.expired:
                del new.offsets[tp]
            await coord.save(e, new)
    log.info("group_offsets_expired", group=gid, partitions=len(verdict.expired),
             topics=sorted({t for t, _ in verdict.expired}), group_deleted=verdict.delete_group,
             reason=verdict.reason, retention_ms=retention)
    return True


async def _delete(coord: GroupCoordinator, gid: str, e: GroupEntry) -> None:
    """Unload the (empty) group and remove its file, as DeleteGroups does.

    Raises:
        KaasError: COORDINATOR_NOT_AVAILABLE: the file could not be removed (the group is
            loaded from it again on next use; the next pass tries again).
    """
    coord.check_owner(gid)
    coord.drop(gid, e, ErrorCode.coordinator_not_available)
    try:
        await coord.broker.run_io(coord.store.delete, gid)
    except OSError as exc:
        log.error("group_offsets_delete_failed", group=gid, error=str(exc))
        raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None
