"""A group as its coordinator holds it in memory (``GroupEntry``): the classic machine, the
KIP-848 consumer machine when the group is a consumer group, the offsets file's content
and the lock serialising its writes. Shared by ``coordinator`` and ``consumer``."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from kaas.domain.consumer_group import ConsumerGroup
from kaas.domain.group import Group
from kaas.storage.offset_store import GroupOffsets

__all__ = ["GroupEntry"]


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
