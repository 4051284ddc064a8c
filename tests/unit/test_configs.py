"""kaas.configs: validation of the values kaas honours only in part, and the per-topic
batch limit (the walk over every key is tests/integration/test_topic_configs.py)."""

from __future__ import annotations

import uuid

import pytest

from kaas import configs
from kaas.settings import Settings
from kaas.storage.topics import TopicMeta


def meta(**overrides: str) -> TopicMeta:
    return TopicMeta("t", uuid.uuid4(), 1, dict(overrides))


def test_max_message_bytes_is_the_topic_override_else_the_broker_setting():
    s = Settings(message_max_bytes=5000)
    assert configs.max_message_bytes(s, None) == 5000
    assert configs.max_message_bytes(s, meta()) == 5000
    assert configs.max_message_bytes(s, meta(**{"max.message.bytes": "123"})) == 123
    assert configs.max_message_bytes(s, meta(**{"max.message.bytes": "9000000"})) == 9000000


@pytest.mark.parametrize(("name", "value", "error"), [
    ("compression.type", "producer", None),
    ("compression.type", "gzip", None),
    ("compression.type", "uncompressed", None),
    ("compression.gzip.level", "-1", None),
    ("compression.gzip.level", "0", "between 1 and 9 or -1"),
    ("compression.lz4.level", "17", None),
    ("compression.lz4.level", "18", "between 1 and 17"),
    ("compression.zstd.level", "-131072", None),
    ("compression.zstd.level", "23", "between -131072 and 22"),
    ("message.timestamp.after.max.ms", "0", None),
    ("message.timestamp.before.max.ms", "-1", "must not be negative"),
    ("compression.type", "brotli", "must be one of"),
    ("file.delete.delay.ms", "0", None),
    ("file.delete.delay.ms", "+0", None),
    ("file.delete.delay.ms", "60000", None),
    ("file.delete.delay.ms", "-1", "must not be negative"),
    ("flush.messages", str(2**63 - 1), None),
    ("flush.messages", "1", None),
    ("flush.messages", "0", "at least 1"),
    ("flush.ms", "1000", None),
    ("flush.ms", "-1", "at least 0"),
    ("flush.ms", str(2**63), "must be between"),
    ("unclean.leader.election.enable", "TRUE", None),
    ("unclean.leader.election.enable", "yes", "true or false"),
    ("segment.bytes", "14", None),
    ("segment.bytes", "13", "at least 14"),
    ("segment.bytes", str(2**31), "must be between"),
    ("index.interval.bytes", "1_000", "must be an integer"),
    ("retention.ms", "-1", None),
    ("retention.ms", "-2", "at least -1"),
    ("retention.bytes", "-5", None),
    ("max.message.bytes", "-1", "at least 0"),
])
def test_validate(name, value, error):
    got = configs.validate(name, value)
    assert (got is None) if error is None else (got is not None and error in got), got


def test_every_default_is_valid_and_documented():
    s = Settings()
    for name in configs.TOPIC_CONFIGS:
        assert configs.validate(name, configs.default(s, name)) is None, name
        assert configs.HOW.get(name), name
