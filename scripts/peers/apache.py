#!/usr/bin/env python3
"""Apache Kafka 4.4.0 in KRaft combined mode, started as a reference broker.

The jars come from Maven Central through ``compat/java/pom.xml`` (``mvn
dependency:build-classpath``; the classpath is cached in ``compat/java/target/``, which git
ignores). Each node is one JVM that is both controller and broker, with a capped heap and
few threads, so that a 3-node cluster fits beside kaas and its clients on two cores.

    .venv/bin/python scripts/peers/apache.py --brokers 3 [--port P] [--data DIR] [--secure]

The first line on stdout is the bootstrap string; start-up time and each JVM's RSS go to
stderr. It runs until SIGTERM or SIGINT, then stops the JVMs (and removes the data
directory unless ``--data`` named one). ``--port P`` puts the brokers' listeners on P, P+1,
...; the controllers' listeners are on other free ports. A JVM that dies stops the rest.

``--secure`` puts the clients' listener on SASL_PLAINTEXT (SCRAM-SHA-256 and SCRAM-SHA-512,
as ``kaas cluster --secure`` offers) and turns StandardAuthorizer on: the SCRAM user
``admin`` (password ``--admin-password``, stored at format time with ``--add-scram``) is a
super user, everyone else gets what ACLs grant. The brokers and controllers talk over
PLAINTEXT listeners of their own (``INTERNAL``, ``CONTROLLER``), as ``User:ANONYMOUS``,
which is therefore a super user too: a local test peer, not a deployment.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
POM = REPO / "compat" / "java" / "pom.xml"
CLASSPATH_FILE = REPO / "compat" / "java" / "target" / "classpath.txt"
JVM_OPTS = (
    "-Xms64m", "-Xmx320m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
    "-XX:CICompilerCount=1", "-XX:MaxMetaspaceSize=160m", "-XX:ReservedCodeCacheSize=64m",
    "-Djava.awt.headless=true",
)
"""Per node: a small heap and the serial collector (no parallel GC threads), C1 only (a
quicker start, one compiler thread)."""
LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""


def classpath() -> str:
    """The broker's and tools' classpath, resolved by Maven once per change of the pom."""
    if not CLASSPATH_FILE.exists() or CLASSPATH_FILE.stat().st_mtime < POM.stat().st_mtime:
        if shutil.which("mvn") is None:
            sys.exit("apache.py: Maven (mvn) is needed to resolve Apache Kafka's jars")
        CLASSPATH_FILE.parent.mkdir(parents=True, exist_ok=True)
        tmp = CLASSPATH_FILE.with_suffix(".tmp")
        print("apache: resolving Apache Kafka's jars with Maven (once)", file=sys.stderr, flush=True)
        done = subprocess.run(["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(POM), "dependency:build-classpath",
                               f"-Dmdep.outputFile={tmp}"], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"apache.py: mvn failed:\n{done.stdout}{done.stderr}")
        os.replace(tmp, CLASSPATH_FILE)
    return CLASSPATH_FILE.read_text().strip()


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    exe = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not exe or not os.path.exists(exe):
        sys.exit("apache.py: Java 17 or newer (java) is needed")
    return exe


def free_port(taken: set[int]) -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port


def cluster_id() -> str:
    """A random cluster id as Kafka writes them (URL-safe base64 of 16 bytes), never
    starting with '-', which the storage tool would read as an option."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


SECURE_ADMIN = "admin"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def node_properties(node: int, brokers: int, broker_port: int, voters: str, logs: Path,
                    internal_port: int = 0) -> str:
    """server.properties of one combined-mode node. Internal topics replicate to every node
    (up to 3) with a min ISR of 1, have few partitions (a quicker first group or
    transaction), and the first rebalance of a group happens at once, as kaas's test
    clusters do. With ``internal_port``, the secure layout of the module's docstring."""
    rf = min(3, brokers)
    props: dict[str, object] = {
        "process.roles": "broker,controller",
        "node.id": node,
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{_ctl_port(voters, node)}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": logs,
        "num.partitions": 1,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 10,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": 1,
        "share.coordinator.state.topic.num.partitions": 10,
        "group.initial.rebalance.delay.ms": 0,
        "num.network.threads": 2,
        "num.io.threads": 2,
        "num.replica.fetchers": 1,
        "background.threads": 2,
        "num.recovery.threads.per.data.dir": 1,
        "log.cleaner.threads": 1,
        "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
        "socket.request.max.bytes": 104857600,
    }
    if internal_port:
        props.update(secure_properties(broker_port, internal_port, _ctl_port(voters, node)))
    return "".join(f"{k}={v}\n" for k, v in props.items())


