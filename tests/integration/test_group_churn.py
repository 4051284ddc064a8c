"""A consumer group whose coordinator keeps moving (issue 19, point 5), on a real 3-broker
cluster through the supervisor: a member dies without leaving while the broker that
coordinates the group is SIGKILLed each time it has served the group for a while, always
well under the members' session timeout. The dead member must still be removed and the
rebalance complete (the live members end up owning every partition between them), and a
live member must never be dropped by a move (it keeps its member id throughout, and once
the group is Stable, further moves change nothing it sees). With a replacement member that
joins right after the death (a restarted process, as in the issue), the rebalance it starts
is under way while the coordinator moves."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from kio.schema.errors import ErrorCode

from kaas.client import WireClient
from kaas.testing import ClusterProcess, wait_for
from tests.kafka import create_topic

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

PARTITIONS = 6
SESSION_MS = 6000
# How long each coordinator gets to serve the group before it is killed: more than half a
# session (what a restored member is given to reach its new coordinator) and well under a
# whole one (what restarting every session on load would give a dead member, each time).
HOLD_S = 4.0
CONSUMER = {"enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": False,
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 30000}

DEAD_MEMBER = r"""
import sys
from confluent_kafka import Consumer
bootstrap, group, topic, conf = sys.argv[1], sys.argv[2], sys.argv[3], eval(sys.argv[4])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **conf})
c.subscribe([topic], on_assign=lambda _c, ps: print("ASSIGNED", len(ps), flush=True))
while True:
    c.poll(0.1)
"""


class LiveMember:
    """A confluent consumer polled by a thread: records its rebalance callbacks and every
    member id it has had (a new one would mean it was dropped from the group and rejoined)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **CONSUMER})
        self.lock = threading.Lock()
        self.events: list[tuple[str, tuple[int, ...]]] = []
        self.assignment: set[int] = set()
        self.member_ids: list[str] = []
        self.stop = threading.Event()
        self.c.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._lost)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _note(self, kind: str, parts) -> None:
        with self.lock:
            self.events.append((kind, tuple(sorted(tp.partition for tp in parts))))

    def _assign(self, _c, parts) -> None:
        self._note("assign", parts)
        with self.lock:
            self.assignment = {tp.partition for tp in parts}

    def _revoke(self, _c, parts) -> None:
        self._note("revoke", parts)
        with self.lock:
            self.assignment = set()

    def _lost(self, _c, parts) -> None:
        self._note("lost", parts)
        with self.lock:
            self.assignment = set()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.c.poll(0.1)
            try:
                mid = self.c.memberid()
            except Exception:  # not joined yet
                mid = None
            if mid:
                with self.lock:
                    if not self.member_ids or self.member_ids[-1] != mid:
                        self.member_ids.append(mid)

    def owns(self) -> set[int]:
        with self.lock:
            return set(self.assignment)

    def snapshot(self) -> tuple[list, list[str]]:
        with self.lock:
            return list(self.events), list(self.member_ids)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.c.close()


def coordinator_of(cluster: ClusterProcess, group: str) -> int | None:
    """The broker FindCoordinator names for ``group`` (asking each broker in turn)."""
    for port in cluster.ports:
        try:
            with WireClient("127.0.0.1", port, timeout=2.0) as wc:
                r = wc.call(10, 3, {"key": group, "key_type": 0})
        except OSError:
            continue
        if r.error_code == ErrorCode.none:
            return r.node_id
    return None


def describe(cluster: ClusterProcess, broker_id: int, group: str):
    """DescribeGroups at ``broker_id``: (state, member ids), or None unless it answers for
    the group as its coordinator."""
    try:
        with WireClient("127.0.0.1", cluster.ports[broker_id], timeout=2.0) as wc:
            g = wc.call(15, 5, {"groups": [group], "include_authorized_operations": False}).groups[0]
    except OSError:
        return None
    if g.error_code != ErrorCode.none:
        return None
    return g.group_state, sorted(m.member_id for m in g.members)


