"""kaas.testing's broker faults in any order at any speed (issue 48, item 5): random
sequences of kill, pause, resume, restart and wait_healthy on a real 3-broker cluster
(hypothesis drives them; each call returns or raises the error its docstring names, and the
cluster ends each sequence healthy), and the application test that used to fail in the
fixture: the transaction coordinator killed, the commit, the victim restarted at once."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from kaas.testing import BrokerDown, Cluster, api_versions_ok, cluster
from kaas.testing.verify import read_topic, wait_transactions_complete

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

BROKERS = st.integers(0, 2)
PATIENCE = 120.0  # a wait's timeout: a graceful drain that normally takes seconds takes far longer on a loaded CI
PAUSES = st.sampled_from([0.0, 0.0, 0.02, 0.2, 0.6])  # 0.6 s: past the cluster's restart_delay (0.5 s)
CALLS = st.sampled_from(["kill", "pause", "resume", "restart"])


@pytest.fixture(scope="module")
def shared() -> Cluster:
    with cluster(brokers=3) as c:
        c.create_topic(c.unique("faults"), 3)
        yield c


class Faults(RuleBasedStateMachine):
    """The model: which brokers this test holds paused. Everything else is the cluster's."""

    c: Cluster

    def __init__(self) -> None:
        super().__init__()
        self.paused: set[int] = set()

    @rule(b=BROKERS, wait=st.booleans())
    def kill(self, b: int, wait: bool) -> None:
        broker = self.c.brokers[b]
        pid = broker.kill(wait=wait, timeout=PATIENCE)
        assert pid is not None  # every broker ran once
        self.paused.discard(b)
        if wait:
            assert broker.pid != pid and api_versions_ok("127.0.0.1", broker.port)

    @rule(b=BROKERS)
    def pause(self, b: int) -> None:
        broker = self.c.brokers[b]
        pid = broker.pause(timeout=PATIENCE)
        self.paused.add(b)
        assert broker.pid == pid and broker.paused_pid == pid
        assert not api_versions_ok("127.0.0.1", broker.port, timeout=0.1)

    @rule(b=BROKERS)
    def resume(self, b: int) -> None:
        self.c.brokers[b].resume()
        self.paused.discard(b)

    @rule(b=BROKERS, wait=st.booleans())
    def restart(self, b: int, wait: bool) -> None:
        broker = self.c.brokers[b]
        before = broker.incarnation()
        broker.restart(wait=wait, timeout=PATIENCE)
        self.paused.discard(b)
        if wait:
            now = broker.incarnation()
            assert now is not None and now != before and api_versions_ok("127.0.0.1", broker.port)

    @rule()
    def wait_healthy(self) -> None:
        if self.paused:  # it cannot become healthy while the test holds a broker stopped
            with pytest.raises(AssertionError, match="paused"):
                self.c.wait_healthy(timeout=0.2)
        else:
            self.c.wait_healthy(timeout=PATIENCE)

    @rule(seconds=PAUSES)
    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    @rule(b=BROKERS, first=CALLS, second=CALLS)
    def at_once(self, b: int, first: str, second: str) -> None:
        """Two calls on one broker from two threads at the same time (a test and a chaos
        schedule): each returns; then the test resumes it, as ``chaos.stop`` does."""
        broker = self.c.brokers[b]
        errors: list[BaseException] = []

        def call(name: str) -> None:
            try:
                {"kill": broker.kill, "pause": lambda: broker.pause(timeout=PATIENCE), "resume": broker.resume,
                 "restart": lambda: broker.restart(wait=False)}[name]()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=call, args=(name,)) for name in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(PATIENCE + 10)
        assert not errors, errors
        broker.resume()
        self.paused.discard(b)

    @rule(b=BROKERS)
    def pid(self, b: int) -> None:
        try:
            pid = self.c.brokers[b].pid
        except BrokerDown:
            assert b not in self.paused
        else:
            assert pid > 0

    @invariant()
    def paused_as_the_model_says(self) -> None:
        assert {b.id for b in self.c.brokers if b.paused} == self.paused

    def teardown(self) -> None:
        for b in self.c.brokers:
            b.resume()
        self.c.wait_healthy(timeout=PATIENCE)


def test_any_sequence_of_faults_ends_healthy(shared, tmp_path_factory):
    """10 sequences of up to 12 calls: about a minute on two idle cores."""
    Faults.c = shared
    try:
        run_state_machine_as_test(Faults, settings=settings(
            max_examples=10, stateful_step_count=12, deadline=None, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    except BaseException as exc:  # the cluster outlives the test: keep its logs now
        exc.add_note(f"kaas: the cluster's logs are in {shared.keep_logs(tmp_path_factory.mktemp('kaas-logs'))}")
        raise


def test_restart_right_after_kill_of_the_transaction_coordinator():
    """The application test of issue 48: kill the coordinator, commit (quick once another
    broker took over), restart the victim at once."""
    with cluster(brokers=3) as c:
        topic = c.create_topic(c.unique("app"), 3)
        tid = c.unique("tx")
        p = Producer(c.client_config(transactional_id=tid, transaction_timeout_ms=20000))
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(30):
            p.produce(topic, value=f"v{i}".encode(), partition=i % 3)
        assert p.flush(30) == 0
        victim = c.coordinator_of(transactional_id=tid)
        killed = victim.kill()
        p.commit_transaction(60)
        victim.restart()
        assert victim.pid != killed
        c.wait_healthy()
        ends, _ = wait_transactions_complete(c.client_config(), topic, time.monotonic() + 30)
        assert sum(hw for _, hw in ends.values()) == 30 + 3  # the records and one commit marker each
        targets = {part: lso for part, (lso, _) in ends.items()}
        values = sorted(r.value for r in read_topic(c.client_config(), topic, targets=targets))
        assert values == sorted(f"v{i}".encode() for i in range(30))
