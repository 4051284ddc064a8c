"""What a test needs from the machine beyond Python: the one place that skips for it.

``make test`` passes on a machine with Python alone: a test that needs a system tool (kcat,
node, go, a Debian package of Go sources, the quix venv) or a privilege (root, to mount a
tmpfs or enter a PID namespace) calls one of these first, and is skipped, saying what is
missing and which package provides it, when it is not there. With ``KAAS_REQUIRE_ALL=1``
(``.ci/run`` sets it) the same test fails instead: CI runs everything.

    kcat = require_tool("kcat", package="kcat")
    require(path.exists(), f"{path} is missing: apt-get install {package}")
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import NoReturn

import pytest

REQUIRE_ALL = "KAAS_REQUIRE_ALL"


def require_all() -> bool:
    """True when every optional requirement must be met (``KAAS_REQUIRE_ALL=1``)."""
    return os.environ.get(REQUIRE_ALL, "") == "1"


def missing(reason: str) -> NoReturn:
    """Skip the running test because ``reason``; fail it under ``KAAS_REQUIRE_ALL=1``."""
    if require_all():
        pytest.fail(f"{reason} ({REQUIRE_ALL}=1: a missing requirement is a failure)", pytrace=False)
    skip = pytest.skip.Exception(reason)
    skip._use_item_location = True  # -rs names the test, not this line (as pytest does for a fixture's skip)
    raise skip


def require(ok: bool, reason: str) -> None:
    """``missing(reason)`` unless ``ok``."""
    if not ok:
        missing(reason)


def require_tool(name: str, *, package: str, why: str = "") -> str:
    """The path of the executable ``name`` on PATH; else ``missing``, naming the Debian
    ``package`` that provides it (and ``why`` the test needs it, when given)."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not on PATH{f' ({why})' if why else ''}: apt-get install {package}")
    return path


def require_tmpfs_mount() -> None:
    """A tmpfs can be mounted here (root or CAP_SYS_ADMIN); else ``missing``."""
    require_tool("mount", package="mount")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", d], capture_output=True, text=True,
                              timeout=10)
        if proc.returncode != 0:
            missing(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode}): run as root "
                    "(or with CAP_SYS_ADMIN)")
        subprocess.run(["umount", d], check=False, capture_output=True, timeout=10)


def require_bundled_librdkafka() -> None:
    """confluent-kafka as PyPI's wheel, with librdkafka bundled beside it: its mock cluster
    (``scripts/peers/mock_cluster.py``, the benchmarks' reference peer) loads that library.
    A confluent-kafka built from source against the system's librdkafka has none."""
    import glob

    import confluent_kafka

    site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    require(bool(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*"))),
            f"no librdkafka bundled with confluent-kafka at {site}: librdkafka's mock cluster needs "
            "confluent-kafka's wheel (pip install --only-binary confluent-kafka)")
