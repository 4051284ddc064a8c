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
from pathlib import Path
from typing import Protocol

from kaas.testing import ClusterProcess

TARGETS = ("kaas", "apache")


class Target(Protocol):
    name: str
    n: int

    @property
    def bootstrap(self) -> str: ...

    def pid(self, broker_id: int) -> int: ...

    def signal(self, broker_id: int, sig: int) -> int: ...

    def kill(self, broker_id: int) -> int: ...

    def stop(self) -> None: ...


class KaasTarget(ClusterProcess):
    """``kaas cluster`` with 3 brokers; the transaction sweep every second (as the other
    chaos scenarios run it)."""

    name = "kaas"

    def __init__(self, tmp: Path, extra: list[str] | None = None) -> None:
        super().__init__(tmp / "data", 3, env={"KAAS_TXN_SWEEP_MS": "1000"}, extra=extra)

    def stop(self, timeout: float = 20.0, graceful: bool = True) -> None:  # type: ignore[override]
        super().stop(timeout, graceful)


def _apache_class():
    from bench.apache_target import _Apache, _peer  # scripts/ is on sys.path (chaos/__main__.py)

    light = _peer().JVM_OPTS

    class ApacheTarget(_Apache):
        """``apache_target._Apache`` (shipped broker settings, a watchdog restarting a dead
        JVM after 0.5 s, pid files in ``run/kaas-<node>.pid``) with the light JVM options."""

        name = "apache"

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

        def stop(self) -> None:
            self.close(keep=bool(os.environ.get("KAAS_CHAOS_KEEP")))

    return ApacheTarget


def start_target(name: str, tmp: Path) -> Target:
    """A fresh 3-broker cluster of ``name`` (kaas: its data under ``tmp``; Apache: on
    /dev/shm), ready: every broker lists all three."""
    if name == "kaas":
        return KaasTarget(tmp).start(timeout=60.0)
    return _apache_class()(3)
