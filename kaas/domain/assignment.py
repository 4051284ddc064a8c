"""Partition leadership and txn-slot placement (``assignment.json``), and the hand-off rule.

The controller calls ``balance`` on its election, when a broker joins, dies or drains, and
when a topic appears or grows. ``balance`` is the Rust original's recipe, made pure:

1. **Keep** every partition whose previous leader is alive (and not draining).
2. **Place** the rest (new, orphaned, or led by -1) in (topic, partition) order, each on the
   alive broker with the fewest partitions of that topic; ties: fewest partitions overall,
   then lowest id.
3. **Even out brokers**: while ``max - min > 1`` over total partition counts, move one
   partition from the most to the least loaded broker (ties: lowest id). The partition
   moved is, in order of preference: one placed in step 2 (moving it costs nothing extra)
   rather than a kept one; one whose topic is over-represented on the donor; the one with
   the largest per-topic gap between donor and recipient; the lowest (topic, partition).
4. **Even out each topic** without breaking step 3: while some topic has brokers ``hi``,
   ``lo`` with ``count(hi) - count(lo) >= 2``, either *move* one of its partitions
   ``hi -> lo`` when ``total(hi) > total(lo)`` (the two totals just trade places), or
   *swap* it with a partition of another topic that is over-represented on ``lo``. A swap
   partner always exists (if ``total(hi) <= total(lo)``, the other topics hold at least two
   more partitions on ``lo`` than on ``hi``), and every step lowers ``sum(count**2)`` over
   (topic, broker) by at least 2, so the pass terminates with every topic within 1.
   Partitions placed in step 2 are preferred as donors and swap partners.

Epochs: a partition's epoch is the leader epoch the leader stamps and fences with.

- a partition first led gets epoch 1 (0 means "never had a leader": created while no
  broker was alive);
- a partition whose leader changes to another broker gets ``previous epoch + 1``; this
  includes ``-1 -> b``, so a broker that comes back to a partition it led before still
  gets a new epoch;
- a partition left without any alive broker keeps its leader as ``-1`` and its epoch;
- ``epoch_floor`` (optional) is a lower bound per partition, for a partition that drops
  out of the assignment and comes back while its on-disk epoch is higher.

Version: ``prev.version + 1`` when anything (controller epoch, brokers, partitions, slot
owners, the coordinators list) differs from ``prev``, otherwise ``prev.version``; 1 for the first assignment.

Hand-off: the new owner of a key starts writing only when ``may_take_over`` says so:
the previous owner is dead, or its heartbeat shows it applied a version at least the one
that moved the key (see ``moved_in``).

Invariants:
    - ``balance`` is a pure, deterministic function of its arguments; the order of
      ``registered``/``alive`` and of ``topics`` does not matter;
    - when any broker is alive every partition's leader is alive; else every leader is -1;
    - a partition with a manual replica list (``preferred``) with an alive broker is led
      by the first alive broker of the list;
    - among the other partitions, totals per alive broker differ by at most 1, and so do
      each topic's;
    - a partition whose leader is alive keeps it unless step 3 or 4 needs to move it;
    - re-balancing the result with the same inputs returns an equal ``Assignment``;
    - per partition, epochs never decrease; any change of (real) leader increases it;
    - ``version`` never decreases, and increases whenever the content changes;
    - ``txn_slots`` is ``routing.slot_owners(brokers, alive)``;
    - ``coordinators`` is the argument of that name, sorted, deduplicated (None stays None).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NotRequired, TypeAlias, TypedDict

from kaas.domain import routing
from kaas.domain.routing import NO_BROKER

FORMAT = 1
"""The ``"format"`` field written into ``assignment.json``."""


class LeaderField(TypedDict):
    """One partition of ``assignment.json``'s ``partitions``."""

    leader: int
    epoch: int


class AssignmentRecord(TypedDict):
    """``assignment.json``, format 1 (``Assignment.to_json``)."""

    format: int
    controller_epoch: int
    version: int
    brokers: list[int]
    partitions: dict[str, list[LeaderField]]
    txn_slots: dict[str, int]
    """Each transaction slot's owner, by slot number (as a string)."""
    coordinators: NotRequired[list[int]]
    """Absent in files written before the list existed."""

SLOT_TAG = "@slot"
"""First element of a txn-slot key in ``moved_in``; '@' cannot occur in a topic name."""

MoveKey: TypeAlias = tuple[str, int]
"""``(topic, partition)`` for a partition, ``(SLOT_TAG, n)`` for transaction slot ``n``."""


