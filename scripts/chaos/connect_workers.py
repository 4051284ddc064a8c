"""The Kafka Connect side of the ``connect`` scenario: the classpath (``connect-runtime``
4.4.0 and the scenario's two connectors, ``compat/connect``), the distributed workers'
settings, the workers (one JVM each, ``ConnectDistributed``), and their REST API.

``compat/connect`` is compiled by Maven (``mvn compile``) and its classpath asked of it once,
both into ``compat/connect/target`` (git ignores it), again whenever the pom or a source is
newer. The connectors are found by their ``META-INF/services`` manifests
(``plugin.discovery=service_load``: no scan of the classpath at start-up).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import click

from .jvm import LOG4J2, REPO, JavaProc, java_cmd, json_event, require_java, write_properties

POM = REPO / "compat" / "connect" / "pom.xml"
GROUP = "connect-eos"
TOPICS = {"config": "connect-configs", "offset": "connect-offsets", "status": "connect-status"}
PARTITIONS = {"config": 1, "offset": 5, "status": 3}
SEGMENT_MS = 10_000  # the internal topics roll a segment this often, so the cleaner compacts them during the run
HEAP = "256m"
INFO_LOGGERS = {  # beside the warnings, what explains a stall: rebalances, fencing, transactions, commits
    "herder": "org.apache.kafka.connect.runtime.distributed.DistributedHerder",
    "configs": "org.apache.kafka.connect.storage.KafkaConfigBackingStore",
    "eos": "org.apache.kafka.connect.runtime.ExactlyOnceWorkerSourceTask",
    "sink": "org.apache.kafka.connect.runtime.WorkerSinkTask",
    "txn": "org.apache.kafka.clients.producer.internals.TransactionManager",
}


def connect_classpath() -> str:
    """``compat/connect/target/classes`` and connect-runtime 4.4.0 with its dependencies."""
    require_java()
    base = POM.parent
    out = base / "target" / "classpath.txt"
    newest = max(p.stat().st_mtime for p in [POM, *(base / "src").rglob("*")] if p.is_file())
    if not out.exists() or out.stat().st_mtime < newest:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}")
        done = subprocess.run(["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(POM), "compile",
                               "dependency:build-classpath", f"-Dmdep.outputFile={tmp}"],
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise click.ClickException(f"mvn could not build compat/connect:\n{done.stdout}{done.stderr}")
        os.replace(tmp, out)
    return f"{base / 'target' / 'classes'}{os.pathsep}{out.read_text().strip()}"


def worker_properties(bootstrap: str, port: int) -> dict[str, object]:
    """A distributed worker with exactly-once source support, its internal topics created
    by itself (compacted, replicated 3 times, rolled every ``SEGMENT_MS``), its sink
    consumers reading ``read_committed`` with a 10 s session."""
    props: dict[str, object] = {
        "bootstrap.servers": bootstrap, "group.id": GROUP,
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "exactly.once.source.support": "enabled",
        "listeners": f"http://127.0.0.1:{port}", "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": port, "plugin.discovery": "service_load",
        "offset.flush.interval.ms": 1000, "scheduled.rebalance.max.delay.ms": 15_000,
        "consumer.isolation.level": "read_committed", "consumer.session.timeout.ms": 10_000,
        "consumer.heartbeat.interval.ms": 3000,
    }
    for kind, topic in TOPICS.items():
        prefix = f"{kind}.storage"
        props |= {f"{prefix}.topic": topic, f"{prefix}.replication.factor": 3, f"{prefix}.segment.ms": SEGMENT_MS,
                  f"{prefix}.min.cleanable.dirty.ratio": 0.1}
        if kind != "config":
            props[f"{prefix}.partitions"] = PARTITIONS[kind]
    return props


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RestError(Exception):
    pass


class Workers:
    """The workers, each on its own REST port, and every JSON event their connectors print
    (with the worker, its incarnation and the time)."""

    def __init__(self, bootstrap: str, workdir: Path, cp: str, n: int = 2) -> None:
        self.bootstrap, self.dir, self.cp = bootstrap, workdir, cp
        self.ports = [free_port() for _ in range(n)]
        self.procs: dict[int, JavaProc] = {}
        self.incarnations: dict[int, int] = {}
        self.events: list[dict] = []
        self.lock = threading.Lock()
        (workdir / "log4j2.properties").write_text(LOG4J2 + "".join(
            f"logger.{k}.name = {v}\nlogger.{k}.level = INFO\n" for k, v in INFO_LOGGERS.items()))

    def start(self, i: int) -> None:
        inc = self.incarnations.get(i, -1) + 1
        self.incarnations[i] = inc
        props = write_properties(self.dir / f"worker-{i}.properties", worker_properties(self.bootstrap, self.ports[i]))
        cmd = java_cmd(self.dir, self.cp, "org.apache.kafka.connect.cli.ConnectDistributed", str(props), heap=HEAP)

        def on_line(line: str, at: float) -> None:
            ev = json_event(line)
            if ev is not None:
                with self.lock:
                    self.events.append({**ev, "worker": i, "incarnation": inc, "at": at})

        self.procs[i] = JavaProc(f"worker-{i}.{inc}", cmd, self.dir, on_line).start()

    def events_of(self, kind: str) -> list[dict]:
        with self.lock:
            return [e for e in self.events if e.get("event") == kind]

    def rest(self, i: int, method: str, path: str, body: dict | None = None, timeout: float = 15.0):
        """The JSON answer of worker ``i``; ``RestError`` for an error status or no answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.ports[i]}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise RestError(f"{method} {path}: {exc.code} {exc.read()[:300]!r}") from None
        except (OSError, ValueError) as exc:
            raise RestError(f"{method} {path}: {exc}") from None
        return json.loads(raw) if raw else None

    def wait_up(self, timeout: float) -> None:
        """Until every worker answers its REST API and has joined the group (GET /connectors
        is answered by the herder)."""
        deadline = time.monotonic() + timeout
        for i in self.procs:
            while True:
                try:
                    self.rest(i, "GET", "/connectors")
                    break
                except RestError as exc:
                    if not self.procs[i].alive() or time.monotonic() > deadline:
                        raise RuntimeError(f"worker {i} did not come up: {exc}; "
                                           f"{self.procs[i].stderr_tail(5)}") from None
                    time.sleep(1.0)

    def put_connector(self, name: str, config: dict[str, str], timeout: float = 120.0) -> None:
        """PUT its configuration, through whichever worker answers, until one accepts it (a
        rebalance answers 409 for a while)."""
        deadline = time.monotonic() + timeout
        last = "no worker alive"
        while True:
            for i, p in self.procs.items():
                if not p.alive():
                    continue
                try:
                    self.rest(i, "PUT", f"/connectors/{name}/config", config, timeout=30.0)
                    return
                except RestError as exc:
                    last = str(exc)
            if time.monotonic() > deadline:
                raise RuntimeError(f"connector {name} not accepted in {timeout:.0f} s: {last}")
            time.sleep(2.0)

    def status(self) -> dict | None:
        for i, p in self.procs.items():
            if p.alive():
                try:
                    return self.rest(i, "GET", "/connectors?expand=status", timeout=10.0)
                except RestError:
                    continue
        return None

    def stop_all(self) -> None:
        for p in self.procs.values():
            p.stop(30.0)
