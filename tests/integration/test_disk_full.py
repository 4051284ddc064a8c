"""A full or failing disk never loses an acknowledged write (issue 17), end to end: a real
broker process, an unmodified idempotent librdkafka producer with acks=all, reads with
CRC checks on (kafka-python), a SIGKILL and a restart.

The disk faults come from the storage seam's failpoints (ENOSPC, EIO, short writes), so
they run anywhere; the issue's own reproduction also runs on a real, small tmpfs mount
when the test may mount one (root), and is skipped with the reason otherwise.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from confluent_kafka import Producer

from kaas import failpoints
from kaas.testing import BrokerProcess
from tests.integration.test_durability import read_partitions
from tests.kafka import create_topic
from tests.tools import missing

pytestmark = pytest.mark.slow

RECORD = 10_000  # the 10 KB records


def _producer(bootstrap: str, timeout_ms: int = 60_000) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                     "message.timeout.ms": timeout_ms, "linger.ms": 5, "retry.backoff.ms": 100,
                     "retry.backoff.max.ms": 500})


def _value(i: int) -> bytes:
    head = f"record-{i:06d}-".encode()
    return head + bytes((i + k) % 251 for k in range(RECORD - len(head)))


class Deliveries:
    """The delivery reports of one producer: what was acknowledged, at which offset."""

    def __init__(self) -> None:
        self.acked: dict[bytes, int] = {}
        self.failed: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, err, msg) -> None:
        with self.lock:
            if err is None:
                self.acked[msg.value()] = msg.offset()
            else:
                self.failed.append(err.str())


def _produce(p: Producer, d: Deliveries, topic: str, values: list[bytes]) -> None:
    for v in values:
        while True:
            try:
                p.produce(topic, v, partition=0, on_delivery=d)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)


def _check_acked_readable(bootstrap: str, topic: str, acked: dict[bytes, int]) -> list[bytes]:
    """Every acknowledged record is read back (CRCs checked) at its offset, byte for byte;
    offsets are dense from 0 and no value appears twice. Returns the values in order."""
    recs = read_partitions(bootstrap, topic, 1)[0]
    values = [v for _o, _k, v in recs]
    assert len(set(values)) == len(values), "a record was written twice"
    at = {o: v for o, _k, v in recs}
    for value, offset in acked.items():
        assert at.get(offset) == value, f"acknowledged record at offset {offset} lost or changed"
    return values


def _arm(broker: BrokerProcess, specs: dict) -> None:
    failpoints.arm(broker.data / "run", broker.broker_id, specs)
    time.sleep(0.5)  # the broker re-reads its failpoint file every 200 ms


@pytest.mark.parametrize("spec", [
    {"append.write": {"action": "short", "fraction": 0.5}},
    {"append.write": {"action": "error", "errno": "ENOSPC"}},
])
def test_append_failures_answer_storage_error_and_lose_nothing(broker, spec):
    """While every append fails (half-written, or refused), nothing is acknowledged and the
    connection stays up; once writes succeed, the producer's retries land after the good
    bytes, and every acknowledged record survives a SIGKILL and a restart."""
    topic = "disk-full-append"
    create_topic(broker.bootstrap, topic, 1)
    p = _producer(broker.bootstrap)
    d = Deliveries()
    _produce(p, d, topic, [_value(i) for i in range(100)])
    assert p.flush(30) == 0 and len(d.acked) == 100
    _arm(broker, spec)
    _produce(p, d, topic, [_value(i) for i in range(100, 160)])
    p.flush(3)
    assert len(d.acked) == 100, "a record was acknowledged while every append failed"
    failpoints.disarm(broker.data / "run", broker.broker_id)
    assert p.flush(60) == 0
    assert len(d.acked) == 160 and not d.failed
    values = _check_acked_readable(broker.bootstrap, topic, d.acked)
    assert values == [_value(i) for i in range(160)]
    log = broker.log_text()
    assert "request_failed" not in log
    broker.kill()
    broker.start()
    assert _check_acked_readable(broker.bootstrap, topic, d.acked) == values


def test_failed_fsync_takes_the_partition_offline_and_recovery_brings_it_back(broker):
    """A failed fsync is never retried as a success: the partition goes offline
    (KAFKA_STORAGE_ERROR), is reopened through recovery, and the producer's retries land."""
    topic = "disk-fsync-eio"
    other = "disk-fsync-other"
    create_topic(broker.bootstrap, topic, 1)
    create_topic(broker.bootstrap, other, 1)
    p = _producer(broker.bootstrap)
    d = Deliveries()
    _produce(p, d, topic, [_value(i) for i in range(50)])
    assert p.flush(30) == 0
    _arm(broker, {"append.fsync": {"action": "error", "errno": "EIO", "count": 1, "path": topic}})
    _produce(p, d, topic, [_value(i) for i in range(50, 120)])
    assert p.flush(60) == 0
    assert len(d.acked) == 120 and not d.failed
    # the broker kept serving its other partitions
    q = _producer(broker.bootstrap)
    od = Deliveries()
    _produce(q, od, other, [b"other-%d" % i for i in range(10)])
    assert q.flush(30) == 0 and len(od.acked) == 10
    log = broker.log_text()
    assert "partition_offline" in log and "partition_back_online" in log
    values = _check_acked_readable(broker.bootstrap, topic, d.acked)
    assert sorted(values) == sorted(_value(i) for i in range(120))
    broker.kill()
    broker.start()
    assert _check_acked_readable(broker.bootstrap, topic, d.acked) == values