def slot_key(slot: int) -> MoveKey:
    """The ``moved_in`` key of transaction slot ``slot``: ``(SLOT_TAG, slot)``."""
    return (SLOT_TAG, slot)


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    """Who leads one partition, and under which leader epoch.

    ``leader`` is a broker id, or -1 (``NO_BROKER``) when no broker is alive.
    """

    leader: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Assignment:
    """One ``assignment.json``, as written by the controller.

    Attributes:
        controller_epoch: epoch of the controller that computed it.
        version: bumped whenever the content changes; brokers report the version they
            applied in their heartbeat.
        brokers: every registered broker id, ascending (dead ones included).
        partitions: ``{topic: (PartitionLeader for partition 0, 1, ...)}``. Treat as
            read-only.
        txn_slots: ``{slot: owner}`` for every transaction slot; owner -1 when none alive.
            Treat as read-only.
        coordinators: the brokers that may coordinate groups, ascending
            (``domain.coordinators``: a broker back from the dead joins it after the hold);
            None in a file written before the list existed (then every live broker may).
    """

    controller_epoch: int
    version: int
    brokers: tuple[int, ...]
    partitions: dict[str, tuple[PartitionLeader, ...]]
    txn_slots: dict[int, int]
    coordinators: tuple[int, ...] | None = None

    def leader_of(self, topic: str, partition: int) -> PartitionLeader | None:
        """The leader of ``topic``/``partition``, or None when the assignment lacks it."""
        row = self.partitions.get(topic)
        if row is None or not 0 <= partition < len(row):
            return None
        return row[partition]

    def to_json(self) -> AssignmentRecord:
        """A plain dict for ``json.dumps`` (topics and slots in ascending order).

        Returns:
            ``{"format": 1, "controller_epoch", "version", "brokers", "partitions":
            {topic: [{"leader", "epoch"}, ...]}, "txn_slots": {"<slot>": owner},
            "coordinators": [broker, ...]}`` (``coordinators`` only when not None).
        """
        obj: AssignmentRecord = {
            "format": FORMAT,
            "controller_epoch": self.controller_epoch,
            "version": self.version,
            "brokers": list(self.brokers),
            "partitions": {
                topic: [{"leader": p.leader, "epoch": p.epoch} for p in self.partitions[topic]]
                for topic in sorted(self.partitions)
            },
            "txn_slots": {str(s): self.txn_slots[s] for s in sorted(self.txn_slots)},
        }
        if self.coordinators is not None:
            obj["coordinators"] = list(self.coordinators)
        return obj

    @classmethod
    def from_json(cls, obj: object) -> Assignment:
        """Parse what ``to_json`` produced (after a JSON round trip).

        Keys other than the ones ``to_json`` writes are ignored.

        Args:
            obj: the decoded JSON document.

        Returns:
            The Assignment.

        Raises:
            ValueError: the document is not a format-1 assignment (corrupt state: the
                caller reports it and refuses, it never resets).
        """
        if not isinstance(obj, dict):
            raise ValueError("assignment: not an object")
        if obj.get("format") != FORMAT:
            raise ValueError(f"assignment: unsupported format {obj.get('format')!r}")
        try:
            brokers = obj["brokers"]
            parts = obj["partitions"]
            slots = obj["txn_slots"]
            if not isinstance(brokers, list):
                raise ValueError("brokers: not a list")
            if not isinstance(parts, dict):
                raise ValueError("partitions: not an object")
            if not isinstance(slots, dict):
                raise ValueError("txn_slots: not an object")
            coords = obj.get("coordinators")
            if coords is not None and not isinstance(coords, list):
                raise ValueError("coordinators: not a list")
            partitions: dict[str, tuple[PartitionLeader, ...]] = {}
            for topic, row in parts.items():
                if not isinstance(row, list):
                    raise ValueError(f"partitions[{topic!r}]: not a list")
                partitions[topic] = tuple(
                    PartitionLeader(_int(p["leader"], "leader"), _int(p["epoch"], "epoch"))
                    for p in row
                )
            return cls(
                controller_epoch=_int(obj["controller_epoch"], "controller_epoch"),
                version=_int(obj["version"], "version"),
                brokers=tuple(_int(b, "brokers[]") for b in brokers),
                partitions=partitions,
                txn_slots={_int(int(s), "slot"): _int(o, "slot owner") for s, o in slots.items()},
                coordinators=None if coords is None else tuple(_int(b, "coordinators[]") for b in coords),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"assignment: missing or mistyped field: {exc!r}") from exc


