"""The pytest plugin of kaas.testing (``kaas.testing.plugin``), run by pytest's own
``pytester``: every fixture and option, the chaos schedule, the skip where kaas cannot
run, and what is left after a failing test and after Ctrl-C (nothing running, nothing on
disk, the logs kept). The inner runs go in-process (they share this process's fork
server: a cluster starts in a fraction of a second) except the Ctrl-C one, a real
``pytest`` process interrupted by KeyboardInterrupt.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from kaas.testing import plugin

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

# An inner test module's helper: records what its cluster runs, for the outer test to check.
RECORD = '''
import json, os
from pathlib import Path

def record(c, name):
    info = {"root": str(c.root), "bootstrap": c.bootstrap, "brokers": len(c.brokers),
            "pids": [b.pid for b in c.brokers], "supervisor": c.process.proc.pid}
    Path(name + ".json").write_text(json.dumps(info))
'''


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def assert_cleaned_up(info: dict, timeout: float = 20.0) -> None:
    """No process of the recorded cluster runs and its directory is gone."""
    deadline = time.monotonic() + timeout
    for pid in [*info["pids"], info["supervisor"]]:
        while not _gone(pid):
            assert time.monotonic() < deadline, f"pid {pid} of the kaas cluster still runs"
            time.sleep(0.05)
    assert not Path(info["root"]).exists(), f"{info['root']} left behind"


def load(pytester: pytest.Pytester, name: str) -> dict:
    return json.loads((pytester.path / f"{name}.json").read_text())


def test_fixtures_share_one_cluster_per_session(pytester):
    """kaas_cluster: 3 brokers by default, one cluster for the session, made whole again
    between tests (a paused broker is resumed); kaas_broker: one broker of its own."""
    pytester.makepyfile(RECORD + '''
def test_a(kaas_cluster):
    record(kaas_cluster, "a")
    t = kaas_cluster.create_topic(kaas_cluster.unique("t"), 3)
    assert kaas_cluster.leader_of(t, 2) in kaas_cluster.brokers
    kaas_cluster.brokers[1].pause()

def test_b(kaas_cluster, kaas_broker):
    record(kaas_cluster, "b")
    record(kaas_broker, "one")
    assert not kaas_cluster.brokers[1].paused
    assert kaas_cluster.coordinator_of(group_id="g") in kaas_cluster.brokers
''')
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
    a, b, one = load(pytester, "a"), load(pytester, "b"), load(pytester, "one")
    assert a["bootstrap"] == b["bootstrap"] and a["brokers"] == 3
    assert one["brokers"] == 1 and one["bootstrap"] != a["bootstrap"]
    assert_cleaned_up(a)
    assert_cleaned_up(one)


def test_options_brokers_scope_and_keep_data(pytester):
    """--kaas-brokers 2 --kaas-scope function: each test gets a fresh 2-broker cluster;
    --kaas-keep-data leaves its directory and says where."""
    pytester.makepyfile(RECORD + '''
def test_a(kaas_cluster):
    record(kaas_cluster, "a")

def test_b(kaas_cluster):
    record(kaas_cluster, "b")
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--kaas-brokers", "2", "--kaas-scope", "function",
                                "--kaas-keep-data")
    result.assert_outcomes(passed=2)
    a, b = load(pytester, "a"), load(pytester, "b")
    assert a["brokers"] == b["brokers"] == 2 and a["bootstrap"] != b["bootstrap"]
    result.stdout.fnmatch_lines([f"kaas: data kept in {a['root']}"])
    for info in (a, b):
        assert (Path(info["root"]) / "data" / "run" / "kaas-0.log").exists()
        import shutil

        shutil.rmtree(info["root"])
        assert_cleaned_up(info)


def test_ini_options_and_the_kaas_marker(pytester):
    """ini kaas_brokers/kaas_scope; @pytest.mark.kaas(brokers=1) gives a cluster of the
    test's own, stopped after it."""
    pytester.makeini("[pytest]\nkaas_brokers = 2\nkaas_scope = module\n")
    pytester.makepyfile(RECORD + '''
import pytest

def test_shared(kaas_cluster):
    record(kaas_cluster, "shared")

@pytest.mark.kaas(brokers=1)
def test_own(kaas_cluster):
    record(kaas_cluster, "own")
''')
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
    shared, own = load(pytester, "shared"), load(pytester, "own")
    assert shared["brokers"] == 2 and own["brokers"] == 1
    assert_cleaned_up(own)
    assert_cleaned_up(shared)


def test_chaos_runs_its_schedule_and_reports_it(pytester):
    """The chaos fixture kills and pauses in the background; the report lists each fault;
    the cluster is whole again for the next test."""
    pytester.makepyfile('''
import time

def test_chaos(kaas_cluster, chaos):
    chaos.start(plan=[(0.05, "pause", 0, 0.3), (0.5, "kill", lambda c: c.brokers[2])])
    deadline = time.monotonic() + 20
    while len(chaos.events) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert [(e.action, e.broker) for e in chaos.events] == [("pause", 0), ("kill", 2)]
    assert all(e.pid for e in chaos.events)

def test_random(kaas_cluster, chaos):
    with chaos.start(every=0.1, actions=("pause",), hold=0.1, seed=3, max_faults=3):
        deadline = time.monotonic() + 20
        while len(chaos.events) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    assert not any(b.paused for b in kaas_cluster.brokers)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*kaas chaos: 2 faults (1 kill, 1 pause)*", "*pause broker 0 (pid *) for *",
                                 "*kill  broker 2 (pid *)*", "*kaas chaos: 3 faults (0 kill, 3 pause)*"])


def test_a_failing_test_keeps_logs_and_leaves_nothing_running(pytester):
    pytester.makepyfile(RECORD + '''
import pytest

@pytest.mark.kaas(brokers=1)
def test_fails(kaas_cluster):
    record(kaas_cluster, "f")
    assert False, "the application lost an order"
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*kaas logs (kaas_cluster)*", "*copied to *kaas-logs*", "--- kaas-0.log*",
                                 "*broker_listening*"])
    info = load(pytester, "f")
    assert_cleaned_up(info)
    kept = [line.split("copied to ", 1)[1] for line in result.outlines if "copied to " in line][0]
    assert (Path(kept.strip()) / "kaas-0.log").exists()


def test_ctrl_c_stops_the_clusters(pytester):
    """KeyboardInterrupt in the middle of a test (Ctrl-C): pytest tears the fixtures down;
    no broker or supervisor is left, no data directory either."""
    pytester.makepyfile(RECORD + '''
def test_interrupted(kaas_cluster):
    record(kaas_cluster, "i")
    raise KeyboardInterrupt
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--kaas-brokers", "1", timeout=120)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert_cleaned_up(load(pytester, "i"))


def test_skips_where_kaas_cannot_run(pytester, monkeypatch):
    monkeypatch.setattr(plugin, "unsupported_reason", lambda: "kaas test clusters need a POSIX system (test)")
    pytester.makepyfile('''
def test_needs_a_cluster(kaas_cluster):
    pass
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*kaas test clusters need a POSIX system (test)*"])
