"""A group as its coordinator holds it in memory (``GroupEntry``): its id, its kind
(``kinds.AnyKind``: the classic, consumer or share machine), the offsets file's content
and the lock serialising its writes. Shared by the coordinator and every kind's runtime."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio
from kio.schema.errors import ErrorCode

from kaas.coord.group.kinds import AnyKind, ClassicKind, ConsumerKind, ShareKind
from kaas.domain.groups.classic.group import Group
from kaas.domain.groups.consumer.group import ConsumerGroup
from kaas.domain.groups.share.group import ShareGroup
from kaas.errors import KaasError
from kaas.storage.offset_store import GroupOffsets

__all__ = ["GroupEntry", "refuse_unreadable"]


@dataclass
class GroupEntry:
    """``error``: why the offsets file (every kind's) could not be read, or None."""

    group_id: str
    kind: AnyKind
    offsets: GroupOffsets | None = None
    error: str | None = None
    lock: trio.Lock = field(default_factory=trio.Lock)

    @property
    def group(self) -> Group | None:
        """The classic machine, for a classic group (else None)."""
        return self.kind.group if isinstance(self.kind, ClassicKind) else None

    @property
    def consumer(self) -> ConsumerGroup | None:
        """The consumer machine, for a consumer group whose state was read (else None)."""
        return self.kind.group if isinstance(self.kind, ConsumerKind) else None

    @property
    def share(self) -> ShareGroup | None:
        """The share machine, for a share group whose state was read (else None)."""
        return self.kind.group if isinstance(self.kind, ShareKind) else None


def refuse_unreadable(reason: str | None) -> None:
    """Raises KaasError(UNKNOWN_SERVER_ERROR) while a group's state on file is unreadable
    (``reason``: why; None: it is readable)."""
    if reason is not None:
        raise KaasError(ErrorCode.unknown_server_error, f"group state unreadable: {reason}")
