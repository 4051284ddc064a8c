from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import trio.testing
from hypothesis import settings

from tests.fixtures import broker_fixture

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("deep", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("KAAS_HYPOTHESIS_PROFILE", "ci"))

broker = broker_fixture(doc="A fresh single broker on a free port and a temporary data directory.")
shared_broker = broker_fixture(scope="module", name="shared", extra=["--num-partitions", "1"],
                               doc="One broker shared by the tests of a module (they use distinct topic names).")


@pytest.fixture
def shm_path(tmp_path):
    """A fresh directory on tmpfs (/dev/shm) where there is one, else ``tmp_path``. A broker
    whose data lives there does its file work inline (``Broker.memory_backed``), never in
    a worker thread: what a test on trio's autojumping MockClock needs, since the clock
    jumps ahead whenever every task waits, a thread's file work included."""
    root = Path("/dev/shm")
    if not root.is_dir():
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="kaas-test-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def thread_safe_autojump_clock():
    """trio's MockClock jumping ahead once every task has waited 20 ms of real time, where
    ``autojump_clock`` jumps at once. A broker opens a partition (recovery) in a worker
    thread even on tmpfs: with a zero threshold the clock would jump while the thread
    works, past heartbeats the membership task cannot write until the thread is done, and
    the lease would lapse in virtual time. (pytest-trio runs a test on the clock fixture
    it asks for.)"""
    return trio.testing.MockClock(autojump_threshold=0.02)