def _int(value: object, what: str) -> int:
    if type(value) is not int:  # bool is an int subclass; reject it too
        raise ValueError(f"assignment: {what} is not an integer: {value!r}")
    return value


# ---------------------------------------------------------------------------------------
# balance


_Key: TypeAlias = tuple[str, int]


class _Layout:
    """Mutable working layout: which alive broker leads each placed partition, with counts."""

    __slots__ = ("alive", "leader", "on", "topic_count", "total")

    def __init__(self, alive: list[int]) -> None:
        self.alive = alive
        self.leader: dict[_Key, int] = {}
        self.on: dict[int, set[_Key]] = {b: set() for b in alive}
        self.total: dict[int, int] = dict.fromkeys(alive, 0)
        self.topic_count: dict[tuple[str, int], int] = {}

    def count(self, topic: str, broker: int) -> int:
        return self.topic_count.get((topic, broker), 0)

    def put(self, key: _Key, broker: int) -> None:
        old = self.leader.get(key)
        if old is not None:
            self.on[old].discard(key)
            self.total[old] -= 1
            self.topic_count[(key[0], old)] -= 1
        self.leader[key] = broker
        self.on[broker].add(key)
        self.total[broker] += 1
        self.topic_count[(key[0], broker)] = self.count(key[0], broker) + 1


def _place(layout: _Layout, keys: Iterable[_Key]) -> None:
    for key in keys:
        topic = key[0]
        best = min(layout.alive, key=lambda b: (layout.count(topic, b), layout.total[b], b))
        layout.put(key, best)


def _even_totals(layout: _Layout, sticky: set[_Key]) -> None:
    while True:
        hi = max(layout.alive, key=lambda b: (layout.total[b], -b))
        lo = min(layout.alive, key=lambda b: (layout.total[b], b))
        if layout.total[hi] - layout.total[lo] <= 1:
            return

        def preference(key: _Key, hi: int = hi, lo: int = lo) -> tuple[bool, bool, int, _Key]:
            gap = layout.count(key[0], hi) - layout.count(key[0], lo)
            return (key in sticky, gap <= 0, -gap, key)

        layout.put(min(layout.on[hi], key=preference), lo)


def _even_topic_once(layout: _Layout, topic: str, sticky: set[_Key]) -> bool:
    """One repair step for ``topic``; False when it is already within 1."""
    counts = {b: layout.count(topic, b) for b in layout.alive}
    top, bottom = max(counts.values()), min(counts.values())
    if top - bottom <= 1:
        return False
    his = [b for b in layout.alive if counts[b] == top]
    los = [b for b in layout.alive if counts[b] == bottom]

    def donor(hi: int) -> _Key:
        return min(
            (k for k in layout.on[hi] if k[0] == topic), key=lambda k: (k in sticky, k)
        )

    # A plain move keeps the totals within 1 exactly when it makes the two totals trade places.
    for hi in his:
        for lo in los:
            if layout.total[hi] > layout.total[lo]:
                layout.put(donor(hi), lo)
                return True
    # Otherwise swap with a partition of a topic over-represented on lo.
    hi, lo = his[0], los[0]
    partners = [
        k
        for k in layout.on[lo]
        if k[0] != topic and layout.count(k[0], lo) > layout.count(k[0], hi)
    ]
    if not partners:  # impossible: see the module docstring
        raise AssertionError(f"no swap partner for topic {topic!r} between {hi} and {lo}")
    partner = min(
        partners,
        key=lambda k: (k in sticky, -(layout.count(k[0], lo) - layout.count(k[0], hi)), k),
    )
    layout.put(donor(hi), lo)
    layout.put(partner, hi)
    return True


def _even_topics(layout: _Layout, topics: list[str], sticky: set[_Key]) -> None:
    # Each step lowers sum(count**2) by >= 2, so this bound is never reached.
    budget = len(layout.leader) ** 2 + 16
    changed = True
    while changed:
        changed = False
        for topic in topics:
            while _even_topic_once(layout, topic, sticky):
                changed = True
                budget -= 1
                if budget < 0:
                    raise AssertionError("per-topic evening did not converge")


