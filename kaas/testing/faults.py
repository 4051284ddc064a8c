"""The faults a test cluster puts on its brokers beyond signals: named failpoints (design
section 9, ``kaas.failpoints``) and a full data volume (a tmpfs of its own, filled).

Failpoints are armed through each broker's ``DATA/run/failpoints-<id>.json`` (its one
writer here: the test); a broker reloads the file within 200 ms and logs
``failpoints_armed``, which ``FailpointTable.arm`` waits for. Several failpoints may be
armed on one broker at once: the table keeps what is armed per broker and writes the
whole file each time.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from kaas.testing.procs import Backoff


class Broker(Protocol):
    """What the failpoint table needs of a broker (``kaas.testing.clusters.Broker``)."""

    @property
    def id(self) -> int: ...
    @property
    def paused(self) -> bool: ...
    def alive(self) -> bool: ...
    def log_text(self) -> str: ...

ACTIONS = ("crash", "pause", "error", "short", "drop")
ARM_TIMEOUT_S = 10.0


class Unsupported(RuntimeError):
    """What this platform cannot do for a test (the message says why and what works instead)."""


# ----------------------------------------------------------------------------- failpoints


class Failpoint:
    """One failpoint armed on some brokers (``Cluster.failpoint``): its hits, and ``disarm``
    (also at the end of a ``with`` block)."""

    def __init__(self, table: FailpointTable, name: str, brokers: Sequence[Broker], spec: dict[str, Any],
                 before: dict[int, int]) -> None:
        self.table = table
        self.name = name
        self.brokers = list(brokers)
        self.spec = spec
        self._before = before  # hits in each broker's log when armed

    def __repr__(self) -> str:
        return f"<failpoint {self.name} {self.spec} on brokers {[b.id for b in self.brokers]}>"

    def hits(self) -> dict[int, int]:
        """Hits so far per broker id (``failpoint_hit`` lines in its log since arming)."""
        return {b.id: _hits(b, self.name) - self._before[b.id] for b in self.brokers}

    def wait_hit(self, timeout: float = 30.0, times: int = 1) -> Broker:
        """Wait until the failpoint fired ``times`` times on one broker; returns it.

        Raises:
            AssertionError: it did not within ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        pause = Backoff(0.005, 0.1)
        while True:
            for b in self.brokers:
                if _hits(b, self.name) - self._before[b.id] >= times:
                    return b
            if time.monotonic() > deadline:
                raise AssertionError(f"failpoint {self.name} did not fire within {timeout} s")
            pause.sleep(deadline)

    def disarm(self) -> None:
        self.table.disarm(self.name, self.brokers)

    def __enter__(self) -> Failpoint:
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.disarm()


def _hits(b: Broker, name: str) -> int:
    return sum(1 for line in b.log_text().splitlines() if "failpoint_hit" in line and f"name={name} " in line + " ")


