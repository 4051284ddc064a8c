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
