"""The batch validator at the handler level (``handlers.produce`` on an in-process broker):
a batch whose header fields are mutated is either refused with the code the validator
gives (and nothing is appended: the log end offset does not move) or appended as the
normalised batch (true max timestamp, valid CRC, the records read back one by one).

A seeded random walk over the mutations of tests/unit/test_validate.py's property (the
broker is started once; hypothesis would start one per example)."""

from __future__ import annotations

import random
import struct

from kio.schema.errors import ErrorCode

from kaas.clock import wall_ms
from kaas.wire import batch as wb
from kaas.wire import validate as wv
from tests.component.test_coordinator_disk_faults import started_broker
from tests.component.test_log_append_time import open_topic, produce_one
from tests.unit.test_validate import FIELDS, batch, read_back, recrc

HOUR = 3_600_000


def _mutated(rnd: random.Random, now: int) -> bytes:
    recs = [(rnd.choice([None, b"k%d" % i]), b"v%d" % i * rnd.randrange(1, 20), [], rnd.randrange(-5, 50))
            for i in range(rnd.randrange(1, 6))]
    offsets = [0] * len(recs) if rnd.random() < 0.2 else None
    buf = bytearray(batch(recs, codec=rnd.randrange(5), offsets=offsets, base_ts=now - 1000))
    for _ in range(rnd.randrange(0, 3)):
        name = rnd.choice(sorted(FIELDS))
        at, fmt = FIELDS[name]
        if name == "attributes":
            value = rnd.randrange(0, 0x40)
        elif name in ("base_timestamp", "max_timestamp"):
            value = rnd.choice([-1, 0, now, now - 2 * HOUR, now + 2 * HOUR, rnd.randrange(-(2**63), 2**63)])
        elif fmt == ">q":
            value = rnd.choice([-1, 0, 1, 5, rnd.randrange(-(2**63), 2**63)])
        else:
            bits = {">i": 31, ">h": 15, ">b": 7}[fmt]
            value = rnd.choice([-1, 0, 1, 2, 3, 100, rnd.randrange(-(2**bits), 2**bits)])
        struct.pack_into(fmt, buf, at, value)
    return recrc(buf) if rnd.random() < 0.9 else bytes(buf)


async def test_mutated_batches_are_refused_whole_or_stored_normalised(tmp_path):
    broker = await started_broker(tmp_path)
    parts = {name: await open_topic(broker, name, cfg) for name, cfg in
             [("plain", {}), ("gz", {"compression.type": "gzip"}), ("compact", {"cleanup.policy": "compact"})]}
    policies = {"plain": wv.Policy(max_size=broker.settings.message_max_bytes),
                "gz": wv.Policy(max_size=broker.settings.message_max_bytes, codec=1),
                "compact": wv.Policy(max_size=broker.settings.message_max_bytes, compact=True)}
    rnd = random.Random(31)
    outcomes = {"refused": 0, "stored": 0}
    for _ in range(300):
        topic = rnd.choice(sorted(parts))
        part = parts[topic]
        raw = _mutated(rnd, wall_ms())
        end = part.high_watermark
        out = await produce_one(broker, topic, raw, acks=1)
        if raw[22] & wb.ATTR_TRANSACTIONAL:  # no transactional id: the request is refused whole, as Apache
            assert out["error_code"] == ErrorCode.transactional_id_authorization_failed
            assert part.high_watermark == end
            continue
        try:
            expected, _h = wv.validate(raw, policies[topic], wall_ms())
        except wb.BatchError as exc:
            assert out["error_code"] == exc.code, (out, exc.reason)
            assert part.high_watermark == end  # nothing appended
            outcomes["refused"] += 1
            continue
        assert out["error_code"] == ErrorCode.none and out["base_offset"] == end, out
        stored = bytes(part.read(end, 1 << 20, part.high_watermark).records)
        h = wb.parse_header(stored)
        assert h.size == len(stored) and wb.crc_ok(stored, 0, h)
        assert stored[16:] == expected[16:]  # the normalised batch, only base offset and epoch patched
        assert [r[2:] for r in read_back(stored)] == [r[2:] for r in read_back(raw)]
        outcomes["stored"] += 1
    assert min(outcomes.values()) > 30, outcomes  # both sides of the property were exercised


async def test_produce_to_a_missing_topic_creates_nothing(tmp_path):
    """Only Metadata auto-creates topics (as Apache): a Produce to a topic that does not
    exist answers UNKNOWN_TOPIC_OR_PARTITION, with auto-creation on, and makes no topic."""
    broker = await started_broker(tmp_path)
    assert broker.settings.auto_create_topics
    out = await produce_one(broker, "never-made", batch([(b"k", b"v", [], 0)]), acks=-1)
    assert out["error_code"] == ErrorCode.unknown_topic_or_partition
    broker.topics.refresh()
    assert broker.topics.get("never-made") is None
