"""The seam between the group coordinator and its kinds of group: what a group is at its
coordinator (``GroupKind``), one of three records, a tagged union (``AnyKind``):

- ``ClassicKind``: a classic group (JoinGroup/SyncGroup), the ``domain.groups.classic``
  machine; its runtime is ``coord.group.classic``;
- ``ConsumerKind``: a KIP-848 consumer group, the ``domain.groups.consumer`` machine (with
  any classic members, KIP-848's online migration); its runtime is ``coord.group.consumer``;
- ``ShareKind``: a KIP-932 share group, the ``domain.groups.share`` machine; its runtime
  is ``coord.group.share``.

A group is of exactly one kind (``GroupEntry.kind``) and changes kind only by a
conversion: classic <-> consumer with members (KIP-848's migration), an empty classic
group to a consumer or share group, an empty consumer group to a classic one. Each is on
file before it is answered, but the last, which is written with the classic group's
first membership. The coordinator dispatches on the record's type; what every kind
answers alike (its deadline, whether it counts as a group for offset commits, its row in
ListGroups) is the ``GroupKind`` protocol the three implement.

Each record holds its machine, or None with the reason (``error``) while the kind's state
on file cannot be read: the group is then refused (``entry.refuse_unreadable``), never
reset; what the three records share (``_Filed``, and ``_Modern`` for the consumer and
share kinds) is written once here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Generic, Literal, Protocol, TypeVar

from kaas.domain.groups.classic.group import Group, GroupState
from kaas.domain.groups.consumer.group import ConsumerGroup
from kaas.domain.groups.share.group import ShareGroup

__all__ = ["AnyKind", "ClassicKind", "ConsumerKind", "GroupKind", "KindName", "Listing", "ModernKind", "ShareKind"]

KindName = Literal["classic", "consumer", "share"]
Listing = tuple[str, str, str]  # (protocol type, state, group type) as ListGroups shows them
_UNREADABLE: Listing = ("", "Empty", "classic")  # a kind's state that could not be read lists so


class GroupKind(Protocol):
    """What the coordinator asks of any kind of group."""

    name: ClassVar[KindName]

    @property
    def unreadable(self) -> str | None:
        """Why the kind's state on file could not be read (the group is refused), or None."""

    def counts_as_group(self) -> bool:
        """Is this a group for the offset commits' rules? A classic group once it has
        members (an empty one a read made is none); a consumer or share group always; any
        kind whose state on file is unreadable."""

    def next_deadline(self) -> int | None:
        """When the kind's timers next have work to do (absolute ms), or None."""

    def listing(self) -> Listing | None:
        """(protocol type, state, group type) for ListGroups, or None when the group is
        not listed (a Dead classic group; a group only committed to has no state)."""


class _Machine(Protocol):
    def next_deadline(self) -> int | None: ...


class _ModernMachine(_Machine, Protocol):
    @property
    def state(self) -> str: ...


M = TypeVar("M", bound=_Machine)
MM = TypeVar("MM", bound=_ModernMachine)


@dataclass(slots=True)
class _Filed(Generic[M]):
    """A kind's machine (``group``), or None with why (``error``) while its state on file
    cannot be read (the group is refused, never reset)."""

    group: M | None
    error: str | None = None

    @property
    def unreadable(self) -> str | None:
        return self.error

    def next_deadline(self) -> int | None:
        return self.group.next_deadline() if self.group is not None else None


@dataclass(slots=True)
class ClassicKind(_Filed[Group]):
    """A classic group: its machine (``Group``), Empty when nothing joined yet; None while
    its membership on file cannot be read."""

    name: ClassVar[KindName] = "classic"

    def counts_as_group(self) -> bool:
        return self.group is None or bool(self.group.members)

    def listing(self) -> Listing | None:
        if self.group is None:
            return _UNREADABLE
        if self.group.state is GroupState.DEAD:
            return None
        return self.group.protocol_type or "", self.group.state.value, "classic"


@dataclass(slots=True)
class _Modern(_Filed[MM]):
    """A consumer or share group; ``dirty``: memory is ahead of the file (members fenced
    by a timer whose write failed, or that ran without the lease)."""

    dirty: bool = False
    name: ClassVar[KindName]

    def counts_as_group(self) -> bool:
        return True

    def listing(self) -> Listing | None:
        return (self.name, self.group.state, self.name) if self.group is not None else _UNREADABLE


@dataclass(slots=True)
class ConsumerKind(_Modern[ConsumerGroup]):
    """A KIP-848 consumer group."""

    name: ClassVar[KindName] = "consumer"


@dataclass(slots=True)
class ShareKind(_Modern[ShareGroup]):
    """A KIP-932 share group."""

    name: ClassVar[KindName] = "share"


AnyKind = ClassicKind | ConsumerKind | ShareKind
ModernKind = ConsumerKind | ShareKind
