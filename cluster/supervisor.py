"""Spawn N broker processes, keep one pid file per broker current, restart a broker that
dies after a short delay, and stop them all gracefully on SIGTERM/SIGINT.

The supervisor owns only ``DATA/run/`` (pid files and broker logs); brokers coordinate
through the shared volume, never through it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Child:
    broker_id: int
    port: int
    metrics_port: int = 0
    proc: subprocess.Popen | None = None
    died_at: float | None = None
    restarts: int = 0
    log: object = None
    argv: list[str] = field(default_factory=list)


def pid_file(data: Path, broker_id: int) -> Path:
    return Path(data) / "run" / f"kaas-{broker_id}.pid"


def log_file(data: Path, broker_id: int) -> Path:
    return Path(data) / "run" / f"kaas-{broker_id}.log"


def _write_pid(path: Path, pid: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{pid}\n")
    os.replace(tmp, path)


class Supervisor:
    def __init__(self, *, brokers: int, data: Path, base_port: int, host: str = "127.0.0.1",
                 first_id: int = 0, restart_delay: float = 1.0, broker_args: list[str] | None = None,
                 metrics_base_port: int = 0) -> None:
        self.data = Path(data).resolve()
        self.host = host
        self.restart_delay = restart_delay
        self.broker_args = list(broker_args or [])
        self.children = [Child(first_id + i, base_port + i, metrics_base_port + i if metrics_base_port else 0)
                         for i in range(brokers)]
        self.stopping = False

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{c.port}" for c in self.children)

    def _spawn(self, child: Child) -> None:
        run = self.data / "run"
        run.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "kaas.cli", "broker", "--id", str(child.broker_id),
                "--data", str(self.data), "--listen", f"{self.host}:{child.port}",
                "--advertise", f"{self.host}:{child.port}"]
        if child.metrics_port:
            argv += ["--metrics-port", str(child.metrics_port)]
        argv += self.broker_args
        logf = open(log_file(self.data, child.broker_id), "ab")
        child.proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        logf.close()
        child.died_at = None
        _write_pid(pid_file(self.data, child.broker_id), child.proc.pid)
        metrics = f" metrics=http://{self.host}:{child.metrics_port}/metrics" if child.metrics_port else ""
        self._say(f"broker {child.broker_id} started pid={child.proc.pid} port={child.port}{metrics}")

    def _say(self, msg: str) -> None:
        print(f"[kaas-cluster] {msg}", file=sys.stderr, flush=True)

    def start(self) -> None:
        for child in self.children:
            self._spawn(child)

    def poll(self) -> None:
        """Restart brokers that died, after the restart delay."""
        now = time.monotonic()
        for child in self.children:
            if child.proc is None:
                continue
            rc = child.proc.poll()
            if rc is None:
                continue
            if child.died_at is None:
                child.died_at = now
                self._say(f"broker {child.broker_id} exited rc={rc}; restarting in {self.restart_delay}s")
            elif not self.stopping and now - child.died_at >= self.restart_delay:
                child.restarts += 1
                self._spawn(child)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every broker (a graceful drain), SIGKILL what is left after ``timeout``."""
        self.stopping = True
        for child in self.children:
            if child.proc and child.proc.poll() is None:
                try:
                    child.proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for child in self.children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()
        for child in self.children:
            try:
                pid_file(self.data, child.broker_id).unlink()
            except FileNotFoundError:
                pass
        self._say("all brokers stopped")


def run_supervisor(**kwargs) -> None:
    """Foreground supervisor: prints the bootstrap servers, runs until SIGINT/SIGTERM."""
    sup = Supervisor(**kwargs)
    stop = False

    def on_signal(signum, frame):  # noqa: ARG001
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sup.start()
    print(sup.bootstrap, flush=True)
    sup._say(f"bootstrap servers: {sup.bootstrap}  (data: {sup.data}, logs: {sup.data / 'run'})")
    try:
        while not stop:
            sup.poll()
            time.sleep(0.2)
    finally:
        sup.stop()