def secure_properties(broker_port: int, internal_port: int, ctl_port: int) -> dict[str, object]:
    """What ``--secure`` changes: clients on SASL_PLAINTEXT with SCRAM, the brokers among
    themselves on a PLAINTEXT ``INTERNAL`` listener, StandardAuthorizer with the admin and
    the internal listeners' ``User:ANONYMOUS`` as super users."""
    props: dict[str, object] = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{broker_port},INTERNAL://127.0.0.1:{internal_port},"
                     f"CONTROLLER://127.0.0.1:{ctl_port}",
        "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{broker_port},INTERNAL://127.0.0.1:{internal_port}",
        "inter.broker.listener.name": "INTERNAL",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{SECURE_ADMIN};User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    }
    for mech in SCRAM_MECHANISMS:
        props[f"listener.name.sasl_plaintext.{mech.lower()}.sasl.jaas.config"] = _SCRAM_LOGIN
    return props


def _ctl_port(voters: str, node: int) -> int:
    for voter in voters.split(","):
        nid, _, addr = voter.partition("@")
        if int(nid) == node:
            return int(addr.rsplit(":", 1)[1])
    raise ValueError(f"node {node} is not a voter")


def ready(port: int, brokers: int, admin_password: str | None = None) -> bool:
    """Whether the broker on ``port`` answers Metadata with every broker registered (as
    the admin, over SCRAM, when secure)."""
    from kaas.client import SaslConfig, SaslFailed, WireClient

    sasl = SaslConfig("SCRAM-SHA-512", SECURE_ADMIN, admin_password) if admin_password is not None else None
    try:
        with WireClient("127.0.0.1", port, timeout=2.0, sasl=sasl) as wc:
            md = wc.call(3, 12, {"topics": [], "allow_auto_topic_creation": False})
            return len(md.brokers) == brokers
    except (OSError, EOFError, ConnectionError, SaslFailed):
        return False


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Stopped(Exception):
    """SIGTERM or SIGINT came before the cluster was ready."""


