"""Membership rules (design section 4): liveness, listing, the hand-off and hand-back
rules, and what a heartbeat file tells about a peer. Pure: times are passed in (the
observer's monotonic clock), files are read by ``storage.cluster_files`` and the tick that
acts on these answers is ``tasks.membership``.

A peer is *live* while its heartbeat counter moved within ``session`` seconds by the
observer's own clock, unless a death notice named its current incarnation (then it is
dead until the counter moves again: a new incarnation). A live peer that is draining
keeps serving but is given no keys. Metadata names every peer heard from within the
(longer) listing window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypedDict, cast

if TYPE_CHECKING:
    from kaas.domain.assignment import Assignment

REJOIN_HOLD_S = 2.0  # a broker back from the dead gets keys placed on it again this long after
LIST_WINDOW_S = 9.0  # Apache's broker.session.timeout.ms default: how long Metadata names a silent broker


class ListenerField(TypedDict):
    """One entry of a heartbeat's ``listeners``."""

    name: str
    host: str
    port: int
    protocol: str


class Heartbeat(TypedDict):
    """``brokers/kaas-<id>.json``, format 1, as its broker writes it (``tasks.membership``)
    every tick. Files of older versions lack some members; ``absorb_heartbeat`` reads
    every member but ``broker_id`` with a default."""

    format: int
    broker_id: int
    counter: int
    host: str
    port: int
    listeners: list[ListenerField]
    incarnation: str
    host_name: str
    pid: int
    applied_version: int
    draining: bool
    controller_epoch: int
    pending: list[tuple[str, int]]
    """The partitions the applied assignment gives the broker that it has not opened."""
    seen: dict[str, int]
    """The counter of each peer's heartbeat (by broker id) as this broker last read it."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One advertised listener of a peer, as its heartbeat names it."""

    host: str
    port: int
    protocol: str = "PLAINTEXT"


@dataclass
class Peer:
    broker_id: int
    host: str = ""  # the heartbeat's host/port: its inter-broker listener's endpoint
    port: int = -1
    counter: int = -1
    changed_at: float = 0.0  # monotonic time the counter last moved (observer's clock)
    applied_version: int = 0
    draining: bool = False
    first_seen: float = 0.0
    # the incarnation its heartbeat names (``incarnation_of``): which process it is now
    incarnation: str = ""
    host_name: str = ""  # the host its heartbeat names, for log lines
    # the counter a death notice found it at: dead until the counter moves (a new incarnation)
    dead_counter: int | None = None
    # partitions assigned to it in its applied version that it has not opened (yet)
    pending: frozenset[tuple[str, int]] = frozenset()
    # its heartbeat's view of the other brokers' counters (the hand-back acknowledgement)
    seen: dict[int, int] | None = None
    # the counter it had when its presence connection ended: suspected until it moves
    suspected_counter: int | None = None
    back_at: float = 0.0  # monotonic time it came back after being dead (0: never dead)
    # its advertised listeners by name; None: a heartbeat without them (an older version,
    # whose one listener is host/port, PLAINTEXT)
    listeners: dict[str, Endpoint] | None = None

    def endpoint(self, listener: str) -> Endpoint | None:
        """Where to reach this peer on ``listener``: None when it has no such listener (a
        broker of an older version has only PLAINTEXT, at host/port)."""
        if self.listeners is None:
            return Endpoint(self.host, self.port) if listener == "PLAINTEXT" and self.port > 0 else None
        return self.listeners.get(listener)

    def peer_endpoint(self, listener: str) -> Endpoint | None:
        """Where a broker reaches this peer: its ``listener`` (the inter-broker listener's
        name); a peer of an older version at host/port, whatever the name."""
        if self.listeners is None:
            return Endpoint(self.host, self.port) if self.port > 0 else None
        return self.listeners.get(listener)

    def live(self, now: float, session: float) -> bool:
        return self.dead_counter is None and now - self.changed_at < session


