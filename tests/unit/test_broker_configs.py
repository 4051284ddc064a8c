"""Dynamic broker configs (KIP-226) without a broker: the table is consistent with the
Settings, topic configs and options it names; Apache's validation order and messages; the
layering (per broker over default, synonyms hiding each other); the Settings a broker runs
with; DescribeConfigs' sources and synonyms."""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas import broker_configs, configs
from kaas.domain import broker_configs as dyn
from kaas.settings import Settings

FIELDS = {f.name for f in fields(Settings)}


def test_the_tables_name_real_settings_and_topic_configs():
    for name, key in dyn.DYNAMIC.items():
        assert key.type in dyn.TYPES, name
        assert key.route in (dyn.SETTING, dyn.TOPIC, dyn.NONE, dyn.REFUSED), name
        if key.route == dyn.SETTING and key.target:
            assert key.target in FIELDS, name
        if key.route == dyn.TOPIC:
            assert key.target in configs.TOPIC_CONFIGS or key.target in configs.NOT_TAKEN, name
        if key.route in (dyn.NONE, dyn.REFUSED) or key.only:
            assert key.why, name
    for topic in dyn.TOPIC_OF.values():
        assert topic in configs.TOPIC_CONFIGS or topic in configs.NOT_TAKEN
    for _name, (_kind, field) in broker_configs.STATIC.items():
        assert field in FIELDS
    assert not set(configs.NOT_TAKEN) & set(configs.TOPIC_CONFIGS), "a key kaas takes is not 'not taken'"
    assert not broker_configs.READ_ONLY & set(dyn.DYNAMIC)


@pytest.mark.parametrize(("layer", "per_broker", "error", "message"), [
    ({"num.partitions": "3"}, True, "invalid_request", "Cannot update these configs dynamically: Set(num.partitions)"),
    # not dynamic in Apache 4.2 (its range, 2..10, is refused at start: test_group_configs)
    ({"group.share.delivery.count.limit": "0"}, False, "invalid_request",
     "Cannot update these configs dynamically: Set(group.share.delivery.count.limit)"),
    ({"group.share.delivery.count.limit": "1000"}, True, "invalid_request", "Cannot update these configs dynamically"),
    ({"no.such": "1"}, True, "invalid_config", "Unknown broker configs Set(no.such)"),
    ({"ssl.truststore.location": "/x"}, True, "invalid_request",
     "only per-listener using the listener prefix: Set(ssl.truststore.location)"),
    ({"log.retention.ms": "1h"}, False, "invalid_request",
     "Invalid value 1h for configuration log.retention.ms: Not a number of type LONG"),
    ({"unclean.leader.election.enable": "yes"}, False, "invalid_request", "either true or false"),
    ({"sasl.kerberos.service.name": "kafka"}, False, "invalid_request",
     "Cannot update these configs at default cluster level, broker id must be specified: "
     "Set(sasl.kerberos.service.name)"),
    ({"listener.name.plain.ssl.client.auth": "required"}, False, "invalid_request", "broker id must be specified"),
    ({"listeners": "PLAINTEXT://:1"}, True, "invalid_config", "cannot be changed while kaas runs"),
    ({"listener.name.plain.sasl.enabled.mechanisms": "PLAIN"}, True, "invalid_config", "not per listener"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, True, "invalid_config", "kaas serves"),
    ({"transaction.partition.verification.enable": "false"}, False, "invalid_config", "always verifies"),
    ({"log.retention.ms": "-2"}, False, "invalid_config", "at least -1"),
    ({"min.insync.replicas": "0"}, False, "invalid_config", "Value must be at least 1"),
    ({"log.cleaner.min.cleanable.ratio": "1.5"}, False, "invalid_config", "between 0 and 1"),
    ({"log.flush.interval.messages": "0"}, False, "invalid_config", "flush.messages"),
])
def test_refusals(layer, per_broker, error, message):
    got = broker_configs.validate(layer, per_broker=per_broker)
    assert got is not None and got.error == error and message in got.message, got


