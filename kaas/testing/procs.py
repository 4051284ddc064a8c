"""Real broker processes for tests and scripts: a single broker, or a cluster through the supervisor."""

from __future__ import annotations

import os
import random
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from kaas.client import parse_properties, recv_exact

if TYPE_CHECKING:
    from kaas.client import WireClient
    from kaas.testing.forkserver import ServedProcess

T = TypeVar("T")

Launcher = Literal["exec", "fork"]
"""How a launcher starts its process: ``exec``, a new interpreter (``python -m kaas.cli``);
``fork``, forked from this process's fork server (``kaas.testing.forkserver``), a
cluster's brokers forked from its supervisor (``kaas cluster --fork-brokers``)."""

READY_BACKOFF_S = (0.002, 0.05)
"""The readiness probe's first and longest pause: a refused connection on the loopback
costs microseconds, so the probe starts tight and backs off (x1.5) to the longest."""


class Backoff:
    """Pauses from ``first`` growing x1.5 to ``longest`` (a fixed ``first`` when they are equal)."""

    def __init__(self, first: float = READY_BACKOFF_S[0], longest: float = READY_BACKOFF_S[1]) -> None:
        self.delay = first
        self.longest = longest

    def sleep(self, deadline: float | None = None) -> None:
        pause = self.delay if deadline is None else max(0.0, min(self.delay, deadline - time.monotonic()))
        time.sleep(pause)
        self.delay = min(self.delay * 1.5, self.longest)


def wait_for(cond: Callable[[], T], timeout: float = 20.0, what: str = "condition", interval: float = 0.05) -> T:
    """Poll ``cond`` until it returns something true (returned), at most ``timeout`` s.

    Raises:
        AssertionError: it never did, naming ``what``.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


PORTS_FROM = 20000
"""The lowest port ``free_ports`` hands out; the highest is below the kernel's ephemeral range."""


def free_port() -> int:
    return free_ports(1)


