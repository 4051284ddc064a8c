"""Disk failures for component tests: the ``state.*`` failpoints of ``storage.fs`` armed in
this process (issue 17, point 6: the failing-disk paths run in ``make test`` without a
special mount)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from kaas import failpoints

# (point, spec) of each kind of disk failure; ``path`` is added per test
FAULTS = {
    "enospc": ("state.write", {"action": "error", "errno": "ENOSPC"}),
    "eio": ("state.write", {"action": "error", "errno": "EIO"}),
    "short": ("state.write", {"action": "short", "fraction": 0.5}),
    "fsync": ("state.fsync", {"action": "error", "errno": "EIO"}),
    "rename": ("state.rename", {"action": "error", "errno": "ENOSPC"}),
}
APPEND_FAULTS = ("enospc", "eio", "short", "fsync")  # an append-only log has no rename


@pytest.fixture
def faults(tmp_path):
    """``arm(kind, path, **extra)`` / ``disarm()`` for broker id 0 in this process, with a
    run directory of the test's own; disarmed at teardown."""
    run = tmp_path / "failpoints"
    run.mkdir()
    failpoints.configure(run, 0)

    def disarm() -> None:
        failpoints.disarm(run, 0)
        failpoints.reload()

    def arm(kind: str, path: str, **extra) -> None:
        disarm()  # a fresh stamp: two specs of one size written in one tick are both seen
        point, spec = FAULTS[kind]
        failpoints.arm(run, 0, {point: {**spec, "path": path, **extra}})
        failpoints.reload()

    yield SimpleNamespace(arm=arm, disarm=disarm, run=run)
    disarm()


def leftovers(directory: Path) -> list[str]:
    """Tmp files a writer left behind (``.<name>.<writer>.tmp`` / ``.excl``)."""
    if not directory.exists():
        return []
    return sorted(n for n in os.listdir(directory) if n.startswith("."))
