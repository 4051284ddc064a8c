"""Offset retention on a real 3-broker cluster (issue 48): with a short retention (the test
setting ``KAAS_OFFSETS_RETENTION_MS``, standing in for ``offsets.retention.minutes = 1``)
and a 1 s check, a group that committed and then stayed empty longer than the retention has
no offsets and is gone from ``kaas groups list``, while a group that stayed active keeps
its offsets; the group's coordinator is killed in between, which changes neither."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer

from kaas.coord.group.expiry import RETENTION_ENV
from kaas.testing import cluster
from kaas.testing.clusters import TEST_BROKER_ARGS
from kaas.testing.verify import committed_offsets
from tests.integration.test_tools import run as run_tool

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

RETENTION_S = 15.0
CHECK_MS = 1000
NONE = -1001  # confluent-kafka's OFFSET_INVALID: nothing committed


def consumer(c, group: str, topic: str) -> Consumer:
    cons = Consumer(c.client_config(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=6000, heartbeat_interval_ms=500))
    cons.subscribe([topic])
    return cons


def consume_and_commit(cons: Consumer, n: int, timeout: float = 30.0) -> None:
    got = 0
    deadline = time.monotonic() + timeout
    while got < n:
        assert time.monotonic() < deadline, f"consumed {got} of {n}"
        m = cons.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
    cons.commit(asynchronous=False)


def listed(bootstrap: str) -> set[str]:
    return {g["group_id"] for g in run_tool("groups", "list", "--bootstrap", bootstrap)}


def test_an_empty_groups_offsets_expire_an_active_ones_stay_and_a_kill_changes_neither():
    args = (*TEST_BROKER_ARGS, "--offsets-retention-check-interval-ms", str(CHECK_MS))
    with cluster(brokers=3, broker_args=args, env={RETENTION_ENV: str(int(RETENTION_S * 1000))}) as c:
        topic = c.create_topic(c.unique("ret"), 2)
        p = Producer(c.client_config())
        for i in range(20):
            p.produce(topic, value=b"v%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        gone, active = c.unique("gone"), c.unique("active")

        stay = consumer(c, active, topic)
        consume_and_commit(stay, 20)
        stop = threading.Event()

        def keep_polling() -> None:  # the active group: its member stays, heartbeating
            while not stop.is_set():
                stay.poll(0.2)

        poller = threading.Thread(target=keep_polling, daemon=True)
        poller.start()
        try:
            leave = consumer(c, gone, topic)
            consume_and_commit(leave, 20)
            leave.close()  # LeaveGroup: Empty from now
            emptied = time.monotonic()
            conf = c.client_config()
            assert committed_offsets(conf, gone, topic, [0, 1]) == {0: 10, 1: 10}

            # the coordinator of the empty group dies, and its successor must not restart the clock
            victim = c.coordinator_of(group_id=gone)
            victim.kill()
            victim.restart()
            c.wait_healthy()
            assert time.monotonic() - emptied < RETENTION_S - 2, "too slow to see the offsets before expiry"
            assert committed_offsets(conf, gone, topic, [0, 1]) == {0: 10, 1: 10}
            assert gone in listed(c.bootstrap)

            deadline = emptied + RETENTION_S + 3 * CHECK_MS / 1000 + 5
            while gone in listed(c.bootstrap):
                assert time.monotonic() < deadline, "the empty group outlived its retention"
                time.sleep(0.2)
            expired_after = time.monotonic() - emptied
            assert expired_after >= RETENTION_S - 0.5  # not earlier than the retention either
            assert committed_offsets(conf, gone, topic, [0, 1]) == {0: NONE, 1: NONE}
            # the active group, long past the retention since its commit, keeps its offsets
            assert active in listed(c.bootstrap)
            assert committed_offsets(conf, active, topic, [0, 1]) == {0: 10, 1: 10}
        finally:
            stop.set()
            poller.join(10)
            stay.close()
        log = "".join(b.log_text() for b in c.brokers)
        assert log.count("group_offsets_expired") >= 1 and gone in log
        assert sum(1 for line in log.splitlines() if "group_offsets_expired" in line and gone in line) == 1
