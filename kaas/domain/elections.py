"""Leader elections (ElectLeaders, 43) on a shared volume.

Any live broker can lead a partition (its bytes are on the shared volume, every replica is
in sync), and the controller places leaders itself (``assignment.balance``): a partition
whose leader died is re-placed at once, and one with a manual replica list is led by the
first of its brokers the controller may place on. So:

- **preferred** (election type 0): the preferred leader is the first broker of the
  partition's replica list as Metadata reports it. For a partition with a manual list
  (CreateTopics/CreatePartitions ``assignments``, AlterPartitionReassignments) that is the
  list's first broker; the election is needed when another broker leads, which happens
  while that broker is back from the dead but still held off (``membership.placeable``:
  the controller gives a returning broker its share again only later, as Apache moves
  leadership back only by a preferred election). For a partition without a manual list
  the replica list is a ring that starts at the leader, so the leader is always the
  preferred one: ELECTION_NOT_NEEDED.
- **unclean** (type 1): only a partition without a live leader needs one; any live broker
  may take it (nothing is lost: there is no out-of-sync replica on a shared volume).

Pure: the caller gives the leader, the manual list and the brokers that may lead.

Invariants:
    - an election is decided only for a broker in ``alive``;
    - a partition whose leader is its preferred leader never needs a preferred election,
      and one with a live leader never needs an unclean one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

PREFERRED, UNCLEAN = 0, 1

# what is decided, named as kio's ErrorCode members (the handler maps them)
ELECT, NOT_NEEDED = "none", "election_not_needed"
PREFERRED_NOT_AVAILABLE = "preferred_leader_not_available"
NOT_AVAILABLE = "eligible_leaders_not_available"
INVALID = "invalid_request"


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome for one partition: ``error`` (an ErrorCode member's name: ``"none"``
    when ``leader`` is to be elected), Apache's message, and the broker to elect (-1)."""

    error: str
    message: str | None = None
    leader: int = -1


def decide(election_type: int, leader: int, manual: tuple[int, ...] | None, alive: Collection[int]) -> Decision:
    """What an ElectLeaders request does to one partition.

    Args:
        election_type: 0 preferred, 1 unclean (anything else is refused).
        leader: the partition's live leader, -1 when it has none.
        manual: its manual replica list, None when its replicas are the ring.
        alive: the brokers that may lead (alive, not draining).
    """
    if election_type == PREFERRED:
        if manual is None:
            if leader >= 0:
                return Decision(NOT_NEEDED, "Leader election not needed for topic partition.")
            return Decision(PREFERRED_NOT_AVAILABLE, "The preferred leader was not available.")
        preferred = manual[0]
        if leader == preferred:
            return Decision(NOT_NEEDED, "Leader election not needed for topic partition.")
        if preferred not in alive:
            return Decision(PREFERRED_NOT_AVAILABLE, "The preferred leader was not available.")
        return Decision(ELECT, None, preferred)
    if election_type == UNCLEAN:
        if leader >= 0:
            return Decision(NOT_NEEDED, "Leader election not needed for topic partition.")
        candidates = [b for b in (manual or ()) if b in alive] or sorted(alive)
        if not candidates:
            return Decision(NOT_AVAILABLE, "Eligible topic partition leaders are not available.")
        return Decision(ELECT, None, candidates[0])
    return Decision(INVALID, f"Unknown election type {election_type}")


def still_held(chosen: Mapping[tuple[str, int], int], first_of_list: Mapping[tuple[str, int], tuple[int, ...]],
               alive: Collection[int], placeable: Collection[int]) -> dict[tuple[str, int], int]:
    """The elected leaders the controller must still pin (``assignment.balance``'s
    ``elected``): those whose broker is alive but not yet placeable. Forgotten: a broker
    that died, one the controller places on again (its own rules then agree: the manual
    list's first broker, or a sticky leader), and one that a reassignment since made other
    than its partition's list's first broker.

    Args:
        chosen: the elections kept so far, (topic, partition) -> broker.
        first_of_list: the manual replica lists, by (topic, partition).
        alive: the brokers alive and not draining.
        placeable: those of them the controller places partitions on now.
    """
    return {key: b for key, b in chosen.items()
            if b in alive and b not in placeable and (key not in first_of_list or first_of_list[key][0] == b)}
