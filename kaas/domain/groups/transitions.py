"""State transitions checked against a table, for every group kind's machine.

Each pure group machine (``classic``, ``consumer``, ``share``) names, for every state,
the states a group may enter it from (Apache's ``ClassicGroupState.validPreviousStates``
is the model). A change the table does not list is a bug in the machine, never the
client's doing: ``check`` raises ``IllegalTransition`` instead of letting the group go
on in a state nobody planned for. Staying in a state is not a transition.

Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

__all__ = ["IllegalTransition", "check"]

S = TypeVar("S", bound=enum.Enum)


class IllegalTransition(RuntimeError):
    """A group machine tried a state change its table does not allow: an internal error,
    handled as any bug (the connection of the request that hit it is closed, with one log
    line). The group's state is not changed; the operation may have changed other fields
    before it got there, so the group is not to be trusted further (consumer and share
    runtimes handle a request on a copy, kept only once on file).

    Attributes:
        kind: the group kind (``classic``, ``consumer``, ``share``).
        old, new: the states, by Kafka's spelling.
    """

    def __init__(self, kind: str, old: str, new: str) -> None:
        super().__init__(f"{kind} group: illegal transition {old} -> {new}")
        self.kind = kind
        self.old = old
        self.new = new


def check(kind: str, valid_previous: Mapping[S, frozenset[S]], old: S, new: S) -> None:
    """Allow ``old -> new`` if ``new is old`` or the table lists ``old`` before ``new``.

    Raises:
        IllegalTransition: the table does not list the change.
    """
    if new is not old and old not in valid_previous.get(new, frozenset()):
        raise IllegalTransition(kind, str(old.value), str(new.value))