def serving_coordinator(cluster: ClusterProcess, group: str, timeout: float = 60.0) -> int:
    """Wait until some broker answers for the group as its coordinator; its id."""
    def serving():
        coord = coordinator_of(cluster, group)
        if coord is not None and describe(cluster, coord, group) is not None:
            return coord + 1  # broker 0 is a true answer too
        return None
    return wait_for(serving, timeout, "a broker serving the group", interval=0.1) - 1


@pytest.mark.parametrize("replacement", [False, True], ids=["survivor-alone", "with-replacement"])
def test_a_group_finishes_rebalancing_while_its_coordinator_keeps_moving(tmp_path, replacement):
    cluster = ClusterProcess(tmp_path / "data", 3, extra=["--group-initial-rebalance-delay-ms", "300"]).start()
    topic, group = f"churn-{uuid.uuid4().hex[:6]}", f"churn-group-{uuid.uuid4().hex[:6]}"
    live = dead = newcomer = None
    try:
        create_topic(cluster.bootstrap, topic, PARTITIONS, timeout=30)
        live = LiveMember(cluster.bootstrap, group, topic)
        dead = subprocess.Popen(
            [sys.executable, "-c", DEAD_MEMBER, cluster.bootstrap, group, topic, repr(CONSUMER)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            cwd=str(Path(__file__).resolve().parents[2]))

        def two_members_stable():
            coord = coordinator_of(cluster, group)
            d = None if coord is None else describe(cluster, coord, group)
            return d is not None and d[0] == "Stable" and len(d[1]) == 2 and len(live.owns()) == PARTITIONS // 2
        wait_for(two_members_stable, 60, "a Stable group of two, three partitions each", interval=0.2)
        _, ids = live.snapshot()
        member_id = ids[-1]

        dead.send_signal(signal.SIGKILL)  # no LeaveGroup: only its session can remove it
        dead.wait(10)
        t_dead = time.monotonic()
        if replacement:
            newcomer = LiveMember(cluster.bootstrap, group, topic)
        members = [live] if newcomer is None else [live, newcomer]

        def settled_now() -> bool:
            owned = [m.owns() for m in members]
            return (sum(map(len, owned)) == PARTITIONS and set().union(*owned) == set(range(PARTITIONS))
                    and all(owned))

        # Churn: each coordinator serves the group for HOLD_S, then it is SIGKILLed (and
        # restarted by the supervisor), until the live members own every partition.
        moves: list[tuple[float, int]] = []
        settled = None
        while settled is None and time.monotonic() - t_dead < 150:
            coord = serving_coordinator(cluster, group)
            end = time.monotonic() + HOLD_S
            while time.monotonic() < end:
                if settled_now():
                    settled = time.monotonic() - t_dead
                    break
                time.sleep(0.05)
            if settled is None:
                moves.append((round(time.monotonic() - t_dead, 1), coord))
                cluster.wait_restarted(coord, cluster.kill(coord))
        print(f"dead member removed and rebalance done {settled} s after its death; "
              f"coordinators killed (s after the death, broker): {moves}")
        assert settled is not None, f"the group never settled under churn; kills: {moves}"
        assert len(moves) >= 1  # it did not settle before its coordinator moved at all
        coord = serving_coordinator(cluster, group)
        final_ids = sorted(m.snapshot()[1][-1] for m in members)
        assert member_id in final_ids
        assert describe(cluster, coord, group) == ("Stable", final_ids)
        events, ids = live.snapshot()
        assert ids == [member_id], f"the live member was dropped and rejoined: {ids}"
        assert not [e for e in events if e[0] == "lost"], events
        before = [m.snapshot() for m in members]

        # A Stable group whose coordinator keeps moving: the live members see nothing.
        for _ in range(3):
            coord = serving_coordinator(cluster, group)
            time.sleep(1.0)
            cluster.wait_restarted(coord, cluster.kill(coord))
        coord = serving_coordinator(cluster, group)
        time.sleep(2 * SESSION_MS / 1000)  # past a whole session on the last coordinator
        assert describe(cluster, serving_coordinator(cluster, group), group) == ("Stable", final_ids)
        assert [m.snapshot() for m in members] == before
        assert settled_now()
    finally:
        for m in (live, newcomer):
            if m is not None:
                m.close()
        if dead is not None and dead.poll() is None:
            dead.kill()
            dead.wait(10)
        cluster.stop()
