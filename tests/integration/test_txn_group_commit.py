"""A broker killed between a slot write shared by two EndTxn requests and their answers
(failpoint ``slot.after_write``): neither client is answered, both decisions are on the
volume, and after the restart both transactions commit and become visible."""

from __future__ import annotations

import struct
import time

import pytest
from kio.schema.errors import ErrorCode

from kaas import failpoints
from kaas.client import WireClient, recv_exact
from kaas.domain.routing import txn_slot
from kaas.storage.paths import Layout
from kaas.testing import wait_for
from kaas.wire import batch as wb
from kaas.wire import codec
from kaas.wire.build import build
from tests.fixtures import broker_fixture
from tests.kafka import SWEEP_ENV, create_topic, ids_in_one_slot, read_to_end

pytestmark = pytest.mark.slow

fresh_broker = broker_fixture(env=SWEEP_ENV, doc="A broker of its own: the test kills it.")


def send(wc: WireClient, api: tuple[int, int], body: dict) -> None:
    """Send a request without waiting for its answer."""
    wc.corr += 1
    wc.sock.sendall(codec.encode_request(*api, wc.corr, "group-commit-test", build(codec.request_class(*api), body)))


def answer(wc: WireClient, api: tuple[int, int]):
    size = struct.unpack(">i", recv_exact(wc.sock, 4))[0]
    return codec.decode_response(*api, recv_exact(wc.sock, size))[1]


def test_a_kill_after_the_shared_write_answers_neither_and_loses_neither(fresh_broker):
    b = fresh_broker
    topic = "group-commit"
    create_topic(b.bootstrap, topic, 1)
    a, b_id, c = ids_in_one_slot(3, "shared")
    clients = {t: WireClient("127.0.0.1", b.port) for t in (a, b_id, c)}
    producers = {}
    for txn_id, wc in clients.items():
        r = wc.call(22, 4, {"transactional_id": txn_id, "transaction_timeout": 60_000,
                            "producer_id": -1, "producer_epoch": -1})
        assert r.error_code == ErrorCode.none
        producers[txn_id] = (r.producer_id, r.producer_epoch)

    def add(txn_id: str) -> dict:
        pid, epoch = producers[txn_id]
        return {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}

    for txn_id in (a, b_id):  # two open transactions with a record each
        wc = clients[txn_id]
        pid, epoch = producers[txn_id]
        send(wc, (24, 0), add(txn_id))
        answer(wc, (24, 0))
        records = wb.build_batch(attributes=wb.ATTR_TRANSACTIONAL, base_timestamp=int(time.time() * 1000),
                                 producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                 records=[(None, txn_id.encode())])
        send(wc, (0, 10), {"transactional_id": txn_id, "acks": -1, "timeout": 30_000,
                           "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
        assert answer(wc, (0, 10)).responses[0].partition_responses[0].error_code == ErrorCode.none

    # C's AddPartitions write pauses (after its batch was taken); the two EndTxn requests,
    # sent once it waits there, meanwhile wait for the next write, which carries both; the
    # broker dies right after it
    failpoints.arm(b.data / "run", b.broker_id, {
        "slot.before_write": {"action": "pause", "ms": 3000, "count": 1},
        "slot.after_write": {"action": "crash", "match": {"entries": 2}}})
    wait_for(lambda: "failpoints_armed" in b.log_text(), 10, "the failpoints read")
    send(clients[c], (24, 0), add(c))
    wait_for(lambda: "failpoint_hit" in b.log_text(), 10, "C's write paused")
    for txn_id in (a, b_id):
        pid, epoch = producers[txn_id]
        send(clients[txn_id], (26, 1), {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                        "committed": True})
    wait_for(lambda: b.proc.poll() is not None, 30, "the crash at slot.after_write")
    b.proc = None
    for txn_id in (a, b_id):  # not answered: the connection ends with no bytes
        clients[txn_id].sock.settimeout(5)
        assert clients[txn_id].sock.recv(1) == b""
    assert answer(clients[c], (24, 0)).results_by_topic_v3_and_below[0].results_by_partition[0] \
        .partition_error_code == ErrorCode.none  # C's write went out before the shared one
    # both decisions are on the volume
    slot_file = Layout(b.data).txn_state / f"slot-{txn_slot(a)}.json"
    assert slot_file.read_text().count('"state":"PrepareCommit"') == 2
    # the restarted coordinator finishes both: each transaction's record is visible
    b.start()
    msgs = wait_for(lambda: read_to_end(b.bootstrap, topic, 1, "read_committed") or None, 30, "committed records")
    assert sorted(m.value() for m in msgs) == sorted([a.encode(), b_id.encode()])
    for wc in clients.values():
        wc.close()
