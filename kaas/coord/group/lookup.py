"""How a kind's runtime finds its groups through the coordinator's port: one group of its
kind for a describe or an admin call (``typed_entry``), and the ones it owns for its
timers (``owned_groups``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from kio.schema.errors import ErrorCode

from kaas.coord.group.entry import GroupEntry, refuse_unreadable
from kaas.coord.group.kinds import AnyKind
from kaas.coord.group.ports import Coordinator
from kaas.errors import KaasError

__all__ = ["owned_groups", "typed_entry"]

M = TypeVar("M")
K = TypeVar("K")


def typed_entry(coord: Coordinator, group_id: str, kind: type[AnyKind], machine: Callable[[GroupEntry], M | None],
                ) -> tuple[GroupEntry, M]:
    """The group and its ``machine`` (of a group of ``kind``), as the describe and admin
    calls want it.

    Raises:
        KaasError: NOT_COORDINATOR and the like; UNKNOWN_SERVER_ERROR while its state on file
            is unreadable; GROUP_ID_NOT_FOUND for no group, or one of another kind.
    """
    coord.check_owner(group_id)
    e = coord.loaded(group_id)
    if e is not None and isinstance(e.kind, kind):
        refuse_unreadable(e.kind.unreadable)
    g = machine(e) if e is not None else None
    if e is None or g is None:
        if e is not None or coord.store.path(group_id).exists():
            raise KaasError(ErrorCode.group_id_not_found, f"Group {group_id} is not a {kind.name} group.")
        raise KaasError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
    return e, g


def owned_groups(coord: Coordinator, kind: type[K]) -> Iterator[tuple[str, GroupEntry, K]]:
    """(group id, entry, kind record) of the loaded groups of ``kind`` this broker still
    coordinates (the timer loops'; a snapshot of the groups, so the caller may await)."""
    for gid, e in list(coord.groups.items()):
        k = e.kind
        if isinstance(k, kind) and coord.broker.owns_group(gid):
            yield gid, e, k
