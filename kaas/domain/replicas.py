"""Replicas, ISR and offline replicas of a partition on a shared volume.

A partition's bytes exist once, on the shared volume; any live broker can lead it after a
file open and a recovery (docs/design.rst section 1). What Kafka calls a *replica* is here a broker able
to lead the partition, and the topic's replication factor says how many of them Metadata
and DescribeTopicPartitions name:

- **replicas**: the leader first, then the next registered brokers after it in broker-id
  order, wrapping around (leader 1 of brokers 0-3 with factor 3: ``[1, 2, 3]``). While the
  partition has no live leader the ring starts at its assigned leader, or at the
  ``partition``-th registered broker when it has none;
- **ISR** (in-sync replicas): the replicas that are alive and not draining, and the live
  leader. Every byte a leader acknowledged is already on the volume, so a live replica is
  never behind;
- **offline replicas**: the replicas whose heartbeat stopped (dead). A draining broker is
  in neither list: it is alive but will not take a partition over.

Why a ring and not "whoever the balancer would pick if the leader died": the balancer
(``kaas.domain.assignment.balance``) places an orphaned partition on the alive broker
with the fewest partitions of its topic *at the moment of the death*, then evens out the
whole cluster, moving other partitions too. Naming that broker in advance would be a guess
that changes whenever any topic is created or any broker comes and goes, so clients and
operators would see replica lists churn for no change to the partition. The ring is
stable (it moves only with the leader or the registered set), spreads the brokers named
second evenly, and names dead brokers too (they keep their registration), so the ISR
visibly shrinks when one dies and grows back when it returns.

``min.insync.replicas`` as Apache (since 3.7, KAFKA-15583) applies it to acks=all:
``min(min.insync.replicas, number of replicas)`` must be in sync, else the produce gets
NOT_ENOUGH_REPLICAS before anything is appended.

Pure: no I/O, no clock. The caller snapshots the cluster view (``View``).

Invariants:
    - ``replicas`` is deterministic; the order of ``registered`` does not matter;
    - the replica list has no duplicates and ``min(factor, |registered ∪ {anchor}|)``
      entries; a live leader is its first entry;
    - ISR and offline replicas are disjoint sub-lists of the replicas, in replica order;
      the live leader is in the ISR.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class View:
    """The cluster as one request sees it.

    Attributes:
        registered: every registered broker id, dead ones included, ascending.
        alive: brokers that may take a partition over (alive, not draining).
        reachable: brokers whose heartbeat is live (draining ones included).
    """

    registered: tuple[int, ...]
    alive: frozenset[int]
    reachable: frozenset[int]

    @classmethod
    def of(cls, registered: Iterable[int], alive: Iterable[int], reachable: Iterable[int]) -> View:
        return cls(tuple(sorted(set(registered))), frozenset(alive), frozenset(reachable))


@dataclass(frozen=True, slots=True)
class Replicas:
    """What Metadata reports for one partition (broker ids, in replica order)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


def ring(anchor: int, partition: int, registered: Collection[int], factor: int) -> tuple[int, ...]:
    """The replica list: ``anchor`` first, then the next registered brokers in id order.

    Args:
        anchor: the leader (or assigned leader); -1 when the partition has none.
        partition: the partition index; picks the start when there is no anchor.
        registered: every registered broker id (any order).
        factor: the topic's replication factor (at least 1).

    Returns:
        ``min(factor, number of brokers)`` distinct broker ids; empty when no broker is
        known.
    """
    ids = sorted(set(registered) | ({anchor} if anchor >= 0 else set()))
    if not ids:
        return ()
    start = ids.index(anchor) if anchor >= 0 else partition % len(ids)
    return tuple(ids[(start + i) % len(ids)] for i in range(min(max(factor, 1), len(ids))))


def describe(view: View, leader: int, anchor: int, partition: int, factor: int) -> Replicas:
    """Replicas, ISR and offline replicas of one partition.

    Args:
        view: the cluster snapshot.
        leader: the live leader, or -1 while the partition has none.
        anchor: where the ring starts: the live leader, else the assigned leader, else -1.
        partition: the partition index.
        factor: the topic's replication factor.

    Returns:
        The partition's ``Replicas``.
    """
    reps = ring(leader if leader >= 0 else anchor, partition, view.registered, factor)
    isr = tuple(b for b in reps if b == leader or b in view.alive)
    offline = tuple(b for b in reps if b != leader and b not in view.reachable)
    return Replicas(reps, isr, offline)


def effective_min_isr(min_insync_replicas: int, replica_count: int) -> int:
    """The in-sync replicas an acks=all produce needs: ``min(min.insync.replicas,
    replicas)``, as Apache since 3.7 (a topic may be created with min.insync.replicas
    above its replication factor; it does not block every produce)."""
    return min(min_insync_replicas, replica_count)


def enough_in_sync(r: Replicas, min_insync_replicas: int) -> bool:
    """Whether an acks=all produce may append (else NOT_ENOUGH_REPLICAS)."""
    return len(r.isr) >= effective_min_isr(min_insync_replicas, len(r.replicas))


def min_insync_replicas_error(value: str | None) -> str | None:
    """Apache's validation of ``min.insync.replicas`` (at least 1; above the replication
    factor is allowed), as an INVALID_CONFIG message, or None when acceptable."""
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        return None  # the type check (kaas.configs.validate) reports it
    if n < 1:
        return f"Invalid value {value} for configuration min.insync.replicas: Value must be at least 1"
    return None