class FailpointTable:
    """What is armed on each broker of a cluster, written to their failpoint files."""

    def __init__(self, run_dir: Path, brokers: Sequence[Broker]) -> None:
        self.run_dir = run_dir
        self.brokers = list(brokers)
        self.armed: dict[int, dict[str, dict[str, Any]]] = {b.id: {} for b in brokers}

    def arm(self, name: str, action: str, count: int | None, brokers: Sequence[Broker],
            options: dict[str, Any]) -> Failpoint:
        """Arm ``name`` on ``brokers`` and wait until each running one has loaded it.

        Raises:
            ValueError: an unknown name or action, or ``drop`` where it is not honoured.
            AssertionError: a broker did not load it within ``ARM_TIMEOUT_S``.
        """
        from kaas import failpoints

        if name not in failpoints.NAMES:
            raise ValueError(f"unknown failpoint {name!r}; the names: {', '.join(failpoints.NAMES)}")
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
        if action == "drop" and name not in failpoints.DROPPABLE:
            raise ValueError(f"drop is honoured only at {', '.join(failpoints.DROPPABLE)}")
        if options.get("once") is True:  # a token of this arming's own (a claimed one stays claimed)
            options = {**options, "once": uuid.uuid4().hex}
        spec = {"action": action, **({} if count is None else {"count": count}), **options}
        before = {b.id: _hits(b, name) for b in brokers}
        for b in brokers:
            self._take_fired(b.id)
            self.armed[b.id][name] = spec
        self._write_and_wait(brokers)
        return Failpoint(self, name, brokers, spec, before)

    def _take_fired(self, bid: int) -> None:
        """A crash renames the file to ``.fired`` as the broker dies: what was armed there
        is gone from the broker's view, so it is forgotten here too."""
        fired = self.run_dir / f"failpoints-{bid}.fired"
        if fired.exists():
            fired.unlink()
            self.armed[bid] = {}

    def disarm(self, name: str, brokers: Sequence[Broker]) -> None:
        for b in brokers:
            self._take_fired(b.id)
            self.armed[b.id].pop(name, None)
        self._write_and_wait(brokers)

    def disarm_all(self) -> None:
        armed = [b for b in self.brokers if self.armed[b.id]
                 or (self.run_dir / f"failpoints-{b.id}.json").exists()]
        for b in armed:
            self.armed[b.id] = {}
        self._write_and_wait(armed)

    def _write_and_wait(self, brokers: Sequence[Broker]) -> None:
        """Write each broker's file (or remove it when nothing is armed there), then wait
        until each running broker logged that it loaded the change."""
        from kaas import failpoints

        waits = []
        for b in brokers:
            path = self.run_dir / f"failpoints-{b.id}.json"
            specs = self.armed[b.id]
            if not specs and not path.exists():
                continue  # nothing armed before or now (a crash consumed it): no change to see
            event = "failpoints_armed" if specs else "failpoints_cleared"
            waits.append((b, event, b.log_text().count(event)))
            if specs:
                failpoints.arm(self.run_dir, b.id, specs)
            else:
                failpoints.disarm(self.run_dir, b.id)
        deadline = time.monotonic() + ARM_TIMEOUT_S
        pause = Backoff(0.01, 0.05)
        for b, event, seen in waits:
            while not b.paused and b.alive() and b.log_text().count(event) <= seen:
                if time.monotonic() > deadline:
                    raise AssertionError(f"broker {b.id} did not load its failpoints within {ARM_TIMEOUT_S} s")
                pause.sleep(deadline)


# ----------------------------------------------------------------------------- a full disk


class Tmpfs:
    """A tmpfs mounted for one cluster's data (``mount -t tmpfs``: root or CAP_SYS_ADMIN)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def mount(cls, path: Path, size: str) -> Tmpfs:
        """Raises: Unsupported: it cannot be mounted here (the reason)."""
        path.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                           capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError) as exc:
            detail = (getattr(exc, "stderr", b"") or b"").decode(errors="replace").strip()
            raise Unsupported(f"cannot mount a tmpfs for the cluster's data here ({detail or exc}): "
                              "disk_full() needs root or CAP_SYS_ADMIN") from None
        return cls(path)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True, timeout=10)


class DiskFull:
    """The volume at ``volume`` filled to its last byte by a filler file (``fill``) until
    ``free`` (or the end of a ``with`` block)."""

    def __init__(self, volume: Path) -> None:
        self.filler = volume / "kaas-disk-full.filler"
        self.freed = False
        self.written = 0

    def fill(self) -> int:
        """Write the filler until the volume refuses a single byte. Returns the bytes written."""
        chunk = b"\0" * (1 << 20)
        with open(self.filler, "ab", buffering=0) as f:
            while True:
                try:
                    self.written += f.write(chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(chunk) == 1:
                        return self.written
                    chunk = chunk[: len(chunk) // 16 or 1]

    def free(self) -> None:
        """Remove the filler: writes succeed again (an operator freed space)."""
        try:
            os.unlink(self.filler)
        except FileNotFoundError:
            pass
        self.freed = True

    def __enter__(self) -> DiskFull:
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.free()