def absorb_heartbeat(peers: dict[int, Peer], raw: Mapping[str, object], now: float, session: float) -> bool:
    """Record one parsed heartbeat file in ``peers``. Returns True when it changes what a
    tick acts on: the broker joined or came back from the dead, started or stopped
    draining, or applied another assignment version. A counter that moved is recorded but
    is no such change (a death by silence is found by the clock).

    Raises:
        KeyError, ValueError, TypeError: the file has no usable ``broker_id``.
    """
    obj = cast(Heartbeat, raw)
    bid = int(obj["broker_id"])
    material = False
    p = peers.get(bid)
    if p is None:
        p = peers[bid] = Peer(bid, first_seen=now, changed_at=now)
        p.counter = int(obj.get("counter", -1))
        material = True
    elif obj.get("counter") != p.counter:
        if not p.live(now, session):
            material = True  # back from the dead
            p.back_at = now
        p.counter = int(obj.get("counter", -1))
        p.changed_at = now
        p.dead_counter = None
        p.suspected_counter = None
    p.host = obj.get("host", "")
    p.port = int(obj.get("port", -1))
    p.incarnation = incarnation_of(obj)
    p.host_name = str(obj.get("host_name", ""))
    p.listeners = parse_listeners(obj.get("listeners"))
    applied = int(obj.get("applied_version", 0))
    draining = bool(obj.get("draining", False))
    if applied != p.applied_version or draining != p.draining:
        material = True
    p.applied_version, p.draining = applied, draining
    pending = obj.get("pending") or ()
    try:
        p.pending = frozenset((str(t), int(i)) for t, i in pending) if pending else frozenset()
    except (ValueError, TypeError):
        p.pending = frozenset()
    seen = obj.get("seen")
    p.seen = {int(k): int(v) for k, v in seen.items()} if isinstance(seen, dict) else None
    return material


def parse_listeners(raw: object) -> dict[str, Endpoint] | None:
    """A heartbeat's ``listeners`` ([{name, host, port, protocol}, ...]) by name; None when
    it has none (an older version). Malformed entries are left out."""
    if not isinstance(raw, list):
        return None
    out: dict[str, Endpoint] = {}
    for item in raw:
        try:
            out[str(item["name"])] = Endpoint(str(item["host"]), int(item["port"]),
                                              str(item.get("protocol", "PLAINTEXT")))
        except (KeyError, TypeError, ValueError):
            continue
    return out


