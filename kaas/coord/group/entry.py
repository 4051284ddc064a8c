"""A group as its coordinator holds it in memory (``GroupEntry``): the classic machine, the
KIP-848 consumer machine when the group is a consumer group, the offsets file's content
and the lock serialising its writes. Shared by ``coordinator``, ``consumer`` and ``share``;
``typed_entry`` is how the consumer and share runtimes find their kind of group."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import trio
from kio.schema.errors import ErrorCode

from kaas.domain.groups import sessions
from kaas.domain.groups.classic.group import Group
from kaas.domain.groups.consumer.group import ConsumerGroup
from kaas.domain.groups.share.group import ShareGroup
from kaas.errors import KaasError
from kaas.storage.offset_store import GroupOffsets

__all__ = ["GroupEntry", "classic_contact_due", "no_group_answer", "owned_groups", "refuse_unreadable", "typed_entry"]

M = TypeVar("M")


@dataclass
class GroupEntry:
    group: Group
    offsets: GroupOffsets | None = None
    error: str | None = None
    lock: trio.Lock = field(default_factory=trio.Lock)
    # a KIP-848 consumer group (``coordinator.consumers``): its machine, a reason its state
    # on file could not be read, and whether memory is ahead of the file (members fenced
    # by a timer whose write failed)
    consumer: ConsumerGroup | None = None
    consumer_error: str | None = None
    consumer_dirty: bool = False
    # a KIP-932 share group (``coordinator.shares``): its machine and a reason its state on
    # file could not be read
    share: ShareGroup | None = None
    share_error: str | None = None
    share_dirty: bool = False


class _Store(Protocol):
    def path(self, group_id: str) -> Path: ...


class _Owner(Protocol):
    def owns_group(self, group_id: str) -> bool: ...


class _Coordinator(Protocol):
    @property
    def store(self) -> _Store: ...

    @property
    def broker(self) -> _Owner: ...

    @property
    def groups(self) -> Mapping[str, GroupEntry]: ...

    def check_owner(self, group_id: str) -> None: ...

    def _loaded(self, group_id: str) -> GroupEntry | None: ...


def refuse_unreadable(reason: str | None) -> None:
    """Raises KaasError(UNKNOWN_SERVER_ERROR) while a group's state on file is unreadable
    (``reason``: why; None: it is readable)."""
    if reason is not None:
        raise KaasError(ErrorCode.unknown_server_error, f"group state unreadable: {reason}")


def typed_entry(coord: _Coordinator, group_id: str, kind: str, machine: Callable[[GroupEntry], M | None],
                error: Callable[[GroupEntry], str | None]) -> tuple[GroupEntry, M]:
    """The group and its ``machine`` (a ``consumer`` or ``share`` one, ``kind`` naming it),
    as the describe and admin calls want it.

    Raises:
        KaasError: NOT_COORDINATOR and the like; UNKNOWN_SERVER_ERROR while its state on file
            is unreadable (``error``); GROUP_ID_NOT_FOUND for no group, or one of another kind.
    """
    coord.check_owner(group_id)
    e = coord._loaded(group_id)
    if e is not None:
        refuse_unreadable(error(e))
    g = machine(e) if e is not None else None
    if e is None or g is None:
        if e is not None or coord.store.path(group_id).exists():
            raise KaasError(ErrorCode.group_id_not_found, f"Group {group_id} is not a {kind} group.")
        raise KaasError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
    return e, g


def owned_groups(coord: _Coordinator, machine: Callable[[GroupEntry], M | None]) -> Iterator[tuple[str, GroupEntry, M]]:
    """(group id, entry, ``machine``) of the loaded groups of one kind this broker still
    coordinates (the timer loops'; a snapshot of the groups, so the caller may await)."""
    for gid, e in list(coord.groups.items()):
        g = machine(e)
        if g is not None and coord.broker.owns_group(gid):
            yield gid, e, g


def no_group_answer(coord: _Coordinator, group_id: str, generation: int, group_id_not_found: bool) -> ErrorCode | None:
    """Apache 4.4 ``OffsetMetadataManager.validate(Transactional)OffsetCommit``: a commit
    with a generation (member epoch) >= 0 to no group is GROUP_ID_NOT_FOUND where the
    request's version knows that error (``group_id_not_found``), else ILLEGAL_GENERATION; a
    negative one makes a simple group. No group: none in memory with members or a KIP-848
    or share state (an empty classic group a read made is none), and no file. None: the
    group exists, or the generation is negative."""
    e = coord.groups.get(group_id)
    if generation < 0 or (e is not None and (e.group.members or e.consumer is not None or e.share is not None
                                             or e.consumer_error is not None or e.share_error is not None)):
        return None
    if coord.store.path(group_id).exists():
        return None
    return ErrorCode.group_id_not_found if group_id_not_found else ErrorCode.illegal_generation


def classic_contact_due(e: GroupEntry, member_id: str) -> bool:
    """Does a classic member's heartbeat time on file lag its last heartbeat by a third of
    its session (``domain.groups.sessions.contact_persist_due``)? Asked per heartbeat, of that
    member alone, so that the write follows at once (``GroupCoordinator._persist_membership``)."""
    m = e.group.members.get(member_id)
    membership = e.offsets.membership if e.offsets is not None else None
    if m is None or membership is None:
        return False
    for raw in membership.get("members") or ():
        if isinstance(raw, dict) and raw.get("member_id") == member_id:
            seen = raw.get("last_heartbeat_ms")
            return sessions.contact_persist_due(seen if isinstance(seen, int) else None,
                                                m.last_heartbeat_ms, m.session_timeout_ms)
    return False
