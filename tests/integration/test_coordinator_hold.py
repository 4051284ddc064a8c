"""The coordinator hold on a real 3-broker cluster (``docs/groups.rst``, "Where a group's
coordinator is"): a SIGKILLed broker, restarted by its supervisor, does not take its groups
back until ``--group-coordinator-rejoin-hold-ms`` after it returned, then takes them back; and at
no moment do two brokers serve one group. Two groups whose primary is the killed broker
each keep a live member (one classic, one ``group.protocol=consumer``) throughout: the
moves drop neither member nor any partition."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer
from kio.schema.errors import ErrorCode

from kaas.client import WireClient
from kaas.domain.routing import coordinator_for
from kaas.testing import ClusterProcess, wait_for
from tests.kafka import create_topic

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

HOLD_S = 10.0
VICTIM = 1
PARTITIONS = 4


def servers(cluster: ClusterProcess, group: str) -> set[int]:
    """The brokers that answer OffsetFetch for ``group`` as its serving coordinator (not
    NOT_COORDINATOR, not COORDINATOR_LOAD_IN_PROGRESS, reachable)."""
    out = set()
    for b, port in enumerate(cluster.ports):
        try:
            with WireClient("127.0.0.1", port, timeout=1.0) as wc:
                r = wc.call(9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False})
        except OSError:
            continue
        if r.groups[0].error_code == ErrorCode.none:
            out.add(b)
    return out


class Member:
    """A consumer polled by a thread; remembers every member id and partition set it had."""

    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str) -> None:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "group.protocol": protocol}
        if protocol == "classic":
            conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
        self.c = Consumer(conf)
        self.incremental = protocol == "consumer"  # its callbacks name what changed, not the whole set
        self.assigned: set[int] = set()
        self.member_ids: list[str] = []
        self.lost = 0
        self.stop = threading.Event()
        self.c.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._lose)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assign(self, _c, parts) -> None:
        if self.incremental:
            self.assigned |= {p.partition for p in parts}
        else:
            self.assigned = {p.partition for p in parts}

    def _revoke(self, _c, parts) -> None:
        self.assigned -= {p.partition for p in parts}

    def _lose(self, _c, parts) -> None:
        self.lost += 1
        self.assigned -= {p.partition for p in parts}

    def _run(self) -> None:
        while not self.stop.is_set():
            self.c.poll(0.1)
            mid = self.c.memberid()
            if mid and (not self.member_ids or self.member_ids[-1] != mid):
                self.member_ids.append(mid)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.c.close()


def test_a_restarted_broker_takes_its_groups_back_only_after_the_hold(tmp_path):
    cluster = ClusterProcess(tmp_path / "data", 3, extra=["--group-coordinator-rejoin-hold-ms", str(int(HOLD_S * 1000)),
                                                          "--group-initial-rebalance-delay-ms", "300"]).start()
    suffix = uuid.uuid4().hex[:6]
    topic = f"hold-{suffix}"
    names = (f"hold-{suffix}-{i}" for i in range(1000))
    groups = [g for g, _ in zip((g for g in names if coordinator_for(g, [0, 1, 2], [0, 1, 2]) == VICTIM),
                                range(2), strict=False)]
    members: list[Member] = []
    try:
        create_topic(cluster.bootstrap, topic, PARTITIONS, timeout=30)
        members = [Member(cluster.bootstrap, groups[0], topic, "classic"),
                   Member(cluster.bootstrap, groups[1], topic, "consumer")]
        wait_for(lambda: all(m.assigned == set(range(PARTITIONS)) for m in members), 60,
                 "each member owning every partition", interval=0.2)
        assert all(servers(cluster, g) == {VICTIM} for g in groups)
        before = [list(m.member_ids) for m in members]

        samples: list[tuple[float, str, set[int]]] = []  # (s since the kill, group, serving brokers)
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                for g in groups:
                    samples.append((time.monotonic() - killed, g, servers(cluster, g)))
                time.sleep(0.1)

        # Sampling starts once SIGKILL is sent: a query that began before it could be
        # answered by the old process, which is no early take-back.
        pid = cluster.kill(VICTIM)
        killed = time.monotonic()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            cluster.wait_restarted(VICTIM, pid)
            back = time.monotonic() - killed  # the restarted broker answers: the controller has seen it
            wait_for(lambda: len(samples) > 2 and samples[-1][0] > back + HOLD_S
                     and all(s[2] == {VICTIM} for s in samples[-len(groups):]),
                     HOLD_S + 20, "the groups back at the restarted broker", interval=0.1)
        finally:
            stop.set()
            sampler.join(10)

        many = [s for s in samples if len(s[2]) > 1]
        assert not many, f"two brokers served one group: {many[:5]}"
        early = [s for s in samples if VICTIM in s[2] and s[0] < back + HOLD_S - 2.0]
        assert not early, f"the restarted broker served its groups within its hold: {early[:5]}"
        interim = {b for s in samples if s[0] < back + HOLD_S - 2.0 for b in s[2]}
        assert interim and VICTIM not in interim  # the groups were served meanwhile, elsewhere
        taken = min(s[0] for s in samples if s[2] == {VICTIM}) - back
        gaps = longest_unserved(samples, groups)
        print(f"restarted broker answered {back:.1f} s after the kill and took its groups back {taken:.1f} s "
              f"later (hold {HOLD_S} s); interim coordinators {sorted(interim)}; longest stretch a group had "
              f"no coordinator {max(gaps.values()):.1f} s; {len(samples)} samples")
        assert max(gaps.values()) < 5.0, gaps

        wait_for(lambda: all(m.assigned == set(range(PARTITIONS)) for m in members), 30,
                 "each member owning every partition again", interval=0.2)
        for m, ids in zip(members, before, strict=True):
            assert m.member_ids[: len(ids)] == ids and m.lost == 0, (m.member_ids, m.lost)
    finally:
        for m in members:
            m.close()
        cluster.stop()


def longest_unserved(samples: list[tuple[float, str, set[int]]], groups: list[str]) -> dict[str, float]:
    """Per group, the longest stretch of samples in which no broker served it."""
    out = {}
    for g in groups:
        longest, since = 0.0, None
        for t, gg, who in samples:
            if gg != g:
                continue
            if who:
                since = None
            else:
                since = t if since is None else since
                longest = max(longest, t - since)
        out[g] = longest
    return out