def free_ports(n: int) -> int:
    """A base port with ``n`` consecutive free ports, picked at random below the kernel's
    ephemeral range (``ip_local_port_range``): no client's outgoing connection takes one
    of them as its local port, neither between the pick and the broker's bind nor while a
    broker restarts on its port (a port the kernel handed out would then be refused with
    EADDRINUSE). Where that range leaves no room, a port the kernel picks instead."""
    top = _ephemeral_low()
    rnd = random.SystemRandom()
    if top - n > PORTS_FROM:
        for _ in range(500):
            base = rnd.randrange(PORTS_FROM, top - n)
            if all(_bindable(p) for p in range(base, base + n)):
                return base
    for _ in range(200):
        base = _kernel_port()
        if base + n <= 65000 and all(_bindable(p) for p in range(base, base + n)):
            return base
    raise RuntimeError("no free port range")


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where unknown)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def api_versions_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """Send ApiVersions v0 and check a well-formed answer comes back."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            body = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
            s.sendall(struct.pack(">i", len(body)) + body)
            hdr = recv_exact(s, 4)
            size = struct.unpack(">i", hdr)[0]
            data = recv_exact(s, size)
            correlation, error = struct.unpack(">i", data[:4])[0], struct.unpack(">h", data[4:6])[0]
            return bool(correlation == 7 and error == 0)
    except OSError:
        return False


def wait_ready(host: str, port: int, timeout: float = 20.0, proc: subprocess.Popen[bytes] | ServedProcess | None = None,
               probe: Callable[[str, int], bool] | None = None, interval: float | None = None) -> None:
    """Wait until the broker at ``host:port`` answers ``probe(host, port)`` (default: a
    plaintext ApiVersions, ``api_versions_ok``), at most ``timeout`` s: probes back off
    from 2 ms to 50 ms (``READY_BACKOFF_S``), or come every ``interval`` s.

    Raises:
        RuntimeError: ``proc`` exited first.
        TimeoutError: not ready in time.
    """
    probe = probe or api_versions_ok
    deadline = time.monotonic() + timeout
    pause = Backoff() if interval is None else Backoff(interval, interval)
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        if probe(host, port):
            return
        pause.sleep(deadline)
    raise TimeoutError(f"broker {host}:{port} not ready")


def read_properties(path: Path) -> dict[str, str]:
    """The client properties file at ``path`` (``kaas.client.parse_properties``), such as
    ``DATA/run/client.properties`` of ``kaas cluster --secure``."""
    return parse_properties(Path(path).read_text(), str(path))


def client_settings(path: Path) -> dict[str, str]:
    """The security settings of a client properties file: all of it but
    ``bootstrap.servers`` (a run names its bootstrap apart)."""
    props = read_properties(path)
    props.pop("bootstrap.servers", None)
    return props


class BrokerProcess:
    """One `kaas broker` process on a free port and a data directory."""

    def __init__(self, data: Path, broker_id: int = 0, port: int | None = None, extra: list[str] | None = None,
                 env: dict[str, str] | None = None, launcher: Launcher = "exec",
                 prefix: list[str] | None = None):
        """
        Args:
            prefix: a command the broker runs under, e.g. ``unshare --pid --fork
                --mount-proc --kill-child`` (PID 1 of its own PID namespace, as in a
                container); ``kill`` then signals that command. Only with the
                ``exec`` launcher.
        """
        self.data = Path(data)
        self.prefix = list(prefix or [])
        self.broker_id = broker_id
        self.port = port or free_port()
        self.extra = list(extra or [])
        self.env = dict(env or {})
        self.launcher = launcher
        self.proc: subprocess.Popen[bytes] | ServedProcess | None = None
        self.log_path = self.data / "run" / f"test-broker-{broker_id}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> BrokerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        args = ["broker", "--id", str(self.broker_id), "--data", str(self.data), "--listen", f"127.0.0.1:{self.port}",
                *self.extra]
        self.proc = launch(args, self.log_path, {**os.environ, **self.env}, self.launcher, self.prefix)
        wait_ready("127.0.0.1", self.port, proc=self.proc)
        return self

    @contextmanager
    def running(self) -> Iterator[BrokerProcess]:
        """Start the broker, yield it, SIGKILL it at the end (the broker fixtures' body)."""
        self.start()
        try:
            yield self
        finally:
            if self.proc is not None:
                self.kill()

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def launch(args: list[str], log_path: Path, env: dict[str, str],
           launcher: Launcher = "exec", prefix: list[str] | None = None) -> subprocess.Popen[bytes] | ServedProcess:
    """Run ``kaas ARGS`` (stdout and stderr appended to ``log_path``) as ``launcher`` says,
    under the command ``prefix`` (``exec`` only)."""
    if prefix and launcher != "exec":
        raise ValueError("a prefix command needs the exec launcher")
    if launcher == "fork":
        from kaas.testing.forkserver import shared

        return shared().spawn(args, log=log_path, env=env)
    with open(log_path, "ab") as logf:
        return subprocess.Popen([*(prefix or ()), sys.executable, "-m", "kaas.cli", *args], stdout=logf,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)


def send_signal_by_pidfile(data: Path, broker_id: int, sig: int) -> int:
    pid = int((Path(data) / "run" / f"kaas-{broker_id}.pid").read_text().strip())
    os.kill(pid, sig)
    return pid


class ClusterProcess:
    """`kaas cluster` (the supervisor) running N brokers on consecutive free ports.

    With ``secure``, ``kaas cluster --secure``: one SASL_SSL listener per broker, the
    authoriser on, the admin's client settings in ``client_properties`` (``client_config()``
    reads them); readiness is probed over TLS as the admin.
    """

    def __init__(self, data: Path, brokers: int = 3, extra: list[str] | None = None,
                 env: dict[str, str] | None = None, supervisor_args: list[str] | None = None,
                 secure: bool = False, launcher: Launcher = "exec", ready_interval: float | None = None,
                 fork_brokers: bool | None = None):
        """
        Args:
            launcher: ``fork``: the supervisor forked from the fork server, its brokers
                forked from it (``--fork-brokers``); ``exec``: new interpreters.
            fork_brokers: how the supervisor starts its brokers (``--fork-brokers`` or
                ``--exec-brokers``), when not as ``launcher`` says: ``launcher="exec",
                fork_brokers=True`` is ``kaas cluster`` as a user runs it.
            ready_interval: probe readiness every this many s (None: back off from 2 ms
                to 50 ms, ``READY_BACKOFF_S``).
        """
        self.data = Path(data)
        self.secure = secure
        self.launcher = launcher
        self.ready_interval = ready_interval
        self.supervisor_args = (list(supervisor_args or []) + (["--secure"] if secure else [])
                                + (["--fork-brokers"] if (launcher == "fork" if fork_brokers is None else fork_brokers)
                                   else ["--exec-brokers"]))
        self.env = dict(env or {})
        self.n = brokers
        self.base_port = free_ports(brokers)
        self.restart_delay = 0.5
        self.extra = list(extra or [])
        self.proc: subprocess.Popen[bytes] | ServedProcess | None = None
        self.log_path = self.data.parent / f"supervisor-{self.base_port}.log"

    @property
    def ports(self) -> list[int]:
        return [self.base_port + i for i in range(self.n)]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @property
    def client_properties(self) -> Path:
        """``DATA/run/client.properties``: the admin's settings of a secure cluster."""
        return self.data / "run" / "client.properties"

    def client_config(self) -> dict[str, str]:
        """A confluent-kafka config for the cluster: ``bootstrap.servers``, and for a secure
        one the admin's SASL_SSL settings from ``client_properties``."""
        if not self.secure:
            return {"bootstrap.servers": self.bootstrap}
        return {**read_properties(self.client_properties), "bootstrap.servers": self.bootstrap}

    def _wire_client(self, port: int, timeout: float = 2.0) -> WireClient:
        """A ``WireClient`` to the broker at ``port``: plaintext, or TLS (the cluster's CA)
        authenticated as the admin for a secure cluster."""
        from kaas.client import SaslConfig, WireClient

        if not self.secure:
            return WireClient("127.0.0.1", port, timeout=timeout)
        props = read_properties(self.client_properties)
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=props["ssl.ca.location"])
        sasl = SaslConfig(props["sasl.mechanism"], props["sasl.username"], props["sasl.password"])
        return WireClient("127.0.0.1", port, timeout=timeout, sasl=sasl, ssl_context=ctx)

    def probe(self, host: str, port: int) -> bool:
        """The readiness probe: ApiVersions, over an authenticated TLS connection when secure."""
        if not self.secure:
            return api_versions_ok(host, port)
        if "sasl.password" not in (self.client_properties.read_text() if self.client_properties.exists() else ""):
            return False
        try:
            with self._wire_client(port, timeout=1.0) as wc:
                wc.call(18, 3, {"client_software_name": "kaas-testing", "client_software_version": "0"})
            return True
        except (OSError, ssl.SSLError, KeyError):
            return False

    def start(self, timeout: float = 30.0) -> ClusterProcess:
        self.data.mkdir(parents=True, exist_ok=True)
        args = ["cluster", "--brokers", str(self.n), "--data", str(self.data), "--base-port", str(self.base_port),
                "--restart-delay", str(self.restart_delay), *self.supervisor_args]
        if self.extra:
            args += ["--", *self.extra]
        self.proc = launch(args, self.log_path, {**os.environ, **self.env}, self.launcher)
        for port in self.ports:
            wait_ready("127.0.0.1", port, timeout=timeout, proc=self.proc, probe=self.probe,
                       interval=self.ready_interval)
        self.wait_formed(timeout)
        return self

    @contextmanager
    def running(self, timeout: float = 30.0) -> Iterator[ClusterProcess]:
        """Start the cluster, yield it, stop it (SIGTERM to the supervisor) at the end."""
        self.start(timeout)
        try:
            yield self
        finally:
            self.stop()

    def wait_formed(self, timeout: float = 30.0) -> None:
        """Wait until every broker's Metadata lists all N brokers and names a controller."""
        deadline = time.monotonic() + timeout
        pending = set(self.ports)
        pause = Backoff() if self.ready_interval is None else Backoff(0.1, 0.1)
        while pending and time.monotonic() < deadline:
            for port in sorted(pending):
                try:
                    with self._wire_client(port) as wc:
                        md = wc.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False})
                    ids = {b.node_id for b in md.brokers}
                    if len(ids) >= self.n and md.controller_id in ids:
                        pending.discard(port)
                except OSError:
                    pass
            if pending:
                pause.sleep(deadline)

    @property
    def supervisor_pid(self) -> int | None:
        """The supervisor's pid (the parent of every broker process), None before ``start``."""
        return self.proc.pid if self.proc is not None else None

    def pid_file(self, broker_id: int) -> Path:
        """``DATA/run/kaas-<id>.pid``: the supervisor writes each new process's pid there."""
        return self.data / "run" / f"kaas-{broker_id}.pid"

    def pid(self, broker_id: int) -> int:
        """The pid in the broker's pid file: its process now, or between incarnations its
        last (dead) one; ``kaas.testing.incarnations.current`` tells them apart.

        Raises:
            FileNotFoundError, ValueError: no pid file (yet).
        """
        return int(self.pid_file(broker_id).read_text().strip())

    def last_pid(self, broker_id: int) -> int | None:
        """``pid``, or None without a pid file."""
        try:
            return self.pid(broker_id)
        except (FileNotFoundError, ValueError):
            return None

    def signal(self, broker_id: int, sig: int) -> int:
        pid = self.pid(broker_id)
        os.kill(pid, sig)
        return pid

    def kill(self, broker_id: int) -> int:
        return self.signal(broker_id, signal.SIGKILL)

    def wait_restarted(self, broker_id: int, old_pid: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        pause = Backoff()
        while time.monotonic() < deadline:
            try:
                if self.pid(broker_id) != old_pid:
                    break
            except (FileNotFoundError, ValueError):
                pass
            pause.sleep(deadline)
        wait_ready("127.0.0.1", self.ports[broker_id], timeout=max(1.0, deadline - time.monotonic()),
                   probe=self.probe)

    def broker_log(self, broker_id: int) -> str:
        try:
            return (self.data / "run" / f"kaas-{broker_id}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 20.0, graceful: bool = True) -> None:
        """SIGTERM the supervisor (each broker drains; up to ~1 s while peers hold connections
        open), SIGKILL everything after ``timeout``; not ``graceful``: SIGKILL the supervisor,
        then every broker, at once (for data about to be deleted)."""
        if self.proc is None:
            return
        from kaas.testing import incarnations

        brokers = [incarnations.current(self.pid_file(i), i, self.proc.pid) for i in range(self.n)]
        try:
            if graceful:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout)
                return
        except subprocess.TimeoutExpired:
            pass
        finally:
            if not graceful or self.proc.poll() is None:  # SIGKILL the supervisor, then every broker
                self.proc.kill()
                self.proc.wait()
                for inc in brokers:  # (read while the supervisor lived: its children then)
                    if inc is not None:
                        incarnations.send(inc, signal.SIGKILL)
            self.proc = None
