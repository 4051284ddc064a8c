"""The state of a modern group (KIP-848 consumer groups, KIP-932 share groups), derived
from its epochs and members as Apache's ``ConsumerGroup.maybeUpdateGroupState`` derives
it, and checked against each kind's transition table.

* **Empty**: no members;
* **Assigning**: the group epoch is ahead of the assignment epoch (what the assignment
  depends on changed; the next target assignment is not computed yet);
* **Reconciling**: the target assignment is at the group epoch, some member is not
  reconciled to it yet;
* **Stable**: every member is reconciled to the target assignment.

Apache keeps no table of valid previous states for these kinds (only the classic kind has
one, ``ClassicGroupState.validPreviousStates``); kaas gives each kind its own
(``consumer.group.VALID_PREVIOUS``, ``share.group.VALID_PREVIOUS``), from what its
machine can do, so that a change the machine was not built to make fails loudly
(``domain.groups.transitions``). A share group reports only Empty or Stable, as Apache's
``ShareGroup`` (``reported``).

Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from kaas.domain.groups import transitions

__all__ = ["ModernState", "derive_state", "settle"]


class ModernState(enum.Enum):
    """A modern group's state; ``.value`` is Kafka's spelling (ConsumerGroupDescribe)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


def derive_state(has_members: bool, group_epoch: int, assignment_epoch: int,
                 reconciled: Iterable[bool]) -> ModernState:
    """The state a group with these epochs is in; ``reconciled``: for each member, whether
    it is reconciled to the assignment epoch (read only when it matters)."""
    if not has_members:
        return ModernState.EMPTY
    if group_epoch > assignment_epoch:
        return ModernState.ASSIGNING
    if not all(reconciled):
        return ModernState.RECONCILING
    return ModernState.STABLE


def settle(kind: str, valid_previous: Mapping[ModernState, frozenset[ModernState]], old: ModernState,
           new: ModernState) -> ModernState:
    """``new``, once ``old -> new`` is checked against the kind's table.

    Raises:
        IllegalTransition: the table does not list the change (a bug in the machine).
    """
    transitions.check(kind, valid_previous, old, new)
    return new