@pytest.mark.parametrize("layer", [
    {"sasl.kerberos.min.time.before.relogin": "58000"},  # librdkafka 0081
    {"log.retention.hours": "2", "log.cleanup.policy": "compact,delete", "message.max.bytes": "2000"},
    {"num.io.threads": "16", "max.connections": "100", "metric.reporters": ""},
    {"listener.name.plain.max.connections": "10"},
    {"transaction.partition.verification.enable": "true", "sasl.enabled.mechanisms": "SCRAM-SHA-512"},
    {},
])
def test_accepted_per_broker(layer):
    assert broker_configs.validate(layer, per_broker=True) is None


def test_a_broker_key_hides_the_defaults_synonyms():
    default = {"log.retention.ms": "1000", "log.cleanup.policy": "compact"}
    mine = {"log.retention.hours": "2"}
    assert dyn.merge(default, mine) == {"log.cleanup.policy": ("compact", dyn.SOURCE_DYNAMIC_DEFAULT),
                                        "log.retention.hours": ("2", dyn.SOURCE_DYNAMIC_BROKER)}
    s = broker_configs.effective(Settings(), default, mine)
    assert s.retention_ms == 2 * 3_600_000
    assert s.topic_defaults == {"cleanup.policy": "compact"}
    assert configs.default(s, "cleanup.policy") == "compact" and configs.default(s, "retention.ms") == "7200000"
    # within one layer the first synonym wins
    s = broker_configs.effective(Settings(), {"log.retention.hours": "1", "log.retention.ms": "5"}, {})
    assert s.retention_ms == 5


@given(st.dictionaries(st.sampled_from(["log.retention.ms", "log.retention.minutes", "log.retention.hours"]),
                       st.integers(0, 1000).map(str)),
       st.dictionaries(st.sampled_from(["log.retention.ms", "log.retention.minutes", "log.retention.hours"]),
                       st.integers(0, 1000).map(str)))
def test_resolution_is_the_first_synonym_of_the_winning_layer(default, mine):
    s = broker_configs.effective(Settings(), default, mine)
    layer = mine or default
    scale = {"log.retention.ms": 1, "log.retention.minutes": 60_000, "log.retention.hours": 3_600_000}
    if layer:
        first = next(n for n in ("log.retention.ms", "log.retention.minutes", "log.retention.hours") if n in layer)
        assert s.retention_ms == int(layer[first]) * scale[first]
    else:
        assert s.retention_ms == Settings().retention_ms


def test_describe_sources_and_synonyms():
    static = Settings(retention_check_ms=300, segment_bytes=2048)
    rows = {e["name"]: e for e in broker_configs.broker_entries(static, {"log.retention.ms": "10"},
                                                                 {"log.retention.hours": "1"})}
    assert (rows["log.retention.ms"]["value"], rows["log.retention.ms"]["source"]) == ("3600000", 2)
    assert rows["log.retention.ms"]["synonyms"][0] == ("log.retention.hours", "1", 2)
    assert ("log.retention.ms", "10", 3) in rows["log.retention.ms"]["synonyms"]
    assert rows["log.retention.ms"]["synonyms"][-1][2] == 5
    assert rows["log.segment.bytes"]["source"] == 4 and rows["log.segment.bytes"]["value"] == "2048"
    assert [s[2] for s in rows["log.segment.bytes"]["synonyms"]] == [4, 5]
    assert rows["num.partitions"]["read_only"] and rows["num.partitions"]["source"] == 5
    assert not rows["log.retention.ms"]["read_only"]
    source, syn = broker_configs.topic_source(static, {"log.retention.ms": "10"}, {}, "retention.ms")
    assert source == 3 and syn[0] == ("log.retention.ms", "10", 3)
    assert broker_configs.topic_source(static, {}, {}, "segment.bytes")[0] == 4
    assert broker_configs.topic_source(static, {}, {}, "cleanup.policy") == (5, [])