# ---------------------------------------------------------------------------------------
# manual replica assignments (CreateTopics and CreatePartitions ``assignments``)

INVALID_REQUEST, INVALID_REPLICA_ASSIGNMENT, INVALID_PARTITIONS = "invalid_request", "invalid_replica_assignment", \
    "invalid_partitions"


@dataclass(frozen=True, slots=True)
class AssignmentError:
    """A refused manual assignment: the error's name (``ErrorCode[error]``) and Apache's
    message."""

    error: str
    message: str


def check_replica_list(replicas: Collection[int], registered: Collection[int],
                       factor: int | None) -> AssignmentError | None:
    """Apache's checks of one partition's manual replica list (in its order: empty, then
    each broker in id order unknown or repeated, then the size against ``factor``, the
    replication factor of the partitions before it or of the topic)."""
    if not replicas:
        return AssignmentError(INVALID_REPLICA_ASSIGNMENT,
                               "The manual partition assignment includes an empty replica list.")
    known = set(registered)
    previous = None
    for b in sorted(replicas):
        if b not in known:
            return AssignmentError(INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes broker {b}, "
                                                               "but no such broker is registered.")
        if b == previous:
            return AssignmentError(INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes the broker "
                                                               f"{b} more than once.")
        previous = b
    if factor is not None and len(replicas) != factor:
        return AssignmentError(INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes a partition "
                                                           f"with {len(replicas)} replica(s), but this is not "
                                                           f"consistent with previous partitions, which have "
                                                           f"{factor} replica(s).")
    return None


def check_live(partition: int, replicas: Collection[int], alive: Collection[int]) -> AssignmentError | None:
    """A new partition needs a live replica to lead it (Apache: none fenced or shutting down)."""
    if not set(replicas) & set(alive):
        return AssignmentError(INVALID_REPLICA_ASSIGNMENT, f"All brokers specified in the manual partition "
                                                           f"assignment for partition {partition} are fenced or in "
                                                           "controlled shutdown.")
    return None


def check_create(assignments: Iterable[tuple[int, Collection[int]]], num_partitions: int, replication_factor: int,
                 registered: Collection[int], alive: Collection[int]) -> tuple[tuple[int, ...], ...] | AssignmentError:
    """A CreateTopics topic's manual assignment, as Apache's controller checks it.

    Args:
        assignments: (partition index, replica list) as the request gives them.
        num_partitions, replication_factor: the request's; both must be -1.
        registered: every registered broker id.
        alive: the brokers that may lead.

    Returns:
        the replica lists of partitions 0..n-1, or the AssignmentError.
    """
    if replication_factor != -1:
        return AssignmentError(INVALID_REQUEST, "A manual partition assignment was specified, but replication "
                                                "factor was not set to -1.")
    if num_partitions != -1:
        return AssignmentError(INVALID_REQUEST, "A manual partition assignment was specified, but numPartitions "
                                                "was not set to -1.")
    lists: dict[int, tuple[int, ...]] = {}
    factor: int | None = None
    for index, replicas in assignments:
        if index in lists:
            return AssignmentError(INVALID_REPLICA_ASSIGNMENT,
                                   f"Found multiple manual partition assignments for partition {index}")
        err = check_replica_list(replicas, registered, factor) or check_live(index, replicas, alive)
        if err is not None:
            return err
        factor = len(replicas)
        lists[index] = tuple(replicas)
    if sorted(lists) != list(range(len(lists))):
        return AssignmentError(INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer "
                                                           "sequence")
    return tuple(lists[i] for i in range(len(lists)))


def check_add(assignments: Collection[Collection[int]], current: int, count: int, factor: int,
              registered: Collection[int], alive: Collection[int]) -> tuple[tuple[int, ...], ...] | AssignmentError:
    """A CreatePartitions topic's manual assignment for partitions ``current..count-1``.

    Returns:
        their replica lists, or the AssignmentError (the count itself is checked before).
    """
    if len(assignments) != count - current:
        return AssignmentError(INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {count - current} additional "
                                                           f"partition(s), but only {len(assignments)} "
                                                           "assignment(s) were specified.")
    out = []
    for i, replicas in enumerate(assignments):
        err = check_replica_list(replicas, registered, factor) or check_live(current + i, replicas, alive)
        if err is not None:
            return err
        out.append(tuple(replicas))
    return tuple(out)


def preferred_leader(replicas: Iterable[int], alive: Collection[int]) -> int:
    """The first live replica of a manual list (its preferred leader), or -1."""
    return next((b for b in replicas if b in alive), NO_LEADER)


def describe_manual(view: View, leader: int, replicas: tuple[int, ...]) -> Replicas:
    """Replicas, ISR and offline replicas of a partition with a manual replica list: the
    list as given. A leader outside it (every listed broker was gone, so the controller
    placed the partition elsewhere: any broker can lead on the shared volume) is named
    first."""
    reps = replicas if leader < 0 or leader in replicas else (leader, *replicas)
    isr = tuple(b for b in reps if b == leader or b in view.alive)
    offline = tuple(b for b in reps if b != leader and b not in view.reachable)
    return Replicas(reps, isr, offline)
