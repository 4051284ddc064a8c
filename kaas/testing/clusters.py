"""``kaas.testing.cluster()``: a real kaas cluster for a test, as a context manager
(``docs/testing.rst``).

::

    from kaas.testing import cluster

    with cluster(brokers=3) as c:
        c.create_topic("orders", partitions=6)
        producer = Producer(c.client_config())
        c.leader_of("orders", 0).pause()
        ...

The cluster is ``kaas cluster`` (the supervisor) over a data directory of its own, on
/dev/shm where there is one, on free ports; by default the supervisor and its brokers are
forked from this process's fork server (``kaas.testing.forkserver``, started when this
module is imported), so a cluster serves in a fraction of a second once the server has
imported the broker's code. At the end a paused broker is resumed and the cluster stopped:
SIGKILLed when its data directory is removed next, SIGTERMed (each broker drains) when
``keep_data`` keeps it. When the block raised, the brokers' and the supervisor's logs are
copied to ``logs_dir`` first and the exception carries a note naming it. ``async with``
works too (trio or asyncio): start and stop then run in a worker thread.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from kaas.testing import admin, incarnations
from kaas.testing.faults import DiskFull, Failpoint, FailpointTable, Tmpfs, Unsupported
from kaas.testing.incarnations import Incarnation
from kaas.testing.procs import Backoff, ClusterProcess, Launcher, wait_ready

__all__ = ["Broker", "BrokerDown", "Cluster", "ClusterContext", "Unsupported", "cluster"]

TEST_BROKER_ARGS = ("--group-initial-rebalance-delay-ms", "0")
"""What a test cluster's brokers get unless ``broker_args`` says otherwise: a new group's
first rebalance at once rather than after 3 s (Apache's testcontainers users set the same)."""
TEST_ENV = {"KAAS_TXN_SWEEP_MS": "500"}
"""A test cluster's environment: the transaction reaper's tick at 0.5 s instead of 10 s, so
a transaction whose coordinator died completes within a test's patience."""


def shm_root() -> Path:
    """Where test data goes: /dev/shm (a tmpfs: fsync is free) when there is one, else the
    temporary directory."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm
    return Path(tempfile.gettempdir())


class BrokerDown(RuntimeError):
    """The broker has no process now: the last one died (killed, crashed or stopped) and the
    supervisor has not started the next one yet (it does after the cluster's
    ``restart_delay``)."""


class Broker:
    """One broker of a ``Cluster``: its id, port, process, and the faults a test puts on it.

    ``kill`` and ``restart`` go through the supervisor, as on a real deployment: it writes
    the death notice (peers move the broker's partitions and coordinators at once) and
    starts the broker again after the cluster's ``restart_delay``. ``pause`` (SIGSTOP)
    keeps it down for as long as the test wants: peers move its work once its lease
    lapses (the brokers' ``--session-timeout-ms``, 3 s by default).

    Every fault acts on the broker's incarnation (``kaas.testing.incarnations``): the
    supervisor's child process that is the broker now, identified by pid and start time,
    never a pid file's stale pid. The methods may be called in any order, at any speed and
    from several threads (a ``Chaos`` schedule beside the test); each returns or raises one
    of the errors its docstring names, and the supervisor brings the broker back in the
    end. Between incarnations (after a kill or a crash, for ``restart_delay``):

    - ``kill`` does nothing more (the broker is already down);
    - ``restart`` signals nothing and waits for the next incarnation (``wait``);
    - ``pause`` waits for the next incarnation and stops it as soon as it exists.
    """

    def __init__(self, cluster: Cluster, broker_id: int, port: int) -> None:
        self.cluster = cluster
        self.id = broker_id
        self.port = port
        self._lock = threading.RLock()
        self._paused: Incarnation | None = None  # what this fixture SIGSTOPped
        self._ended: Incarnation | None = None  # what it last SIGKILLed or SIGTERMed (it may still be exiting)

    def __repr__(self) -> str:
        return f"<kaas broker {self.id} at {self.bootstrap}>"

    def __index__(self) -> int:
        return self.id

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def incarnation(self) -> Incarnation | None:
        """The broker's process now (running or paused), or None between incarnations."""
        return incarnations.current(self.cluster.process.pid_file(self.id), self.id,
                                    self.cluster.process.supervisor_pid)

    @property
    def pid(self) -> int:
        """The pid of the broker's process now (running or paused).

        Raises:
            BrokerDown: it has none (between incarnations).
        """
        inc = self.incarnation()
        if inc is None:
            raise BrokerDown(f"broker {self.id} has no process now (restarting)")
        return inc.pid

    @property
    def paused_pid(self) -> int | None:
        """The process this fixture holds stopped (``pause``), while it lives."""
        inc = self._paused
        return inc.pid if inc is not None and incarnations.alive(inc) else None

    @property
    def paused(self) -> bool:
        return self.paused_pid is not None

    def alive(self) -> bool:
        """The broker has a process now (paused or not)."""
        return self.incarnation() is not None

    def kill(self, wait: bool = False, timeout: float = 30.0) -> int | None:
        """SIGKILL the broker's process (a paused one too); the supervisor restarts the
        broker after the cluster's ``restart_delay``. A broker without a process (killed
        before, not yet restarted) is left as it is. With ``wait``, return once the next
        process serves.

        Returns:
            The pid of the process killed, or when there was none, of the broker's last
            process (None if none was ever seen).

        Raises:
            TimeoutError: ``wait`` and no new process served within ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            self._paused = None  # SIGKILL ends a stopped process too
            inc = self.incarnation()
            if inc is None:
                inc = self._ended
            elif incarnations.send(inc, signal.SIGKILL):
                self._ended = inc
            down = {inc} if inc is not None else set()
        if wait:
            self._wait_serving(down, deadline)
        return inc.pid if inc is not None else self.cluster.process.last_pid(self.id)

    def pause(self, timeout: float = 30.0) -> int:
        """SIGSTOP the broker's process: it holds its connections and answers nothing until
        ``resume``. Paused already: nothing more. Between incarnations, or while its
        process is exiting after ``kill``/``restart``: the next process, once the
        supervisor started it.

        Returns:
            The paused pid.

        Raises:
            TimeoutError: no process to pause appeared within ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                held = self._paused
                if held is not None and incarnations.alive(held):
                    return held.pid
                self._paused = None
                ended = {self._ended} if self._ended is not None else set()
            inc = incarnations.wait_next(self.cluster.process.pid_file(self.id), self.id,
                                         self.cluster.process.supervisor_pid, ended, deadline)
            with self._lock:
                if self._paused is None and inc != self._ended and incarnations.send(inc, signal.SIGSTOP):
                    self._paused = inc
                    return inc.pid

    def resume(self) -> None:
        """SIGCONT the process ``pause`` stopped, if it still lives (nothing otherwise)."""
        with self._lock:
            inc, self._paused = self._paused, None
            if inc is not None:
                incarnations.send(inc, signal.SIGCONT)

    def restart(self, wait: bool = True, timeout: float = 30.0) -> None:
        """SIGTERM the broker's process (resumed first if paused): a graceful drain, then
        the supervisor starts it again after ``restart_delay``. A broker without a process,
        or whose process is already exiting after ``kill``/``restart``, is not signalled
        again. With ``wait``, return once the next process serves.

        Raises:
            TimeoutError: ``wait`` and no new process served within ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            self.resume()
            inc = self.incarnation()
            if inc is not None and inc != self._ended and incarnations.send(inc, signal.SIGTERM):
                self._ended = inc
            down = {i for i in (inc, self._ended) if i is not None}
        if wait:
            self._wait_serving(down, deadline)

    def _wait_serving(self, down: set[Incarnation], deadline: float) -> None:
        """Wait for a process not in ``down`` that answers ApiVersions.

        Raises:
            TimeoutError: none by ``deadline``.
        """
        incarnations.wait_next(self.cluster.process.pid_file(self.id), self.id, self.cluster.process.supervisor_pid,
                               down, deadline)
        self.wait_ready(max(0.1, deadline - time.monotonic()))

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the broker answers ApiVersions.

        Raises:
            TimeoutError: it did not within ``timeout`` s.
        """
        wait_ready("127.0.0.1", self.port, timeout=timeout, probe=self.cluster.process.probe)

    def log_text(self) -> str:
        """The broker's log (all its incarnations)."""
        return self.cluster.process.broker_log(self.id)


class Cluster:
    """A running test cluster (``cluster()`` yields one). See the module docstring."""

    def __init__(self, process: ClusterProcess, root: Path, tmpfs: Tmpfs | None = None) -> None:
        self.process = process
        self.root = root
        self.tmpfs = tmpfs
        self.brokers = [Broker(self, i, port) for i, port in enumerate(process.ports)]
        self.failpoints = FailpointTable(process.data / "run", self.brokers)
        self._disk: DiskFull | None = None

    def __repr__(self) -> str:
        return f"<kaas cluster of {len(self.brokers)} at {self.bootstrap} (data {self.data})>"

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:P0,127.0.0.1:P1,...``"""
        return self.process.bootstrap

    @property
    def data(self) -> Path:
        return self.process.data

    @property
    def secure(self) -> bool:
        return self.process.secure

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        """A confluent-kafka (librdkafka) config for the cluster: ``bootstrap.servers``, for
        a secure cluster the admin's SASL_SSL settings, then ``overrides`` (keys with ``_``
        for ``.``: ``client_config(group_id="g")`` sets ``group.id``)."""
        conf: dict[str, Any] = dict(self.process.client_config())
        conf.update({k.replace("_", "."): v for k, v in overrides.items()})
        return conf

    def unique(self, prefix: str = "t") -> str:
        """``prefix`` and 8 random hex digits: a topic, group or transactional id of one test
        (a cluster shared by many tests keeps their names apart)."""
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def broker(self, which: Broker | int) -> Broker:
        return self.brokers[int(which)]

    # -- admin -------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None,
                     timeout: float = 30.0) -> str:
        """CreateTopics (replication factor 1: every broker reads the shared volume), then
        wait until every partition has a leader. Returns ``name``.

        Raises:
            admin.AdminError: the cluster refused (e.g. TOPIC_ALREADY_EXISTS).
        """
        admin.create_topic(self._wire, self.live_ports(), name, partitions, dict(config or {}), timeout)
        for p in range(partitions):
            self.leader_of(name, p, timeout)
        return name

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 30.0) -> Broker:
        """The broker leading ``topic``'s ``partition`` now (Metadata; waits while it has none)."""
        return self.brokers[admin.leader_of(self._wire, self.live_ports(), topic, partition, timeout)]

    def coordinator_of(self, *, transactional_id: str | None = None, group_id: str | None = None,
                       timeout: float = 30.0) -> Broker:
        """The broker coordinating ``transactional_id``'s transactions or ``group_id``'s
        group now (FindCoordinator, as a client asks; waits while there is none)."""
        if (transactional_id is None) == (group_id is None):
            raise TypeError("give one of transactional_id= or group_id=")
        key, key_type = (transactional_id, 1) if transactional_id is not None else (group_id, 0)
        assert key is not None
        return self.brokers[admin.coordinator_of(self._wire, self.live_ports(), key, key_type, timeout)]

    def live_ports(self) -> list[int]:
        """The ports of the brokers not paused (the ones to ask)."""
        return [b.port for b in self.brokers if not b.paused] or [b.port for b in self.brokers]

    def _wire(self, port: int, timeout: float = 5.0) -> Any:
        return self.process._wire_client(port, timeout=timeout)

    # -- faults ------------------------------------------------------------------------

    def failpoint(self, name: str, action: str = "crash", count: int | None = 1,
                  broker: Broker | int | Iterable[Broker | int] | None = None, **options: Any) -> Failpoint:
        """Arm the named failpoint (``kaas.failpoints.NAMES``: EndTxn phases, markers,
        appends, fsyncs, state writes, ...) on ``broker`` (one, several, or every broker),
        and return once each broker has loaded it. ``action``: ``crash``, ``pause`` (``ms=``),
        ``error`` (``errno=``), ``short`` (``fraction=``) or ``drop``; ``count`` hits at most
        (None: every hit); other options (``match=``, ``path=``) as the failpoint file takes
        them, and ``once=True``: it fires on the first broker to reach it and on no other.
        The returned ``Failpoint`` tells its hits and disarms (also as a context manager)."""
        targets = self.brokers if broker is None else (
            [self.broker(broker)] if isinstance(broker, Broker | int) else [self.broker(b) for b in broker])
        return self.failpoints.arm(name, action, count, targets, options)

    def disk_full(self) -> DiskFull:
        """Fill the data volume to its last byte (a filler file beside the data directory),
        so every broker's next write fails with ENOSPC as on a real full disk; the returned
        ``DiskFull`` frees it (``free()``, or at the end of its ``with`` block).

        Raises:
            Unsupported: the cluster's data is not on a volume of its own: start it with
                ``cluster(tmpfs="64m")`` (mounting needs root, or CAP_SYS_ADMIN).
        """
        if self.tmpfs is None:
            raise Unsupported("disk_full() needs the cluster's data on a volume of its own: cluster(tmpfs=\"64m\") "
                              "mounts one (Linux, as root); elsewhere the storage failpoints give the same errors, "
                              "e.g. c.failpoint(\"append.write\", \"error\", count=None, errno=\"ENOSPC\")")
        if self._disk is not None and not self._disk.freed:
            return self._disk
        self._disk = DiskFull(self.tmpfs.path)
        self._disk.fill()
        return self._disk

    # -- health ------------------------------------------------------------------------

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Wait until every broker runs (none paused: call ``resume`` first), every broker's
        Metadata lists them all with a controller, every partition of every topic has a
        leader, and every transaction coordinator slot sits where the all-alive placement
        puts it (a restarted broker took its share back).

        Raises:
            AssertionError: not healthy within ``timeout`` s, saying what was missing.
        """
        deadline = time.monotonic() + timeout
        pause = Backoff(0.005, 0.1)
        n = len(self.brokers)
        while True:
            why = self._unhealthy(n)
            if why is None:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the kaas cluster is not healthy after {timeout} s: {why} "
                                     f"(logs: {self.data / 'run'})")
            pause.sleep(deadline)

    def _unhealthy(self, n: int) -> str | None:
        if self.process.proc is not None and self.process.proc.poll() is not None:
            return f"the supervisor exited ({self.process.proc.poll()})"
        paused = [b.id for b in self.brokers if b.paused]
        if paused:
            return f"brokers {paused} are paused"
        for b in self.brokers:
            why = admin.metadata_problem(self._wire, b.port, n)
            if why is not None:
                return f"broker {b.id}: {why}"
        return admin.slots_problem(self.data, n)

    # -- logs --------------------------------------------------------------------------

    def log_files(self) -> list[Path]:
        """The brokers' logs, the supervisor's and the fork server's children's output."""
        run = self.data / "run"
        return sorted(run.glob("*.log")) + [self.process.log_path] if run.is_dir() else [self.process.log_path]

    def keep_logs(self, dest: Path) -> Path:
        """Copy every log file into ``dest`` (made). Returns ``dest``."""
        dest.mkdir(parents=True, exist_ok=True)
        for f in self.log_files():
            try:
                shutil.copy2(f, dest / f.name)
            except OSError:
                pass
        return dest

    # -- between tests -----------------------------------------------------------------

    def reset(self, timeout: float = 30.0) -> None:
        """Undo what a test left: resume paused brokers, disarm failpoints, free the disk,
        then ``wait_healthy`` (a cluster shared by many tests calls it between them)."""
        for b in self.brokers:
            b.resume()
        self.failpoints.disarm_all()
        if self._disk is not None:
            self._disk.free()
        self.wait_healthy(timeout)


class ClusterContext:
    """What ``cluster()`` returns: a context manager (``with`` or ``async with``) that starts
    the cluster on entry and stops it on exit."""

    def __init__(self, brokers: int, *, secure: bool, broker_args: Sequence[str], env: Mapping[str, str],
                 data_root: Path | None, keep_data: bool, logs_dir: Path | None, tmpfs: str | None,
                 restart_delay: float, timeout: float, launcher: Launcher) -> None:
        self.n = brokers
        self.secure = secure
        self.broker_args = list(broker_args)
        self.env = {**TEST_ENV, **env}
        self.data_root = data_root
        self.keep_data = keep_data
        self.logs_dir = logs_dir
        self.tmpfs_size = tmpfs
        self.restart_delay = restart_delay
        self.timeout = timeout
        self.launcher = launcher
        self.cluster: Cluster | None = None
        self.kept_logs: Path | None = None

    def start(self) -> Cluster:
        root = Path(tempfile.mkdtemp(prefix="kaas-test-", dir=self.data_root or shm_root()))
        tmpfs = None
        try:
            if self.tmpfs_size:
                tmpfs = Tmpfs.mount(root / "vol", self.tmpfs_size)
            data = (tmpfs.path if tmpfs else root) / "data"
            proc = ClusterProcess(data, self.n, extra=self.broker_args, env=self.env, secure=self.secure,
                                  launcher=self.launcher)
            proc.restart_delay = self.restart_delay
            self.cluster = Cluster(proc, root, tmpfs)
            proc.start(self.timeout)
        except BaseException as exc:
            self.stop(failed=True)
            if self.kept_logs is not None:
                exc.add_note(f"kaas: the cluster did not start; its logs are in {self.kept_logs}")
            else:
                shutil.rmtree(root, ignore_errors=True)
            raise
        return self.cluster

    def stop(self, failed: bool = False) -> None:
        """Stop the cluster; on ``failed``, copy its logs to ``logs_dir`` first (kept in
        ``kept_logs``); remove the data unless ``keep_data``."""
        c = self.cluster
        if c is None:
            return
        try:
            for b in c.brokers:
                b.resume()
            c.process.stop(graceful=self.keep_data)
        finally:
            if failed:
                stamp = time.strftime("%Y%m%d-%H%M%S")
                dest = (self.logs_dir or Path(tempfile.gettempdir()) / "kaas-logs") / f"{stamp}-{c.root.name}"
                self.kept_logs = c.keep_logs(dest)
            if c.tmpfs is not None and not self.keep_data:
                c.tmpfs.unmount()
            if not self.keep_data:
                shutil.rmtree(c.root, ignore_errors=True)
            self.cluster = None

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop(failed=exc is not None)
        if exc is not None and self.kept_logs is not None:
            exc.add_note(f"kaas: the cluster's logs are in {self.kept_logs}")

    async def __aenter__(self) -> Cluster:
        started: Cluster = await _in_thread(self.start)
        return started

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await _in_thread(lambda: self.__exit__(et, exc, tb))


async def _in_thread(fn: Any) -> Any:
    """Run the blocking ``fn`` in a worker thread of the running event loop (trio or asyncio)."""
    import sniffio

    if sniffio.current_async_library() == "trio":
        import trio

        return await trio.to_thread.run_sync(fn)
    import asyncio

    return await asyncio.to_thread(fn)


def cluster(brokers: int = 3, *, secure: bool = False, broker_args: Sequence[str] = TEST_BROKER_ARGS,
            env: Mapping[str, str] | None = None, data_root: Path | str | None = None, keep_data: bool = False,
            logs_dir: Path | str | None = None, tmpfs: str | None = None, restart_delay: float = 0.5,
            timeout: float = 30.0, launcher: Launcher = "fork") -> ClusterContext:
    """A kaas cluster of ``brokers`` brokers for the length of a ``with`` (or ``async with``)
    block; yields a ``Cluster``.

    Args:
        secure: ``kaas cluster --secure``: SASL_SSL listeners, SCRAM, ACLs on;
            ``client_config()`` has the admin's settings.
        broker_args: every broker's command-line options (``kaas broker --help``).
        env: more environment for the brokers (on top of ``TEST_ENV``).
        data_root: where the cluster's directory goes (default: /dev/shm, else the
            temporary directory).
        keep_data: leave the data directory (and a ``tmpfs`` mount) at the end.
        logs_dir: where the logs go when the block raises (default: TMPDIR/kaas-logs).
        tmpfs: mount a tmpfs of this size (``"64m"``) for the data, so ``disk_full()`` can
            fill it (root or CAP_SYS_ADMIN; ``Unsupported`` otherwise).
        restart_delay: seconds before the supervisor restarts a broker that died.
        timeout: seconds to wait for the cluster to form.
        launcher: ``fork`` (the fork server; fast) or ``exec`` (new interpreters).
    """
    return ClusterContext(brokers, secure=secure, broker_args=broker_args, env=env or {},
                          data_root=Path(data_root) if data_root else None, keep_data=keep_data,
                          logs_dir=Path(logs_dir) if logs_dir else None, tmpfs=tmpfs, restart_delay=restart_delay,
                          timeout=timeout, launcher=launcher)


def _warm_on_import() -> None:
    """Start this process's fork server as soon as the API is imported: its imports of the
    broker's code (~0.4 s of CPU) then overlap the caller's own (a Kafka client, kio), and
    the first ``cluster()`` forks from a ready server. ``KAAS_TESTING_LAZY=1`` waits for
    the first ``cluster()`` instead."""
    if hasattr(os, "fork") and os.environ.get("KAAS_TESTING_LAZY") != "1":
        from kaas.testing.forkserver import warm

        warm()


_warm_on_import()