class AdvertisedListener(Protocol):
    """What a heartbeat publishes of a listener (``kaas.listeners.Listener`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def advertised_host(self) -> str: ...
    @property
    def advertised_port(self) -> int: ...
    @property
    def protocol(self) -> str: ...
    @property
    def advertised(self) -> bool: ...


def listeners_field(listeners: Iterable[AdvertisedListener]) -> list[ListenerField]:
    """The heartbeat's ``listeners`` of this broker's advertised listeners (objects with
    name, advertised_host, advertised_port, protocol, advertised)."""
    return [{"name": x.name, "host": x.advertised_host, "port": x.advertised_port, "protocol": x.protocol}
            for x in listeners if x.advertised]


def incarnation_of(obj: Mapping[str, object]) -> str:
    """The incarnation a heartbeat or death notice names (``storage.incarnation``): its
    ``incarnation``, or for a file written before incarnations existed ``pid:<pid>``, so
    old files still match each other and never match a new incarnation."""
    inc = obj.get("incarnation")
    if isinstance(inc, str) and inc:
        return inc
    return f"pid:{obj.get('pid', 0) or 0}"


def notice_applies(p: Peer, notice_incarnation: str) -> bool:
    """Does a death notice naming ``notice_incarnation`` kill ``p``? Only when it names the
    incarnation ``p``'s heartbeat names, and ``p`` is not dead already. Never by pid: in
    containers every incarnation is PID 1."""
    return p.dead_counter is None and notice_incarnation == p.incarnation


def mark_dead(p: Peer, now: float, session: float) -> bool:
    """``p`` is dead now, until its counter moves again (a new incarnation). Returns True
    when that is news (``p`` was live until now)."""
    was_live = p.live(now, session)
    p.dead_counter = p.counter
    return was_live


def alive(me: int, me_draining: bool, peers: Iterable[Peer], now: float, session: float) -> list[int]:
    """Live brokers that take keys (draining ones excluded), sorted."""
    out = [] if me_draining else [me]
    out += [p.broker_id for p in peers if p.broker_id != me and p.live(now, session) and not p.draining]
    return sorted(out)


def alive_any(me: int, peers: Iterable[Peer], now: float, session: float) -> list[int]:
    """Live brokers including draining ones (still serving until they relinquish)."""
    return sorted({me} | {p.broker_id for p in peers if p.broker_id != me and p.live(now, session)})


def listed(me: int, peers: Iterable[Peer], now: float, window: float) -> list[int]:
    """The brokers Metadata names: every broker heard from within ``window``."""
    return sorted({me} | {p.broker_id for p in peers if now - p.changed_at < window})


def applied_everywhere(version: int, me: int, my_version: int, peers: Iterable[Peer],
                       now: float, session: float) -> bool:
    """Has every live broker (``me`` included, at ``my_version``) applied ``version``?"""
    if my_version < version:
        return False
    return all(p.applied_version >= version for p in peers
               if p.broker_id != me and p.live(now, session))


def acknowledged(me: int, first_counter: int | None, peers: Iterable[Peer], now: float, session: float,
                 up_for: float) -> bool:
    """Has every live peer read a heartbeat of this incarnation (counter ``first_counter``
    or later)? A peer that does not publish ``seen`` (an older version) is given one
    session from our start (``up_for`` seconds ago)."""
    if first_counter is None:
        return False
    for p in peers:
        if p.broker_id == me or not p.live(now, session):
            continue
        if p.seen is None:
            if up_for < session:
                return False
        elif p.seen.get(me, -1) < first_counter:
            return False
    return True


def opened_by(p: Peer | None, since_version: int, key: tuple[str, int]) -> bool:
    """Has peer ``p`` opened partition ``key``, whose leadership began in assignment
    ``since_version``? Its heartbeat shows that version applied and ``key`` not pending."""
    return p is not None and p.applied_version >= since_version and key not in p.pending


def placeable(alive_ids: Iterable[int], me: int, peers: Mapping[int, Peer], now: float, hold: float) -> list[int]:
    """The live brokers the controller places keys on: one back from the dead gets its
    share back only ``hold`` seconds after it returned (its clients are still settling
    after the failover; a second move at once would be a second disruption)."""
    return [b for b in alive_ids if b == me or b not in peers or now - peers[b].back_at >= hold]


def handoff_blockers(me: int, version: int, peers: Iterable[Peer], now: float, session: float) -> list[int]:
    """The live peers that have not applied assignment ``version`` yet: a leadership that
    began in it is taken over only when there are none (the previous leader relinquished)."""
    return [p.broker_id for p in peers
            if p.broker_id != me and p.live(now, session) and p.applied_version < version]


def track_leadership(prev: Assignment | None, new: Assignment, me: int, since: dict[tuple[str, int], int],
                     became: dict[tuple[str, int], int]) -> None:
    """Update, for a newly applied assignment ``new`` (after ``prev``, None at start):
    ``since``, the version each partition's leadership began in (Metadata names a peer
    leader only once it opened the partition), and ``became``, the version each of our
    own leaderships began in (the hand-off rule)."""
    for key in [k for k in since if k[0] not in new.partitions]:
        del since[key]
    for topic, leaders in new.partitions.items():
        prow = prev.partitions.get(topic, ()) if prev is not None else ()
        for p, pl in enumerate(leaders):
            key = (topic, p)
            old = prow[p] if p < len(prow) else None
            if prev is None:
                since[key] = 0  # began before we joined: the leader's pending list tells
            elif old is None or old != pl:
                since[key] = new.version
            if pl.leader == me:
                if old is None or old.leader != me or old.epoch != pl.epoch:
                    became[key] = new.version
            else:
                became.pop(key, None)
    for key in [k for k in became if k[0] not in new.partitions]:
        del became[key]


def pending(assignment: Assignment | None, me: int,
            opened: Iterable[tuple[str, int]] | Mapping[tuple[str, int], object]) -> frozenset[tuple[str, int]]:
    """Partitions ``assignment`` gives broker ``me`` that are not in ``opened``."""
    if assignment is None:
        return frozenset()
    return frozenset((t, i) for t, row in assignment.partitions.items() for i, pl in enumerate(row)
                     if pl.leader == me and (t, i) not in opened)
