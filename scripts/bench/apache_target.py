"""Apache Kafka 4.4 (KRaft, combined mode) as a bench target beside kaas, the mock and Tansu.

The nodes are those of ``scripts/peers/apache.py`` (jars resolved by Maven from
``compat/java/pom.xml``), but configured as a user would run them: the values of the
``config/server.properties`` Apache ships (so ``group.initial.rebalance.delay.ms=0``,
3 network and 8 I/O threads, internal topics of 50 partitions, no ``log.flush.*``: the
page cache, no fsync per append) and the JVM flags of ``kafka-run-class.sh`` (G1, C2),
except for what the layout needs: internal topics replicated to min(3, N) nodes with a
min ISR of min(2, N), the bench's topics created with that replication factor too
(``REPLICATION_ENV``), and the heap capped at ``HEAP`` (stock: 1 GiB) since the
machine's two cores and memory are shared.

Like ``kaas cluster``'s supervisor, a watchdog restarts a JVM that dies (after 0.5 s) and
keeps each node's pid in ``DATA/run/kaas-<node id>.pid``: the failover benchmark kills a
leader through that file and the CPU and RSS meters follow it, unchanged.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import click

from .common import PEERS, REPLICATION_ENV
from .metering import BrokerPids

HEAP = "512m"
JVM_OPTS = (f"-Xms{HEAP}", f"-Xmx{HEAP}", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15",
            "-Djava.awt.headless=true")
"""kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS with the heap of kafka-server-start.sh
capped from 1 GiB to HEAP."""
RESTART_DELAY_S = 0.5  # as kaas's supervisor


def apache_available() -> bool:
    """Java and Maven on PATH (or the jars' classpath already resolved)."""
    return shutil.which("java") is not None and (shutil.which("mvn") is not None
                                                 or (PEERS.parent.parent / "compat/java/target/classpath.txt").exists())


def _peer():
    spec = importlib.util.spec_from_file_location("apache_peer", PEERS / "apache.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def stock_properties(node: int, brokers: int, broker_port: int, ctl_port: int, voters: str, logs: Path) -> str:
    """server.properties of one node: Apache's shipped config/server.properties, the
    listeners of this node, and the replication of internal topics for N nodes."""
    rf, isr = min(3, brokers), min(2, brokers)
    props = {
        "process.roles": "broker,controller", "node.id": node, "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{ctl_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "inter.broker.listener.name": "PLAINTEXT", "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": logs,
        # the shipped file's values (the broker's own defaults otherwise)
        "num.network.threads": 3, "num.io.threads": 8, "socket.send.buffer.bytes": 102400,
        "socket.receive.buffer.bytes": 102400, "socket.request.max.bytes": 104857600, "num.partitions": 1,
        "num.recovery.threads.per.data.dir": 1, "log.retention.hours": 168, "log.segment.bytes": 1073741824,
        "log.retention.check.interval.ms": 300000, "group.initial.rebalance.delay.ms": 0,
        # the layout: internal topics on min(3, N) nodes
        "offsets.topic.replication.factor": rf, "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr, "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": isr,
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


class _Apache:
    """A fresh Apache Kafka cluster of ``n`` combined nodes on tmpfs. ``startup``: seconds
    of ``kafka-storage format`` (``format_s``), from launching the JVMs to the first
    ApiVersions answer of node 1 (``first_s``), to every node's Metadata listing all
    (``formed_s``), and the nodes' RSS then (``rss_idle_mib``)."""

    name = "apache"

    def __init__(self, n: int):
        from kaas.testing import api_versions_ok

        from .targets import tmp_base

        peer = _peer()
        self.peer, self.n = peer, n
        self.dir = Path(tempfile.mkdtemp(prefix="apache-bench-", dir=tmp_base()))
        self.run_dir = self.dir / "run"
        self.run_dir.mkdir()
        self.cluster = peer.ApacheCluster(n, 0, self.dir)
        self.env = {REPLICATION_ENV: str(min(3, n))}
        self.bootstrap = self.cluster.bootstrap
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.restarts = 0
        cp = self.cp = peer.classpath()
        self._configure()
        t0 = time.perf_counter()
        self.cluster.format(cp)
        t_fmt = time.perf_counter()
        first: list[float] = []

        def probe() -> None:
            while not first and not self._closing.is_set():
                if api_versions_ok("127.0.0.1", self.cluster.ports[0], timeout=0.5):
                    first.append(time.perf_counter())
                    return
                time.sleep(0.005)

        t = threading.Thread(target=probe, daemon=True)
        t.start()
        try:
            for node in range(1, n + 1):
                self._launch(node)
            self.wait_healthy(180.0)
        except BaseException:
            self.close()
            raise
        formed = time.perf_counter()
        t.join(5)
        self.startup = {"format_s": round(t_fmt - t0, 3), "first_s": round(first[0] - t_fmt, 3) if first else None,
                        "formed_s": round(formed - t_fmt, 3), "rss_idle_mib": round(self.pids().rss() / 2**20, 1)}
        self._watchdog = threading.Thread(target=self._watch, daemon=True)
        self._watchdog.start()

    def _configure(self) -> None:
        c = self.cluster
        ctl_ports = [self.peer._ctl_port(c.voters, i + 1) for i in range(self.n)]
        for i, port in enumerate(c.ports):
            d = c._node_dir(i + 1)
            (d / "logs").mkdir(parents=True, exist_ok=True)
            (d / "server.properties").write_text(
                stock_properties(i + 1, self.n, port, ctl_ports[i], c.voters, d / "logs"))
            (d / "log4j2.properties").write_text(self.peer.LOG4J2.format(log=d / "server.log", level="WARN"))

    def _java(self, node: int, main: str, *args: str) -> list[str]:
        d = self.cluster._node_dir(node)
        return [self.peer.java(), *JVM_OPTS, f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={d}", "-cp", self.cp, main, *args]

    def _launch(self, node: int) -> None:
        d = self.cluster._node_dir(node)
        with open(d / "stdout.log", "ab") as out:
            proc = subprocess.Popen(self._java(node, "kafka.Kafka", str(d / "server.properties")),
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        with self._lock:
            procs = self.cluster.procs
            if len(procs) < node:
                procs.append(proc)
            else:
                procs[node - 1] = proc
        tmp = self.run_dir / f".kaas-{node}.pid.tmp"
        tmp.write_text(f"{proc.pid}\n")
        tmp.replace(self.run_dir / f"kaas-{node}.pid")

    def _watch(self) -> None:
        """Restart a JVM that died (a failover run's SIGKILL), as a supervisor would."""
        while not self._closing.wait(0.05):
            for i, p in enumerate(list(self.cluster.procs)):
                if p.poll() is not None and not self._closing.is_set():
                    time.sleep(RESTART_DELAY_S)
                    if not self._closing.is_set():
                        self.restarts += 1
                        self._launch(i + 1)

    def pid_args(self) -> list[str]:
        return ["--kaas-data", str(self.dir)]

    def pids(self) -> BrokerPids:
        return BrokerPids((), self.dir)

    def wait_healthy(self, timeout: float = 120.0) -> None:
        """Every JVM alive and every node's Metadata lists all nodes."""
        deadline = time.monotonic() + timeout
        pending = list(self.cluster.ports)
        while pending:
            if time.monotonic() > deadline:
                raise click.ClickException(f"Apache Kafka not healthy after {timeout:.0f} s (logs in {self.dir})")
            pending = [p for p in pending if not self.peer.ready(p, self.n)]
            if pending:
                time.sleep(0.2)

    def close(self, keep: bool = False) -> None:
        self._closing.set()
        watchdog = getattr(self, "_watchdog", None)
        if watchdog is not None:
            watchdog.join(10)  # it launches nothing once closing: no JVM outlives this
        with self._lock:
            self.cluster.close()
        if keep:
            click.echo(f"Apache Kafka data and logs kept in {self.dir}", err=True)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
