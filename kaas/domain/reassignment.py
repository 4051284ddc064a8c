"""Partition reassignments (AlterPartitionReassignments 45, ListPartitionReassignments 46)
on a shared volume.

A partition's bytes are one copy on the shared volume (docs/design.rst section 1), so a
reassignment moves no data: it replaces the partition's manual replica list in its topic
file (``TopicMeta.replica_assignment``), and the controller then leads the partition from
the first live broker of the new list (``assignment.balance``'s ``preferred``). The
reassignment is *ongoing* only until the controller has moved the leader into the list:
List reports such a partition with the new list as its replicas, the brokers of the list
as adding replicas and the leader outside it as the removing one. A cancellation (a null
replica list) finds nothing to cancel once that is done, and answers
NO_REASSIGNMENT_IN_PROGRESS as Apache does for a partition not being reassigned.

Pure: the caller gives the registered and live brokers and the current leader.

Invariants:
    - ``check_target`` accepts exactly the lists ``replicas.check_replica_list`` and
      ``replicas.check_live`` accept, of the current length unless the request allows a
      replication-factor change (KIP-860);
    - a partition is ``ongoing`` iff it has a manual list, its leader is not in it, and a
      broker of the list may lead.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from kaas.domain import replicas
from kaas.domain.replicas import AssignmentError

INVALID_REPLICATION_FACTOR = "invalid_replication_factor"


@dataclass(frozen=True, slots=True)
class Ongoing:
    """A reassignment the controller has not carried out yet (ListPartitionReassignments)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def check_target(partition: int, target: Collection[int], current_factor: int, registered: Collection[int],
                 alive: Collection[int], allow_factor_change: bool) -> AssignmentError | None:
    """Apache's checks of one partition's new replica list, in its order: the list itself
    (empty, unknown or repeated brokers), then its length against the partition's current
    replication factor (KIP-860, unless the request allows a change), then a live broker to
    lead it.

    Args:
        current_factor: how many replicas the partition has now (its manual list's length,
            or its topic's replication factor).
    """
    err = replicas.check_replica_list(target, registered, None)
    if err is not None:
        return err
    if not allow_factor_change and len(target) != current_factor:
        return AssignmentError(INVALID_REPLICATION_FACTOR,
                               f"The replication factor is changed from {current_factor} to {len(target)} but "
                               "allowReplicationFactorChange is false.")
    return replicas.check_live(partition, target, alive)


def ongoing(manual: tuple[int, ...] | None, leader: int, alive: Collection[int]) -> Ongoing | None:
    """The partition's reassignment still to be carried out, or None.

    Args:
        manual: the partition's manual replica list, None when it has none.
        leader: the partition's assigned leader (-1: none).
        alive: the brokers that may lead.
    """
    if manual is None or leader in manual or not set(manual) & set(alive):
        return None
    removing = (leader,) if leader >= 0 else ()
    return Ongoing(replicas=(*manual, *removing), adding=manual, removing=removing)
