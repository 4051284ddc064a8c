"""file.delete.delay.ms on a real broker: a segment that retention deletes leaves the log at
once (the low watermark moves, fetches start there) but stays on the volume as a
``*.deleted`` file, listed by ``kaas inspect log``, until the delay passed; then the
leader's sweep removes it. A deleted topic's directory waits the same way (the
controller's sweep). The assertions poll for the conditions; none times the delay."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from kaas.cli import cli
from kaas.testing import wait_for
from tests.fixtures import broker_fixture
from tests.kafka import uniq, watermarks

pytestmark = pytest.mark.slow

DELAY_MS = 3000

broker = broker_fixture(scope="module", name="delete-delay", extra=["--retention-check-ms", "200"])


def inspect(*args: str) -> dict:
    res = CliRunner().invoke(cli, ["inspect", *args, "--json"])
    assert res.exit_code == 0, (args, res.output, res.exception)
    return json.loads(res.stdout)


def deleted(path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.endswith(".deleted")) if path.exists() else []


def first_offset(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uniq("dd"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0)])
        msg = wait_for(lambda: (lambda m: m if m is not None and m.error() is None else None)(c.poll(0.5)), 15,
                       "a record")
        return msg.offset()
    finally:
        c.close()


def test_deleted_segments_and_topics_wait_out_the_delay(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = uniq("delay")
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "segment.bytes": "1024", "file.delete.delay.ms": str(DELAY_MS)})])[topic].result(15)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
    for i in range(6):  # two batches a segment: three segments; a recent last record keeps the active one
        p.produce(topic, value=b"x" * 450, partition=0, timestamp=0 if i == 5 else 1_000_000_000_000 + i)
        assert p.flush(15) == 0
    pdir = broker.data / "data" / topic / "0"
    live_before = sorted(f.name for f in pdir.glob("*.log"))

    # retention (set now) drops the closed segments from the log at once ...
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={
        "segment.bytes": "1024", "file.delete.delay.ms": str(DELAY_MS), "retention.ms": "60000"})
    admin.alter_configs([res])[res].result(15)
    low = wait_for(lambda: watermarks(broker.bootstrap, topic, 0)[0] or None, 15, "retention")
    assert first_offset(broker.bootstrap, topic) == low
    # ... and their files wait on the volume, under their due names, listed by kaas inspect
    waiting = deleted(pdir)
    assert waiting and all(f.split(".")[0] in {n[:-4] for n in live_before} for f in waiting)
    log = inspect("log", topic, "0", "--data", str(broker.data))
    assert sorted(e["file"] for e in log["pending_deletion"]) == waiting
    assert all(not s["file"].endswith(".deleted") for s in log["segments"])
    # then the leader's sweep removes them
    wait_for(lambda: not deleted(pdir), 20, "the delayed deletion")

    # a deleted topic's directory waits too (the controller sweeps it)
    assert admin.delete_topics([topic])[topic].result(15) is None
    assert not (broker.data / "data" / topic).exists()
    pending = inspect("cluster", "--data", str(broker.data))["deleted_topics"]
    assert [d["directory"] for d in pending if d["directory"].startswith(f".{topic}.deleted-")]
    wait_for(lambda: not [d for d in (broker.data / "data").iterdir() if d.name.startswith(f".{topic}.")], 20,
             "the deleted topic's directory removed")
