"""make eos's second harness, small, inside make test: an unmodified quixstreams application
(exactly-once stateful count per key, its changelog compacted by the broker while it runs)
SIGKILLed and restarted with an empty state directory, restoring from the compacted
changelog; scripts/quix_harness.py exits 0 only if every count is exact (1..n per key, no
duplicate, no gap) and the changelog was cleaned before the kill.

quixstreams pins its own confluent-kafka, so it runs from a venv of its own, built here by
``make .venv-quix`` (from PyPI the first time): a failed build skips the test, saying why
(``tests/tools.py``), and fails it under ``KAAS_REQUIRE_ALL=1`` (CI).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tools import missing, require, require_tool

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quix_python() -> Path:
    require_tool("make", package="make")
    try:
        proc = subprocess.run(["make", "-C", str(ROOT), ".venv-quix"], capture_output=True, text=True,
                              timeout=900, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        missing(f"make .venv-quix did not finish in 900 s ({exc}): it installs quixstreams from PyPI")
    require(proc.returncode == 0,
            f"make .venv-quix failed ({proc.returncode}): it installs quixstreams and its confluent-kafka from PyPI "
            "(scripts/quix-requirements.txt), which builds against librdkafka where PyPI has no wheel for this "
            f"Python (apt-get install librdkafka-dev)\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    python = ROOT / ".venv-quix" / "bin" / "python"
    assert python.exists(), proc.stdout
    return python


def run_harness(args: list[str], timeout: float) -> tuple[int, str]:
    """The harness in a process of its own; on a timeout it gets SIGINT first, so that it
    stops its app and its cluster (its finally blocks), and SIGKILL only after."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "quix_harness.py"), "run", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            stdin=subprocess.DEVNULL)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail(f"the harness did not finish in {timeout} s:\n{out[-4000:]}")
    text = "\n".join(line for line in out.splitlines() if not line.startswith("%"))
    return proc.returncode, text


def test_quix_count_restored_from_compacted_changelog_is_exact(quix_python):
    rc, out = run_harness(["--brokers", "3", "--messages", "2000", "--keys", "12", "--partitions", "3",
                           "--pace-ms", "5", "--kill-at", "0.4", "--seed", "18", "--timeout", "100",
                           "--quix-python", str(quix_python)], timeout=150)
    assert rc == 0, out[-4000:]
    assert "EXACTLY-ONCE HELD" in out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["ok"] and result["restarts"] == 1 and result["app_exit_codes"][0] == -signal.SIGKILL
    assert result["output_records"] == 2000
    assert result["duplicates"] == result["gaps"] == result["keys_with_wrong_final_count"] == 0
    assert result["passes_before_kill"] >= 1 and result["removed_before_kill"] > 0
    assert set(result["recovered_partitions"]) & set(result["cleaned_before_kill"])
    assert result["changelog_records"] < result["changelog_offsets"]
