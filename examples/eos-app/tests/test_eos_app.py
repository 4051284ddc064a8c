"""The example application is exactly-once under the faults that break naive ones: the
transaction coordinator crashing in the middle of EndTxn, a partition leader paused, the
application itself SIGKILLed and restarted. Only kaas's pytest fixtures are used
(``kaas_cluster``, ``chaos``) and its verdict (``kaas.testing.verify``)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kaas.testing.verify import exactly_once

APP = Path(__file__).resolve().parent.parent / "app.py"
ORDERS = 300


def order_id(record) -> int:
    return json.loads(record.value)["id"]


def seed(config: dict, topic: str, n: int = ORDERS) -> None:
    p = Producer({**config, "enable.idempotence": True})
    for i in range(n):
        p.produce(topic, json.dumps({"id": i, "amount": i % 97 + 1}).encode(), key=str(i % 17).encode())
    assert p.flush(30) == 0


def start_app(c, source: str, sink: str, group: str, txn_id: str, *more: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(APP), "--bootstrap", c.bootstrap, "--source", source,
                             "--sink", sink, "--group", group, "--transactional-id", txn_id, "--idle", "1", *more],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(app: subprocess.Popen, timeout: float = 90) -> str:
    try:
        out, _ = app.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        app.kill()
        out, _ = app.communicate()
        tail = "\n".join(out.splitlines()[-40:])
        raise AssertionError(f"the app did not finish within {timeout} s; its last lines:\n{tail}") from None
    assert app.returncode == 0, out
    return out


def another_leader(sink: str, coordinator):
    """A leader of one of ``sink``'s partitions other than the transaction coordinator (a
    paused coordinator would lose its transactions to a peer before the crash)."""
    def pick(c):
        return next(b for b in (c.leader_of(sink, p) for p in range(3)) if b.id != coordinator.id)
    return pick


@pytest.fixture
def names(kaas_cluster):
    """Topics (3 partitions each), a group and a transactional id of this test's own."""
    source = kaas_cluster.create_topic(kaas_cluster.unique("orders"), 3)
    sink = kaas_cluster.create_topic(kaas_cluster.unique("orders-gross"), 3)
    return source, sink, kaas_cluster.unique("vat-app"), kaas_cluster.unique("vat-app-txn")


def seed_and_arm(c, chaos, names):
    """The input seeded; the app's transaction coordinator to crash at its first EndTxn,
    after PrepareCommit (armed on every broker, since a pause past a broker's lease can
    move the coordinator before the first commit, but fired once in the cluster: a chain
    of crashes would take down every broker the client knows, and librdkafka's re-bootstrap
    then hangs ``send_offsets_to_transaction``, confluentinc/librdkafka#5511); 0.5 s on, a
    broker leading an output partition, not the coordinator, paused for 1.5 s. Returns
    the failpoint."""
    source, sink, _group, txn_id = names
    seed(c.client_config(), source)
    coordinator = c.coordinator_of(transactional_id=txn_id)
    crash = c.failpoint("endtxn.after_prepare", "crash", once=True)
    chaos.start(plan=[(0.5, "pause", another_leader(sink, coordinator), 1.5)])
    return crash


def test_exactly_once_with_the_coordinator_crashing_mid_endtxn_and_a_leader_paused(kaas_cluster, chaos, names):
    source, sink, group, txn_id = names
    crash = seed_and_arm(kaas_cluster, chaos, names)
    finish(start_app(kaas_cluster, source, sink, group, txn_id))
    assert sum(crash.hits().values()) == 1, f"the coordinator did not crash in EndTxn once: {crash.hits()}"
    verdict = exactly_once(kaas_cluster.client_config(), source, sink, group=group,
                           input_id=order_id, output_id=order_id)
    verdict.assert_ok()
    assert verdict.output_records == ORDERS


def test_aiokafka_app_is_exactly_once_too(kaas_cluster, chaos, names):
    from app_aio import run

    source, sink, group, txn_id = names
    crash = seed_and_arm(kaas_cluster, chaos, names)
    asyncio.run(asyncio.wait_for(run(kaas_cluster.bootstrap, source, sink, group, txn_id, idle=1.0), 90))
    assert sum(crash.hits().values()) == 1, crash.hits()
    exactly_once(kaas_cluster.client_config(), source, sink, group=group,
                 input_id=order_id, output_id=order_id).assert_ok()


def test_the_broken_app_is_caught_copying_orders_twice(kaas_cluster, names):
    """The app with offsets committed outside the transaction, SIGKILLed once its first
    transactions committed (before its consumer's auto-commit) and started again: the
    verdict fails, naming the orders copied twice."""
    source, sink, group, txn_id = names
    seed(kaas_cluster.client_config(), source)
    app = start_app(kaas_cluster, source, sink, group, txn_id, "--broken")
    from kaas.testing.verify import end_offsets

    deadline = time.monotonic() + 60
    while max(lso for lso, _hw in end_offsets(kaas_cluster.client_config(), sink).values()) == 0:
        assert time.monotonic() < deadline and app.poll() is None, "the app committed nothing"
        time.sleep(0.02)
    app.send_signal(signal.SIGKILL)
    app.wait()
    finish(start_app(kaas_cluster, source, sink, group, txn_id, "--broken"))
    verdict = exactly_once(kaas_cluster.client_config(), source, sink, group=group,
                           input_id=order_id, output_id=order_id)
    assert not verdict.ok
    assert verdict.duplicates and verdict.report.duplicate_count > 0
    assert not verdict.lost
    with pytest.raises(AssertionError, match="duplicate: "):
        verdict.assert_ok()
    print("\n".join(verdict.violations(limit=5)))