# ----------------------------------------------------------------------------- real tmpfs


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 12 MiB tmpfs mounted on a temporary directory (root only), grown with remount."""
    mnt = tmp_path / "vol"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(mnt)], check=True,
                       capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        missing(f"cannot mount a tmpfs here ({exc}; {detail.decode(errors='replace').strip()}): run as root; "
                "the failpoint tests above cover the same paths")

    def grow(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], check=True, timeout=10)

    try:
        yield mnt, grow
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=10)


def test_full_tmpfs_fill_free_produce_kill_restart(small_tmpfs):
    """The issue's reproduction: fill the volume, free space, produce again with the same
    producer code, read under check.crcs, SIGKILL, restart, read again."""
    mnt, grow = small_tmpfs
    b = BrokerProcess(mnt / "data", extra=["--num-partitions", "1"]).start()
    try:
        topic = "disk-full-real"
        create_topic(b.bootstrap, topic, 1)
        d = Deliveries()
        p = _producer(b.bootstrap, timeout_ms=6_000)
        _produce(p, d, topic, [_value(i) for i in range(1500)])  # 15 MB into 12 MiB
        p.flush(30)
        filled = len(d.acked)
        assert 0 < filled < 1500 and d.failed, (filled, len(d.failed))
        grow("40m")  # an operator frees space
        p2 = _producer(b.bootstrap)
        _produce(p2, d, topic, [_value(i) for i in range(2000, 2300)])
        assert p2.flush(60) == 0
        assert all(_value(i) in d.acked for i in range(2000, 2300))
        values = _check_acked_readable(b.bootstrap, topic, d.acked)
        assert "request_failed" not in b.log_text()
        b.kill()
        b.start()
        assert _check_acked_readable(b.bootstrap, topic, d.acked) == values
    finally:
        b.kill()


def test_an_offline_partition_answers_storage_error_until_its_disk_works(broker):
    """While every fsync of one partition fails, its reopen through recovery fails too: it
    stays offline, and Produce and Fetch of it answer KAFKA_STORAGE_ERROR while another
    partition of the broker serves normally; once fsyncs succeed it comes back by itself
    with everything acknowledged before."""
    from kio.schema.errors import ErrorCode

    from kaas.client import WireClient
    from kaas.wire.batch import build_batch

    topic, other = "disk-offline", "disk-online"
    create_topic(broker.bootstrap, topic, 1)
    create_topic(broker.bootstrap, other, 1)

    def produce(wc, name):
        r = wc.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": name, "partition_data": [{"index": 0, "records": build_batch(records=[(None, b"v")])}]}]})
        return r.responses[0].partition_responses[0].error_code

    def fetch(wc, name):
        r = wc.call(1, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                            "forgotten_topics_data": [], "topics": [{"topic": name, "partitions": [
                                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                 "current_leader_epoch": -1, "log_start_offset": -1}]}]})
        return r.responses[0].partitions[0].error_code

    with WireClient("127.0.0.1", broker.port) as wc:
        assert produce(wc, topic) == ErrorCode.none
        _arm(broker, {"append.fsync": {"action": "error", "errno": "EIO", "path": f"/{topic}/"}})
        assert produce(wc, topic) == ErrorCode.kafka_storage_error  # the failed fsync: offline
        time.sleep(1.2)  # the runtime's reopen fails too (recovery's fsync): still offline
        assert produce(wc, topic) == ErrorCode.kafka_storage_error
        assert fetch(wc, topic) == ErrorCode.kafka_storage_error
        assert produce(wc, other) == ErrorCode.none and fetch(wc, other) == ErrorCode.none
        failpoints.disarm(broker.data / "run", broker.broker_id)
        deadline = time.monotonic() + 10
        while produce(wc, topic) != ErrorCode.none:
            assert time.monotonic() < deadline, "the partition did not come back"
            time.sleep(0.2)
        assert fetch(wc, topic) == ErrorCode.none
    log = broker.log_text()
    assert log.count("partition_offline") == 1 and "partition_back_online" in log
    assert "request_failed" not in log
