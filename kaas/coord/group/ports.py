"""The port between the group coordinator (``coordinator.GroupCoordinator``) and its kinds'
runtimes (``classic``, ``consumer``, ``share``): what a runtime may ask of the coordinator,
which implements it. Every kind shares these: ownership, loading a group, its file (read,
written), the broker's clock and topics, and the end of a classic machine's parked
requests. A runtime calls nothing else of the coordinator (the coordinator imports the
runtimes, never the other way round)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from kio.schema.errors import ErrorCode

from kaas.aio import Wakeup
from kaas.coord.group.entry import GroupEntry
from kaas.coord.ports import GroupBroker
from kaas.domain.groups.classic.group import Group
from kaas.domain.groups.modern.topic_image import TopicImage
from kaas.storage.offset_store import GroupOffsets

__all__ = ["Coordinator", "GroupFiles"]


class GroupFiles(Protocol):
    """The groups' files (``storage.offset_store.OffsetStore``)."""

    def path(self, group_id: str) -> Path: ...

    def load(self, group_id: str) -> GroupOffsets: ...


class Coordinator(Protocol):
    """What a kind's runtime uses of the group coordinator."""

    @property
    def broker(self) -> GroupBroker: ...

    @property
    def groups(self) -> Mapping[str, GroupEntry]:
        """The groups this broker holds in memory, by id."""

    @property
    def store(self) -> GroupFiles: ...

    @property
    def timer_wakeup(self) -> Wakeup:
        """Set when a deadline may have moved closer (the timer loop looks again)."""

    def check_owner(self, group_id: str) -> None:
        """Raises KaasError (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) unless this
        broker may serve the group now."""

    def now(self) -> int:
        """The broker's wall clock, ms (the machines' deadlines)."""

    def load(self, group_id: str, create: bool) -> GroupEntry | None:
        """The group in memory, else as its file left it; with ``create`` a new classic
        group when there is none, else None."""

    def loaded(self, group_id: str) -> GroupEntry | None:
        """``load`` without ``create``."""

    async def offsets(self, e: GroupEntry) -> GroupOffsets:
        """The group's file content, read on first use."""

    async def save(self, e: GroupEntry, new: GroupOffsets, *, kind_write: bool = False) -> None:
        """Write ``new`` as the group's file (``kind_write``: by its kind's runtime, which
        keeps the kind's state in it)."""

    def forget(self, group_id: str, e: GroupEntry) -> None:
        """Drop ``e`` if it holds nothing (what a refused first request leaves)."""

    def new_classic(self, group_id: str) -> Group:
        """An empty classic machine with the broker's group settings."""

    def retire(self, group: Group, code: ErrorCode) -> None:
        """``group`` (a classic machine) ends: its parked requests are answered ``code``."""

    def topic_image(self) -> TopicImage:
        """The broker's topics as the modern groups (consumer, share) see them."""
