"""The cluster a Java scenario (``apache_eos``, ``streams``) runs against: a fresh 3-broker
kaas cluster (``kaas cluster``, whose supervisor restarts a killed broker after 0.5 s) or a
fresh 3-node Apache Kafka 4.4 cluster (KRaft, combined mode) whose watchdog restarts a
killed JVM after 0.5 s, as kaas's supervisor does (``scripts/bench/apache_target.py``).

Both answer what ``faults.Faults`` asks of a cluster (``n``, ``pid``, ``kill``, ``signal``,
``bootstrap``) with brokers numbered from 0, and ``stop``. The Apache nodes run with the
small heap, the serial collector and C1 of ``scripts/peers/apache.py`` (``JVM_OPTS``), so
that three of them fit beside the scenario's JVMs on two cores; their configuration is
the shipped ``config/server.properties`` with internal topics on 3 nodes, min ISR 2
(``apache_target.stock_properties``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from kaas.testing import ClusterProcess, api_versions_ok

TARGETS = ("kaas", "apache")


class Target(Protocol):
    name: str
    n: int

    @property
    def bootstrap(self) -> str: ...

    def pid(self, broker_id: int) -> int: ...

    def signal(self, broker_id: int, sig: int) -> int: ...

    def kill(self, broker_id: int) -> int: ...

    def ready(self, broker_id: int) -> bool: ...

    def stop(self) -> None: ...


class KaasTarget(ClusterProcess):
    """``kaas cluster`` with 3 brokers; the transaction sweep every second (as the other
    chaos scenarios run it)."""

    name = "kaas"

    def __init__(self, tmp: Path, extra: list[str] | None = None) -> None:
        super().__init__(tmp / "data", 3, env={"KAAS_TXN_SWEEP_MS": "1000"}, extra=extra)

    def ready(self, broker_id: int) -> bool:
        """The broker answers ApiVersions (a kaas broker serves once it listens)."""
        return api_versions_ok("127.0.0.1", self.ports[broker_id])


COORDINATOR_LOGGERS = """\
logger.group.name = org.apache.kafka.coordinator.group
logger.group.level = INFO
logger.txn.name = org.apache.kafka.coordinator.transaction
logger.txn.level = INFO
logger.oldtxn.name = kafka.coordinator.transaction
logger.oldtxn.level = INFO
logger.retention.name = kafka.log.UnifiedLog
logger.retention.level = INFO
logger.retention4.name = org.apache.kafka.storage.internals.log.UnifiedLog
logger.retention4.level = INFO
"""


def _apache_class():
    from bench.apache_target import _Apache, _peer  # scripts/ is on sys.path (chaos/__main__.py)

    light = _peer().JVM_OPTS

    class ApacheTarget(_Apache):
        """``apache_target._Apache`` (shipped broker settings, a watchdog restarting a dead
        JVM after 0.5 s, pid files in ``run/kaas-<node>.pid``) with the light JVM options."""

        name = "apache"

        def _configure(self) -> None:
            """The shipped settings, and the group and transaction coordinators and the logs
            (segment deletions by retention, log start offsets) logging at INFO in each
            node's ``server.log`` (loads, rebalances, member removals, fencing), which
            explain a stall; ``KAAS_CHAOS_KEEP=1`` keeps them."""
            super()._configure()
            for node in range(1, self.n + 1):
                with open(self.cluster._node_dir(node) / "log4j2.properties", "a") as f:
                    f.write(COORDINATOR_LOGGERS)

        def _java(self, node: int, main: str, *args: str) -> list[str]:
            d = self.cluster._node_dir(node)
            return [self.peer.java(), *light, f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
                    f"-Dkafka.logs.dir={d}", "-cp", self.cp, main, *args]

        def pid(self, broker_id: int) -> int:
            return int((self.run_dir / f"kaas-{broker_id + 1}.pid").read_text().strip())

        def signal(self, broker_id: int, sig: int) -> int:
            pid = self.pid(broker_id)
            os.kill(pid, sig)
            return pid

        def kill(self, broker_id: int) -> int:
            return self.signal(broker_id, signal.SIGKILL)

        def ready(self, broker_id: int) -> bool:
            """The node answers Metadata listing every node, and every partition (the
            internal topics' too) has all its replicas in sync: the node is back in the ISR,
            as Apache's own tests wait for (``await_no_under_replicated_partitions``)."""
            from kaas.client import WireClient

            try:
                with WireClient("127.0.0.1", self.cluster.ports[broker_id], timeout=2.0) as wc:
                    md = wc.call(3, 12, {"topics": None, "allow_auto_topic_creation": False})
            except (OSError, EOFError, ConnectionError):
                return False
            return len(md.brokers) == self.n and all(
                len(p.isr_nodes) == len(p.replica_nodes) for t in md.topics for p in t.partitions)

        def stop(self) -> None:
            self.close(keep=bool(os.environ.get("KAAS_CHAOS_KEEP")))

    return ApacheTarget


def start_target(name: str, tmp: Path) -> Target:
    """A fresh 3-broker cluster of ``name`` (kaas: its data under ``tmp``; Apache: on
    /dev/shm), ready: every broker lists all three."""
    if name == "kaas":
        kaas = KaasTarget(tmp)
        kaas.start(timeout=60.0)
        return kaas
    return _apache_class()(3)


def kill_rotation(faults, target: Target, stop: threading.Event, every_s: float, downtimes: list[float],
                  after_kill: Callable[[], None] | None = None) -> None:
    """SIGKILL broker 0, 1, 2, 0, ... every ``every_s`` until ``stop``, but never while the
    last broker killed is not serving again: one broker down at a time, whatever the
    target's restart time (a kaas broker serves again within a second; an Apache node takes
    seconds to start its JVM and catch up with the quorum, which stretches the cadence).
    Each kill's time until the broker served again goes to ``downtimes``; ``after_kill``
    runs after each kill."""
    k = 0
    next_at = time.monotonic() + every_s
    while not stop.wait(max(0.0, next_at - time.monotonic())):
        b = k % target.n
        t = time.monotonic()
        faults.kill_broker(b)
        k += 1
        if after_kill is not None:
            after_kill()
        stop.wait(0.2)
        while not stop.is_set() and not target.ready(b):
            stop.wait(0.2)
        if stop.is_set():
            return
        downtimes.append(round(time.monotonic() - t, 2))
        next_at = max(t + every_s, time.monotonic())


def spread(xs: list[float]) -> dict | None:
    """Median and maximum of a list of durations (a broker's time from SIGKILL to serving)."""
    if not xs:
        return None
    s = sorted(xs)
    return {"median": s[len(s) // 2], "max": s[-1], "n": len(s)}
