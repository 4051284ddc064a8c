"""What this broker knows of the cluster (design section 4): its peers, the controller, the
applied assignment and its own write lease. ``tasks.membership`` keeps it current (one tick
every ``heartbeat_ms``, and whenever the doorbell rings or somebody ``wake``s it); handlers
and coordinators only read it. The rules themselves are ``domain.membership``.

Lease (self-fencing): a broker whose last successful heartbeat is older than
``session_timeout_ms / 2`` by its own monotonic clock stops acknowledging writes
(``lease_valid``), so by the time peers call it dead it has already stopped. A SIGSTOPped
broker resumes with an expired lease and applies the new assignment before writing again.
"""

from __future__ import annotations

import structlog
import trio

from kaas.clock import SYSTEM, Clock
from kaas.domain import membership as rules
from kaas.domain.assignment import Assignment
from kaas.domain.membership import LIST_WINDOW_S, REJOIN_HOLD_S, Peer

__all__ = ["ClusterView", "Peer"]

log = structlog.get_logger()


class ClusterView:
    def __init__(self, broker_id: int, session_timeout_ms: int, heartbeat_ms: int, clock: Clock = SYSTEM,
                 coordinator_hold_ms: int = 0) -> None:
        self.me = broker_id
        self.clock = clock  # its monotonic time: liveness, the lease (one time base)
        self.draining = False  # this broker drains (SIGTERM): the controller moves its keys away
        self.session = session_timeout_ms / 1000
        self.list_window = max(3 * self.session, LIST_WINDOW_S)  # see listed()
        self.rejoin_hold = REJOIN_HOLD_S  # see domain.membership.placeable
        self.coordinator_hold = coordinator_hold_ms / 1000  # see domain.coordinators.eligible
        # the version of the applied assignment whose coordinators list is in force (the
        # version that last changed it): groups are served once every live peer applied it
        self.coordinators_version = 0
        self.period = heartbeat_ms / 1000
        self.peers: dict[int, Peer] = {}
        self.counter = 0
        self.lease_until = 0.0
        # times the lease was found lapsed: a connection accepted before the last lapse may
        # hold requests sent before peers declared this broker dead (WriteTxnMarkers checks)
        self.lapses = 0
        self.started = self.clock.monotonic()
        self.assignment: Assignment | None = None
        self.controller_epoch = 0  # highest epoch file seen
        self.is_controller = False
        self.controller_id: int | None = None
        self.applied_version = 0
        self._since: dict[tuple[str, int], int] = {}  # assignment version each partition's leadership began
        self.first_counter: int | None = None  # this incarnation's first (or first after a lapse) heartbeat
        self.doorbell = False  # the inotify doorbell is running
        self.failovers = 0
        # ElectLeaders' choices, (topic, partition) -> broker, kept by the controller until
        # its own placement agrees (``Membership._elections``); in memory only: a new
        # controller places by its own rules, and ElectLeaders may be sent again
        self.elections: dict[tuple[str, int], int] = {}
        self._wake = trio.Event()
        self._changed = trio.Event()

    # ------------------------------------------------------------------ views

    def lease_valid(self) -> bool:
        return self.clock.monotonic() < self.lease_until

    def alive(self) -> list[int]:
        return rules.alive(self.me, self.draining, self.peers.values(), self.clock.monotonic(), self.session)

    def alive_any(self) -> list[int]:
        """Alive brokers including draining ones (still serving until they relinquish)."""
        return rules.alive_any(self.me, self.peers.values(), self.clock.monotonic(), self.session)

    def listed(self) -> list[int]:
        """The brokers Metadata names: every broker heard from within ``list_window``
        (longer than the liveness timeout). Leadership and coordinators move after
        ``session``; the broker list does not shrink as fast, because librdkafka
        decommissions the handle of a broker that drops out of Metadata, and a handle
        its transaction or group coordinator lookup still holds then never comes back
        (seen in the disk-full chaos scenario: every broker missed heartbeats for a few
        seconds, clients got one-broker Metadata answers, and a copier's
        send_offsets_to_transaction hung for good). Apache lists a broker until
        broker.session.timeout.ms (9 s) without a heartbeat; this is the same window."""
        return rules.listed(self.me, self.peers.values(), self.clock.monotonic(), self.list_window)

    def is_alive_any(self, broker_id: int) -> bool:
        """``broker_id in alive_any()``, without building the list (asked on every
        transactional request)."""
        if broker_id == self.me:
            return True
        p = self.peers.get(broker_id)
        return p is not None and p.live(self.clock.monotonic(), self.session)

    def suspect(self, broker_id: int, incarnation: str) -> None:
        """The presence connection to incarnation ``incarnation`` of ``broker_id`` ended
        (``tasks.presence``): until its heartbeat counter moves, Metadata and
        FindCoordinator send clients elsewhere for its keys. Ownership does not change;
        read the volume now, where a death notice may already be."""
        p = self.peers.get(broker_id)
        if p is None or p.incarnation != incarnation or p.suspected_counter is not None:
            return  # (another incarnation by now)
        p.suspected_counter = p.counter
        log.info("peer_suspected", broker=broker_id, incarnation=incarnation[:8], host_name=p.host_name)
        self.wake()

    def is_suspected(self, broker_id: int) -> bool:
        p = self.peers.get(broker_id)
        return p is not None and p.suspected_counter is not None

    def opened_by(self, leader: int, topic: str, index: int) -> bool:
        """Has peer ``leader`` opened the partition it leads under the current assignment?
        Until then Metadata names no leader."""
        key = (topic, index)
        return rules.opened_by(self.peers.get(leader), self._since.get(key, 0), key)

    def since(self, topic: str, index: int) -> int:
        """The assignment version in which the partition's current leadership began."""
        return self._since.get((topic, index), 0)

    def applied_everywhere(self, version: int) -> bool:
        """Has every live broker (this one included) applied assignment ``version``?"""
        return rules.applied_everywhere(version, self.me, self.applied_version, self.peers.values(),
                                        self.clock.monotonic(), self.session)

    def acknowledged(self) -> bool:
        """Has every live peer read a heartbeat of this incarnation (or, after a lapsed
        lease, one written since)? Its ``seen`` entry for us proves that its tick noticed
        us alive and unloaded the groups it held for us, so we may write their files."""
        now = self.clock.monotonic()
        return rules.acknowledged(self.me, self.first_counter, self.peers.values(), now, self.session,
                                  now - self.started)

    def coordinators(self) -> tuple[int, ...] | None:
        """The coordinators list of the applied assignment (None: none applied, or one
        without a list): groups are placed over its live brokers
        (``domain.coordinators.candidates``)."""
        a = self.assignment
        return None if a is None else a.coordinators

    def coordinators_settled(self) -> bool:
        """Has every live broker applied the assignment that put the coordinators list in
        force? Until then a peer may still serve, by the previous list, a group the
        current one gives this broker (the hand-off rule, for groups)."""
        return self.applied_everywhere(self.coordinators_version)

    def registered(self) -> list[int]:
        return sorted(set(self.peers) | {self.me})

    def has_peers(self) -> bool:
        """Is any other broker registered (``len(registered()) > 1``, without the sort)?"""
        return any(b != self.me for b in self.peers)

    # ------------------------------------------------------------------ wakeups

    def wake(self) -> None:
        """Ask the membership tick to run now."""
        self._wake.set()

    async def wait_woken(self) -> None:
        await self._wake.wait()

    def clear_wake(self) -> None:
        self._wake = trio.Event()

    def notify_changed(self) -> None:
        ev, self._changed = self._changed, trio.Event()
        ev.set()

    async def wait_changed(self) -> None:
        """Return after the next tick (the cluster view may have changed)."""
        await self._changed.wait()