class ApacheCluster:
    """Nodes 1..N: formatted, started, and stopped on ``close``."""

    def __init__(self, brokers: int, port: int, data: Path, log_level: str = "WARN",
                 admin_password: str | None = None) -> None:
        """``admin_password``: the secure layout (``--secure``) with that admin password."""
        self.brokers = brokers
        self.data = data
        taken: set[int] = set()
        if port:
            self.ports = [port + i for i in range(brokers)]
            taken.update(self.ports)
        else:
            self.ports = [free_port(taken) for _ in range(brokers)]
        ctl = [free_port(taken) for _ in range(brokers)]
        self.admin_password = admin_password
        self.internal = [free_port(taken) for _ in range(brokers)] if admin_password is not None else [0] * brokers
        self.voters = ",".join(f"{i + 1}@127.0.0.1:{ctl[i]}" for i in range(brokers))
        self.cluster_id = cluster_id()
        self.log_level = log_level
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def _node_dir(self, node: int) -> Path:
        return self.data / f"node-{node}"

    def configure(self) -> None:
        for i, port in enumerate(self.ports):
            node = i + 1
            d = self._node_dir(node)
            (d / "logs").mkdir(parents=True, exist_ok=True)
            (d / "server.properties").write_text(
                node_properties(node, self.brokers, port, self.voters, d / "logs", self.internal[i]))
            (d / "log4j2.properties").write_text(LOG4J2.format(log=d / "server.log", level=self.log_level))

    def _java(self, node: int, cp: str, main: str, *args: str) -> list[str]:
        d = self._node_dir(node)
        return [java(), *JVM_OPTS, f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={d}", "-cp", cp, main, *args]

    def format(self, cp: str) -> None:
        """kafka-storage format of every node's log directory (in parallel: one JVM each)."""
        scram: list[str] = []
        if self.admin_password is not None:
            for mech in SCRAM_MECHANISMS:
                scram += ["--add-scram", f"{mech}=[name={SECURE_ADMIN},password={self.admin_password}]"]
        fmts = [subprocess.Popen(self._java(i + 1, cp, "kafka.tools.StorageTool", "format", "--ignore-formatted",
                                            "-t", self.cluster_id, *scram,
                                            "-c", str(self._node_dir(i + 1) / "server.properties")),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                for i in range(self.brokers)]
        for i, p in enumerate(fmts):
            out, _ = p.communicate(timeout=120)
            if p.returncode != 0:
                sys.exit(f"apache.py: formatting node {i + 1} failed:\n{out.decode(errors='replace')}")

    def start(self, cp: str, stop: threading.Event, timeout: float = 180.0) -> None:
        for i in range(self.brokers):
            node = i + 1
            out = open(self._node_dir(node) / "stdout.log", "wb")  # noqa: SIM115 - the JVM's, for its life
            self.procs.append(subprocess.Popen(
                self._java(node, cp, "kafka.Kafka", str(self._node_dir(node) / "server.properties")),
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + timeout
        pending = list(self.ports)
        while pending:
            self.check_alive()
            if stop.is_set():
                raise Stopped
            if time.monotonic() > deadline:
                raise TimeoutError(f"Apache Kafka not ready after {timeout:.0f} s (logs in {self.data})")
            pending = [p for p in pending if not ready(p, self.brokers, self.admin_password)]
            if pending:
                time.sleep(0.3)

    def check_alive(self) -> None:
        for i, p in enumerate(self.procs):
            if p.poll() is not None:
                raise RuntimeError(f"node {i + 1} exited with {p.returncode} "
                                   f"(see {self._node_dir(i + 1) / 'server.log'})")

    def close(self, timeout: float = 10.0) -> None:
        """SIGTERM to every node, SIGKILL to those still up after ``timeout`` seconds (the
        last nodes of a quorum wait for their peers in a controlled shutdown)."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", type=int, default=3, choices=(1, 3))
    ap.add_argument("--port", type=int, default=0, help="first broker port (default: free ports)")
    ap.add_argument("--data", type=Path, default=None, help="data directory (default: a temporary one, removed)")
    ap.add_argument("--log-level", default="WARN", help="the brokers' log level (server.log per node)")
    ap.add_argument("--secure", action="store_true",
                    help="SASL_PLAINTEXT (SCRAM) for clients and StandardAuthorizer, the user admin a super user")
    ap.add_argument("--admin-password", default="admin-secret", help="with --secure: the admin's password")
    args = ap.parse_args()
    data = args.data or Path(tempfile.mkdtemp(prefix="apache-kafka-"))
    data.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    t0 = time.monotonic()
    cluster = ApacheCluster(args.brokers, args.port, data.resolve(), args.log_level,
                            args.admin_password if args.secure else None)
    code = 0
    try:
        cp = classpath()
        cluster.configure()
        cluster.format(cp)
        t_fmt = time.monotonic() - t0
        cluster.start(cp, stop)
        print(cluster.bootstrap, flush=True)
        rss = ", ".join(f"node {i + 1} {rss_mib(p.pid):.0f} MiB" for i, p in enumerate(cluster.procs))
        print(f"apache: {args.brokers} node(s) ready in {time.monotonic() - t0:.1f} s "
              f"(format {t_fmt:.1f} s); RSS {rss}; data {data}", file=sys.stderr, flush=True)
        while not stop.wait(1.0):
            cluster.check_alive()
    except (RuntimeError, TimeoutError) as exc:
        print(f"apache: {exc}", file=sys.stderr, flush=True)
        code = 1
    except Stopped:
        pass
    finally:
        cluster.close()
        if args.data is None:
            shutil.rmtree(data, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