def _pinned(topics: Mapping[str, int], registered: list[int], alive: list[int],
            preferred: Mapping[_Key, tuple[int, ...]], elected: Mapping[_Key, int]) -> dict[_Key, int]:
    """The partitions whose leader is chosen, not balanced: an elected one (a registered
    broker the caller checked is alive), else a manual list's first alive broker."""
    def exists(key: _Key) -> bool:
        return key[0] in topics and 0 <= key[1] < topics[key[0]]

    pinned = {key: lead for key, lead in elected.items() if lead in registered and exists(key)}
    alive_set = set(alive)
    for key, reps in preferred.items():
        lead = next((b for b in reps if b in alive_set), NO_BROKER)
        if lead != NO_BROKER and key not in pinned and exists(key):
            pinned[key] = lead
    return pinned


def balance(
    prev: Assignment | None,
    topics: Mapping[str, int],
    registered: Iterable[int],
    alive: Iterable[int],
    controller_epoch: int,
    *,
    epoch_floor: Mapping[tuple[str, int], int] | None = None,
    preferred: Mapping[tuple[str, int], tuple[int, ...]] | None = None,
    elected: Mapping[tuple[str, int], int] | None = None,
    coordinators: Iterable[int] | None = None,
) -> Assignment:
    """Compute the next assignment from the previous one and the current cluster.

    Args:
        prev: the assignment currently in force, or None for the very first one.
        topics: ``{topic: partition count}`` of every existing topic. Partitions of topics
            absent here (deleted) are dropped.
        registered: every registered broker id, dead or alive (any order).
        alive: the brokers that may lead: alive and not draining (any order).
        controller_epoch: the calling controller's epoch.
        epoch_floor: optional minimum epoch per ``(topic, partition)``, e.g. the on-disk
            manifest epoch of a partition that is absent from ``prev``.
        preferred: manual replica lists per ``(topic, partition)`` (CreateTopics or
            CreatePartitions ``assignments``): such a partition is led by the first alive
            broker of its list and left out of steps 1-4 (the operator placed it); when no
            broker of its list is alive it is balanced like the others.
        elected: leaders chosen by ElectLeaders (``domain.elections``) per
            ``(topic, partition)``: such a partition is led by that broker, which the caller
            checked is alive, even when it is not in ``alive`` (a broker back from the dead
            that the controller does not place on yet); it overrides ``preferred``.
        coordinators: the brokers that may coordinate groups
            (``domain.coordinators.eligible``), written into the assignment as they are
            (None: no list). Transaction slots are placed over ``alive``.

    Returns:
        The new Assignment; equal to ``prev`` (same version) when nothing changed.

    Raises:
        ValueError: an alive broker is not registered, a partition count is negative, or
            ``controller_epoch`` is below ``prev.controller_epoch``.
    """
    rows = sorted(set(registered))
    alive_ids = sorted(set(alive))
    _check(prev, topics, rows, alive_ids, controller_epoch)
    topic_names = sorted(topics)
    prev_parts = prev.partitions if prev is not None else {}

    def prev_of(key: _Key) -> PartitionLeader | None:
        row = prev_parts.get(key[0])
        return row[key[1]] if row is not None and key[1] < len(row) else None

    pinned = _pinned(topics, rows, alive_ids, preferred or {}, elected or {})
    layout = _lay_out(topics, topic_names, alive_ids, prev_of, pinned)
    leaders = {**layout.leader, **pinned}
    partitions = _with_epochs(topics, topic_names, leaders, prev_of, epoch_floor or {})
    coords = None if coordinators is None else tuple(sorted(set(coordinators)))
    txn_slots = routing.slot_owners(rows, alive_ids)
    brokers = tuple(rows)
    if prev is not None and (
        prev.controller_epoch == controller_epoch
        and prev.brokers == brokers
        and prev.partitions == partitions
        and prev.txn_slots == txn_slots
        and prev.coordinators == coords
    ):
        return prev
    return Assignment(
        controller_epoch=controller_epoch,
        version=prev.version + 1 if prev is not None else 1,
        brokers=brokers,
        partitions=partitions,
        txn_slots=txn_slots,
        coordinators=coords,
    )


def _with_epochs(topics: Mapping[str, int], topic_names: list[str], leaders: Mapping[_Key, int],
                 prev_of: Callable[[_Key], PartitionLeader | None], floors: Mapping[_Key, int]
                 ) -> dict[str, tuple[PartitionLeader, ...]]:
    """Every partition's row entry: its leader from ``leaders`` (NO_BROKER if absent) and
    its leader epoch, which a new leader raises by one (a new partition starts at 1, at 0
    while leaderless), losing the leader keeps, and ``floors`` bounds from below."""
    partitions: dict[str, tuple[PartitionLeader, ...]] = {}
    for topic in topic_names:
        row: list[PartitionLeader] = []
        for p in range(topics[topic]):
            key = (topic, p)
            leader = leaders.get(key, NO_BROKER)
            before = prev_of(key)
            if before is None:
                epoch = 0 if leader == NO_BROKER else 1
            elif leader == before.leader or leader == NO_BROKER:
                epoch = before.epoch
            else:
                epoch = before.epoch + 1
            row.append(PartitionLeader(leader, max(epoch, floors.get(key, 0))))
        partitions[topic] = tuple(row)
    return partitions


