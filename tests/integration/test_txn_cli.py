"""`kaas txn list|describe|abort` (``kaas.tools.txn``) against a real broker, asserting on
--json output, the human tables and the errors."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaException, Producer

from kaas.cli import cli

pytestmark = pytest.mark.slow


def run(*args):
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_list_describe_abort(broker):
    bs = broker.bootstrap
    p = Producer({"bootstrap.servers": bs, "transactional.id": "cli-txn", "transaction.timeout.ms": 60000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("cli-topic", value=b"pending", partition=0)
    p.flush(10)
    rows = run("txn", "list", "--bootstrap", bs, "--json")
    mine = [r for r in rows if r["transactional_id"] == "cli-txn"]
    assert mine and mine[0]["state"] == "Ongoing" and mine[0]["coordinator"] == 0
    d = run("txn", "describe", "cli-txn", "--bootstrap", bs, "--json")
    assert d["state"] == "Ongoing" and d["partitions"] == ["cli-topic-0"] and d["timeout_ms"] == 60000
    assert d["start_time_ms"] > 1_600_000_000_000 and d["coordinator"] == bs
    human = CliRunner().invoke(cli, ["txn", "describe", "cli-txn", "--bootstrap", bs])
    assert human.exit_code == 0, human.output
    assert "state            Ongoing" in human.output and "partitions       cli-topic-0" in human.output
    human = CliRunner().invoke(cli, ["txn", "list", "--bootstrap", bs])
    assert human.exit_code == 0 and "cli-txn" in human.output and "Ongoing" in human.output
    out = run("txn", "abort", "cli-txn", "--bootstrap", bs, "--json")
    assert out["aborted"] and out["producer_epoch"] >= 1
    d = run("txn", "describe", "cli-txn", "--bootstrap", bs, "--json")
    assert d["state"] in ("Empty", "CompleteAbort") and d["partitions"] == []
    assert isinstance(d["start_time_ms"], int)  # -1 (no transaction) when Empty: kio alone refuses it
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": "cli-v", "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    c.assign([TopicPartition("cli-topic", 0, 0)])
    got = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            break  # end of partition: the aborted record was skipped
        got.append(m.value())
    c.close()
    assert got == []
    assert [r for r in run("txn", "list", "--bootstrap", bs, "--json", "--state", "Ongoing")
            if r["transactional_id"] == "cli-txn"] == []


def test_describe_of_an_unknown_id_fails_with_its_error_code(broker):
    res = CliRunner().invoke(cli, ["txn", "describe", "no-such-txn", "--bootstrap", broker.bootstrap])
    assert res.exit_code == 1 and "no-such-txn: TRANSACTIONAL_ID_NOT_FOUND" in res.output, res.output
