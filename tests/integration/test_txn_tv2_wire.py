"""transaction.version 2 on a real ``kaas`` broker, over raw kio requests (the client form of
AddPartitionsToTxn, so no Produce v12 is needed): a new broker finalizes level 2 and serves
EndTxn v5; 300 transactions raise the epoch by one each, seen by EndTxn's answers,
DescribeProducers, ``kaas txn describe`` and ``kaas inspect slots``; a late batch of a
finished transaction is refused; a retry at the previous epoch gets the same answer; a
transaction open while ``kaas features downgrade`` runs ends as it began; the EndTxn
requests are counted by version on the metrics endpoint.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from click.testing import CliRunner
from kio.schema.errors import ErrorCode

from kaas.cli import cli
from kaas.client import WireClient
from kaas.testing.procs import free_port, wait_for
from kaas.wire import batch as wb
from tests.fixtures import broker_fixture
from tests.kafka import create_topic

pytestmark = pytest.mark.slow

METRICS_PORT = free_port()
tv2broker = broker_fixture(scope="module", name="tv2broker", extra=["--metrics-port", str(METRICS_PORT)],
                           doc="One broker with its metrics endpoint (EndTxn counted by version).")
TOPIC = "tv2-wire"


def run(*args: str) -> dict:
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.fixture(scope="module")
def wc(tv2broker):
    create_topic(tv2broker.bootstrap, TOPIC, 2)
    with WireClient("127.0.0.1", tv2broker.port) as c:
        yield c


def init(wc: WireClient, txn_id: str) -> tuple[int, int]:
    r = wc.call(22, 5, {"transactional_id": txn_id, "transaction_timeout": 60_000, "producer_id": -1,
                        "producer_epoch": -1})
    assert r.error_code == ErrorCode.none
    return r.producer_id, r.producer_epoch


def add(wc: WireClient, txn_id: str, pid: int, epoch: int, partitions=(0, 1)) -> ErrorCode:
    r = wc.call(24, 3, {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                        "v3_and_below_producer_epoch": epoch,
                        "v3_and_below_topics": [{"name": TOPIC, "partitions": list(partitions)}]})
    return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def produce(wc: WireClient, txn_id: str, pid: int, epoch: int, seq: int, value: str, partition: int = 0):
    raw = wb.build_batch(attributes=wb.ATTR_TRANSACTIONAL, base_timestamp=1000, producer_id=pid,
                         producer_epoch=epoch, base_sequence=seq, records=[(None, value.encode())])
    r = wc.call(0, 9, {"transactional_id": txn_id, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": partition, "records": raw}]}]})
    return r.responses[0].partition_responses[0].error_code


def end(wc: WireClient, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 5):
    r = wc.call(26, version, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                              "committed": commit})
    return (r.error_code, r.producer_id, r.producer_epoch) if version >= 5 else (r.error_code,)


def producer_epoch_on(wc: WireClient, pid: int, partition: int) -> int:
    r = wc.call(61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [partition]}]})
    part = r.topics[0].partitions[0]
    assert part.error_code == ErrorCode.none
    return next(p.producer_epoch for p in part.active_producers if p.producer_id == pid)


def end_txn_counts() -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        for ev in ("end_txn_tv1", "end_txn_tv2"):
            if line.startswith("kaas_txn_coordinator_events_total") and f'event="{ev}"' in line:
                out[ev] = float(line.rsplit(" ", 1)[1])
    return out


def test_a_new_broker_finalizes_tv2_and_serves_end_txn_v5(wc):
    r = wc.call(18, 3, {"client_software_name": "kaas-test", "client_software_version": "1"})
    assert {k.api_key: k.max_version for k in r.api_keys}[26] == 5
    assert {(f.name, f.max_version_level) for f in r.finalized_features} >= {("transaction.version", 2)}


def test_each_transaction_raises_the_epoch_by_one(wc, tv2broker):
    txn_id = "tv2-many"
    pid, epoch = init(wc, txn_id)
    first = epoch
    before = end_txn_counts()
    n = 300
    for i in range(n):
        assert add(wc, txn_id, pid, epoch) == ErrorCode.none
        assert produce(wc, txn_id, pid, epoch, 0, f"v{i}", partition=i % 2) == ErrorCode.none
        commit = i % 10 != 9
        assert end(wc, txn_id, pid, epoch, commit) == (ErrorCode.none, pid, epoch + 1)
        if i < 5 or i == n - 1:  # the partition written learns the new epoch from the marker
            # (written after the answer, as in Apache)
            wait_for(lambda e=epoch + 1, p=i % 2: producer_epoch_on(wc, pid, p) == e, timeout=10,
                     what="the marker's epoch on the partition")
        epoch += 1
    assert epoch == first + n
    d = run("txn", "describe", txn_id, "--bootstrap", tv2broker.bootstrap, "--json")
    assert (d["producer_id"], d["producer_epoch"]) == (pid, first + n)
    after = end_txn_counts()
    assert after["end_txn_tv2"] - before.get("end_txn_tv2", 0) == n
    assert after.get("end_txn_tv1", 0) == before.get("end_txn_tv1", 0)
    # a batch of the finished transaction, delivered late, is refused
    assert produce(wc, txn_id, pid, epoch - 1, 1, "late", partition=(n - 1) % 2) == \
        ErrorCode.invalid_producer_epoch
    # the retry of the last EndTxn (an abort) gets the same answer, a commit at its epoch is
    # fenced (a commit crossing a timeout abort, KAFKA-20785);
    # an older epoch is fenced
    assert end(wc, txn_id, pid, epoch - 1, False) == (ErrorCode.none, pid, epoch)
    assert end(wc, txn_id, pid, epoch - 1, True)[0] == ErrorCode.producer_fenced
    assert end(wc, txn_id, pid, epoch - 2, True)[0] == ErrorCode.producer_fenced
    assert end(wc, txn_id, pid + 1, epoch, True)[0] == ErrorCode.invalid_producer_id_mapping
    slots = run("inspect", "slots", "--data", str(tv2broker.data), "--json")
    [tx] = [x for s in slots["slots"] for x in s["transactions"] if x["transactional_id"] == txn_id]
    # (the Complete* state reaches the file with the slot's next write or the sweep)
    assert (tx["transaction_version"], tx["producer_epoch"]) == (2, epoch)
    assert tx["state"] in ("PrepareAbort", "CompleteAbort")


def test_a_transaction_open_at_a_downgrade_ends_as_it_began(wc, tv2broker):
    bs = tv2broker.bootstrap
    txn_id = "tv2-downgrade"
    pid, epoch = init(wc, txn_id)
    assert add(wc, txn_id, pid, epoch) == ErrorCode.none
    assert produce(wc, txn_id, pid, epoch, 0, "open") == ErrorCode.none
    res = CliRunner().invoke(cli, ["features", "downgrade", "--bootstrap", bs, "--feature", "transaction.version=1"])
    assert res.exit_code == 0, res.output
    try:
        def level() -> int:
            r = wc.call(18, 3, {"client_software_name": "kaas-test", "client_software_version": "1"})
            return {f.name: f.max_version_level for f in r.finalized_features}.get("transaction.version", 0)

        wait_for(lambda: level() == 1, timeout=15, what="transaction.version 1")
        # the client began under TV2 and ends with EndTxn v5: bumped, as it expects
        assert end(wc, txn_id, pid, epoch, True) == (ErrorCode.none, pid, epoch + 1)
        epoch += 1
        # its next transaction, begun under TV1, ends with v4: the epoch stays
        assert add(wc, txn_id, pid, epoch) == ErrorCode.none
        assert produce(wc, txn_id, pid, epoch, 0, "tv1") == ErrorCode.none
        assert end(wc, txn_id, pid, epoch, True, version=4) == (ErrorCode.none,)
        d = run("txn", "describe", txn_id, "--bootstrap", bs, "--json")
        assert (d["producer_epoch"], d["state"]) == (epoch, "CompleteCommit")
        slots = run("inspect", "slots", "--data", str(tv2broker.data), "--json")
        [tx] = [x for s in slots["slots"] for x in s["transactions"] if x["transactional_id"] == txn_id]
        assert tx["transaction_version"] == 1
    finally:
        res = CliRunner().invoke(cli, ["features", "upgrade", "--bootstrap", bs, "--feature", "transaction.version=2"])
        assert res.exit_code == 0, res.output