def _check(prev: Assignment | None, topics: Mapping[str, int], rows: list[int], alive_ids: list[int],
           controller_epoch: int) -> None:
    """``balance``'s argument checks (its Raises)."""
    if not set(alive_ids) <= set(rows):
        raise ValueError(f"alive brokers {sorted(set(alive_ids) - set(rows))} are not registered")
    if prev is not None and controller_epoch < prev.controller_epoch:
        raise ValueError(
            f"controller epoch {controller_epoch} is below the assignment's "
            f"{prev.controller_epoch}"
        )
    for topic, count in topics.items():
        if count < 0:
            raise ValueError(f"topic {topic!r} has a negative partition count {count}")


def _lay_out(topics: Mapping[str, int], topic_names: list[str], alive_ids: list[int],
             prev_of: Callable[[_Key], PartitionLeader | None], pinned: Mapping[_Key, int]) -> _Layout:
    """The leaders of every partition not ``pinned`` (placed by hand or elected): steps
    1-4 (a live previous leader keeps its partition, the rest are placed, then brokers and
    topics evened out)."""
    layout = _Layout(alive_ids)
    if not alive_ids:
        return layout
    alive_set = set(alive_ids)
    keys = [(t, p) for t in topic_names for p in range(topics[t]) if (t, p) not in pinned]
    sticky: set[_Key] = set()
    for key in keys:
        before = prev_of(key)
        if before is not None and before.leader in alive_set:
            layout.put(key, before.leader)
            sticky.add(key)
    _place(layout, (k for k in keys if k not in sticky))
    _even_totals(layout, sticky)
    _even_topics(layout, topic_names, sticky)
    return layout


# ---------------------------------------------------------------------------------------
# hand-off


def moved_in(prev: Assignment, new: Assignment) -> dict[MoveKey, tuple[int, int]]:
    """Which keys change owner between two assignments.

    A key present on one side only counts as owned by -1 on the other (a new partition
    moves from -1; a deleted one moves to -1). A broker that applies ``new`` records
    ``new.version`` as the version that moved each returned key; if it skipped versions
    in between, that is conservative (the previous owner will apply ``new`` soon).

    Args:
        prev: the assignment the caller applied last.
        new: the assignment being applied.

    Returns:
        ``{(topic, partition) or slot_key(n): (old_owner, new_owner)}`` for every key whose
        owner differs.
    """
    moves: dict[MoveKey, tuple[int, int]] = {}
    for topic in prev.partitions.keys() | new.partitions.keys():
        old_row = prev.partitions.get(topic, ())
        new_row = new.partitions.get(topic, ())
        for p in range(max(len(old_row), len(new_row))):
            old = old_row[p].leader if p < len(old_row) else NO_BROKER
            now = new_row[p].leader if p < len(new_row) else NO_BROKER
            if old != now:
                moves[(topic, p)] = (old, now)
    for slot in prev.txn_slots.keys() | new.txn_slots.keys():
        old = prev.txn_slots.get(slot, NO_BROKER)
        now = new.txn_slots.get(slot, NO_BROKER)
        if old != now:
            moves[slot_key(slot)] = (old, now)
    return moves


def may_take_over(
    key_moved_in_version: int,
    prev_owner: int,
    prev_owner_applied_version: int | None,
    prev_owner_alive: bool,
) -> bool:
    """The hand-off rule: may the new owner of a key start writing it?

    Args:
        key_moved_in_version: the assignment version that gave the key to the new owner.
        prev_owner: the previous owner's id, or -1 when the key had none.
        prev_owner_applied_version: the assignment version in the previous owner's latest
            heartbeat, or None when no heartbeat has been read.
        prev_owner_alive: whether the previous owner is alive (heartbeat counter moving).

    Returns:
        True when there was no previous owner, it is dead, or it has applied
        ``key_moved_in_version`` or later; False otherwise (answer a retriable error).
    """
    if prev_owner == NO_BROKER or not prev_owner_alive:
        return True
    return prev_owner_applied_version is not None and (
        prev_owner_applied_version >= key_moved_in_version
    )
