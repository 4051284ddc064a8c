"""Group configs (KIP-848, KIP-932) without a broker: Apache 4.2's validation of a GROUP
resource's configs (order and messages), the values a group runs with (defaults from the
broker settings, clamped into their bounds), ``share.auto.offset.reset``'s ISO-8601
durations, Apache's checks of the ``group.*`` broker options, the file's format, and the
sources DescribeConfigs gives."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kaas import broker_configs
from kaas.cli import cli
from kaas.domain.groups import configs as gc
from kaas.errors import CorruptState
from kaas.settings import Settings
from kaas.storage.group_configs import GroupConfigFile, GroupConfigs

S = Settings()


@pytest.mark.parametrize("configs", [
    {},
    {"consumer.session.timeout.ms": "50000"},  # librdkafka 0081
    {"consumer.session.timeout.ms": "60000", "consumer.heartbeat.interval.ms": "15000"},
    {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"},
    {"share.auto.offset.reset": "by_duration:P1DT2H", "share.record.lock.duration.ms": " 15000 "},
    {"share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "15000"},
])
def test_accepted(configs):
    assert gc.validate(configs, S) is None


@pytest.mark.parametrize(("configs", "message"), [
    ({"consumer.session.timeout.ms": None, "share.isolation.level": None},
     "Null value not supported for group configs: consumer.session.timeout.ms,share.isolation.level"),
    ({"consumer.session.timeout.ms": "50000", "foobar": "abc"}, "Unknown group config name: foobar"),
    ({"consumer.assignment.interval.ms": "10"}, "consumer.assignment.interval.ms is not supported: kaas "),
    ({"errors.deadletterqueue.topic.name": "dlq"}, "is not supported: kaas has no share-group dead-letter"),
    ({"share.delivery.count.limit": "1"},
     "Invalid value 1 for configuration share.delivery.count.limit: Value must be at least 2"),
    ({"share.partition.max.record.locks": "99"},
     "Invalid value 99 for configuration share.partition.max.record.locks: Value must be at least 100"),
    ({"share.renew.acknowledge.enable": "yes"},
     "Invalid value yes for configuration share.renew.acknowledge.enable: Expected value to be either true or false"),
    ({"streams.num.standby.replicas": "1"}, "streams.num.standby.replicas is not supported: kaas has no streams"),
    ({"consumer.session.timeout.ms": "45s"},
     "Invalid value 45s for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ({"consumer.session.timeout.ms": "99999999999"},
     "Invalid value 99999999999 for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ({"share.heartbeat.interval.ms": "0"},
     "Invalid value 0 for configuration share.heartbeat.interval.ms: Value must be at least 1"),
    ({"share.record.lock.duration.ms": "999"},
     "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
    ({"share.isolation.level": "READ_COMMITTED"},
     "Invalid value READ_COMMITTED for configuration share.isolation.level: String must be one of: "
     "read_committed, read_uncommitted"),
    ({"share.auto.offset.reset": "none"}, "The value must be either 'earliest', 'latest' or of the format "
                                          "'by_duration:<PnDTnHnMn.nS.>'."),
    ({"share.auto.offset.reset": "by_duration:-PT1H"}, "Invalid value by_duration:-PT1H for configuration "
                                                       "share.auto.offset.reset: Invalid value `by_duration:-PT1H`"),
    # the broker bounds, in Apache's order (heartbeats before sessions)
    ({"consumer.heartbeat.interval.ms": "4999", "consumer.session.timeout.ms": "1"},
     "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ({"consumer.heartbeat.interval.ms": "15001"},
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ({"consumer.session.timeout.ms": "44999"},
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "60001"},
     "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
    ({"share.heartbeat.interval.ms": "20000"},
     "share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
    ({"share.session.timeout.ms": "1000"},
     "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
    ({"share.record.lock.duration.ms": "3000"},
     "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ({"share.record.lock.duration.ms": "60001"},
     "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
    ({"share.delivery.count.limit": "11"},
     "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit"),
    ({"share.partition.max.record.locks": "4001"},
     "share.partition.max.record.locks must be less than or equal to group.share.max.partition.max.record.locks"),
])
def test_refused_with_apaches_message(configs, message):
    got = gc.validate(configs, S)
    assert got is not None and got.error == "invalid_config" and message in got.message, got


def test_bounds_and_defaults_are_the_brokers():
    """Bounds come from the broker's settings, and a key the group leaves out takes the
    broker's value: the session timeout must stay above the heartbeat either way."""
    loose = dataclasses.replace(S, group_consumer_min_session_timeout_ms=1000,
                                group_consumer_min_heartbeat_interval_ms=1000,
                                group_share_min_record_lock_duration_ms=1000)
    assert gc.validate({"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "2000"}, loose) is None
    assert gc.validate({"share.record.lock.duration.ms": "3000"}, loose) is None  # librdkafka 0173's
    got = gc.validate({"consumer.session.timeout.ms": "5000"}, loose)  # against the broker's 5000 heartbeat
    assert got is not None and got.message == "consumer.session.timeout.ms must be greater than " \
                                              "consumer.heartbeat.interval.ms"
    got = gc.validate({"consumer.session.timeout.ms": "3000", "consumer.heartbeat.interval.ms": "3000"}, loose)
    assert got is not None and "must be greater than consumer.heartbeat.interval.ms" in got.message


def test_effective_takes_the_overrides_and_the_brokers_settings():
    assert gc.effective(S, {}) == gc.GroupConfig(45000, 5000, 45000, 5000, 30000, 5, 2000, "latest",
                                                    "read_uncommitted", True)
    mine = dataclasses.replace(S, group_share_delivery_count_limit=3, group_consumer_heartbeat_interval_ms=6000)
    got = gc.effective(mine, {"consumer.session.timeout.ms": "50000", "share.isolation.level": "read_committed",
                              "share.auto.offset.reset": "by_duration:PT10M"})
    assert (got.consumer_session_timeout_ms, got.consumer_heartbeat_interval_ms, got.share_delivery_count_limit,
            got.share_isolation_level, got.share_auto_offset_reset) == (50000, 6000, 3, "read_committed",
                                                                        "by_duration:PT10M")
    assert gc.reset_duration_ms(got.share_auto_offset_reset) == 600_000


def test_effective_clamps_a_stored_value_into_the_current_bounds():
    """A value accepted under older bounds runs within today's (Apache's GroupConfig.evaluate)."""
    narrower = dataclasses.replace(S, group_consumer_max_session_timeout_ms=50000,
                                   group_share_min_record_lock_duration_ms=20000)
    got = gc.effective(narrower, {"consumer.session.timeout.ms": "60000", "share.record.lock.duration.ms": "15000"})
    assert (got.consumer_session_timeout_ms, got.share_record_lock_duration_ms) == (50000, 20000)


_INT_KEYS = [n for n, k in gc.GROUP_CONFIG_KEYS.items() if k.type == "int"]


@given(st.dictionaries(st.sampled_from(list(gc.GROUP_CONFIG_KEYS)),
                       st.one_of(st.integers(-10, 4_000_000).map(str), st.text(max_size=12),
                                 st.sampled_from(["latest", "earliest", "read_committed", "by_duration:PT1S"]))))
def test_effective_never_fails_and_stays_within_the_bounds(overrides):
    got = gc.effective(S, overrides)
    for name, low, high in gc._BOUNDS:
        value = getattr(got, gc.GROUP_CONFIG_KEYS[name].field)
        assert getattr(S, low) <= value <= getattr(S, high)
    assert got.share_isolation_level in gc.ISOLATION_LEVELS
    gc.reset_duration_ms(got.share_auto_offset_reset)  # always a valid strategy
    if gc.validate(overrides, S) is None:  # what validation lets through runs as set
        for name, raw in overrides.items():
            assert str(getattr(got, gc.GROUP_CONFIG_KEYS[name].field)) == gc.normalized(name, raw)


@pytest.mark.parametrize(("value", "ms"), [
    ("latest", None), ("earliest", None), ("by_duration:PT1H", 3_600_000), ("by_duration:P1D", 86_400_000),
    ("by_duration:pt1m30.5s", 90_500), ("by_duration:P1DT2H3M4S", 93_784_000), ("by_duration:PT0S", 0),
    ("by_duration:PT1H-30M", 1_800_000),
])
def test_reset_duration(value, ms):
    assert gc.reset_duration_ms(value) == ms


@pytest.mark.parametrize("value", ["Latest", "none", "by_duration", "by_duration:", "by_duration:P",
                                   "by_duration:PT", "by_duration:1H", "by_duration:-P1D", "by_duration:PT-1S",
                                   " latest", "by_duration:P1H"])
def test_reset_duration_refused(value):
    with pytest.raises(ValueError):
        gc.reset_duration_ms(value)


@pytest.mark.parametrize(("change", "option", "message"), [
    ({"group_share_delivery_count_limit": 1}, "group.share.delivery.count.limit", "Value must be at least 2"),
    ({"group_share_delivery_count_limit": 1000}, "group.share.delivery.count.limit", "Value must be no more than 10"),
    ({"group_consumer_session_timeout_ms": 0}, "group.consumer.session.timeout.ms", "Value must be at least 1"),
    ({"group_consumer_max_heartbeat_interval_ms": 4000}, "group.consumer.max.heartbeat.interval.ms",
     "group.consumer.max.heartbeat.interval.ms must be greater than or equal to "
     "group.consumer.min.heartbeat.interval.ms"),
    ({"group_consumer_session_timeout_ms": 70000}, "group.consumer.session.timeout.ms",
     "group.consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
    ({"group_share_heartbeat_interval_ms": 15000, "group_share_session_timeout_ms": 15000,
      "group_share_min_session_timeout_ms": 1000}, "group.share.heartbeat.interval.ms",
     "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms"),
    ({"group_share_record_lock_duration_ms": 10000}, "group.share.record.lock.duration.ms",
     "must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ({"group_share_min_record_lock_duration_ms": 40000}, "group.share.min.record.lock.duration.ms",
     "Value must be no more than 30000"),
    ({"group_share_partition_max_record_locks": 50}, "group.share.partition.max.record.locks",
     "Value must be at least 100"),
    ({"group_share_max_size": 0}, "group.share.max.size", "Value must be at least 1"),
    ({"group_consumer_migration_policy": "sideways"}, "group.consumer.migration.policy", "String must be one of"),
])
def test_broker_settings_refused_as_apache(change, option, message):
    got = gc.settings_problem(dataclasses.replace(S, **change))
    assert got is not None and got[0] == option and message in got[1], got


def test_broker_settings_defaults_and_assignors():
    assert gc.settings_problem(S) is None
    assert gc.parse_assignors("range, org.apache.kafka.coordinator.group.assignor.UniformAssignor") == \
        ("range", "uniform")
    for bad in ("", "uniform,uniform", "sticky", "uniform,org.apache.kafka.coordinator.group.assignor.UniformAssignor"):
        with pytest.raises(ValueError):
            gc.parse_assignors(bad)


@pytest.mark.parametrize(("args", "message"), [
    (["--group-share-delivery-count-limit", "0"], "Value must be at least 2"),
    (["--group-consumer-assignors", "sticky"], "unknown assignor sticky"),
    (["--group-consumer-heartbeat-interval-ms", "50000"], "must be less than or equal to"),
])
def test_broker_command_refuses_bad_group_options(tmp_path, args, message):
    res = CliRunner().invoke(cli, ["broker", "--data", str(tmp_path), *args])
    assert res.exit_code == 2 and message in res.output, res.output


def test_every_group_setting_has_its_option_and_static_config():
    options = {p.name for p in cli.commands["broker"].params}
    for field in gc.BROKER_SETTINGS:
        assert field in options, field
        assert broker_configs.STATIC[gc.option_name(field)][1] == field
        assert gc.option_name(field) in broker_configs.READ_ONLY  # read-only in Apache 4.2 too
    refusal = broker_configs.validate({"group.consumer.session.timeout.ms": "50000"}, per_broker=True)
    assert refusal is not None and refusal.message.startswith("Cannot update these configs dynamically")


def test_describe_sources_and_synonyms():
    """GROUP_CONFIG when the group sets it, else its broker synonym's source (a given option:
    STATIC_BROKER_CONFIG) or the key's own default (DEFAULT_CONFIG)."""
    static = dataclasses.replace(S, group_share_record_lock_duration_ms=20000)
    entries = {e["name"]: e for e in broker_configs.group_entries(static, {"share.isolation.level": "read_committed",
                                                                           "consumer.session.timeout.ms": "50000"})}
    assert list(entries) == list(gc.GROUP_CONFIG_KEYS)
    assert (entries["consumer.session.timeout.ms"]["value"], entries["consumer.session.timeout.ms"]["source"]) == \
        ("50000", gc.SOURCE_GROUP)
    assert entries["consumer.session.timeout.ms"]["synonyms"] == [
        ("consumer.session.timeout.ms", "50000", 8), ("group.consumer.session.timeout.ms", "45000", 5)]
    assert entries["share.record.lock.duration.ms"]["synonyms"] == [
        ("group.share.record.lock.duration.ms", "20000", 4), ("group.share.record.lock.duration.ms", "30000", 5)]
    assert (entries["share.record.lock.duration.ms"]["value"], entries["share.record.lock.duration.ms"]["source"]) \
        == ("20000", 4)
    assert entries["share.auto.offset.reset"]["synonyms"] == [("share.auto.offset.reset", "latest", 5)]
    assert entries["share.isolation.level"]["source"] == gc.SOURCE_GROUP
    assert {e["type"] for e in entries.values()} == {"int", "string", "boolean"}
    assert (entries["share.renew.acknowledge.enable"]["value"],
            entries["share.renew.acknowledge.enable"]["source"]) == ("true", 5)


# ------------------------------------------------------------------------------- the file

def test_file_round_trip_and_a_group_with_no_configs_leaves_it(tmp_path):
    f = GroupConfigFile(tmp_path / "group_configs.json", fsync=False)
    assert f.read() == GroupConfigs()
    v1 = f.read().with_group("g/1", {"share.isolation.level": "read_committed"})
    f.write(v1)
    assert f.read() == v1 and v1.version == 1 and v1.of("g/1") == {"share.isolation.level": "read_committed"}
    v2 = v1.with_group("g/1", {})
    f.write(v2)
    assert f.read() == GroupConfigs(2, {})


@pytest.mark.parametrize("content", [
    b"{not json", b'{"format": 2, "version": 1, "groups": {}}', b'{"format": 1, "version": 1, "groups": []}',
    b'{"format": 1, "groups": {}}',
    b'{"format": 1, "version": 1, "groups": {"g": {"no.such.config": "1"}}}',
    b'{"format": 1, "version": 1, "groups": {"g": {"consumer.session.timeout.ms": "soon"}}}',
    b'{"format": 1, "version": 1, "groups": {"g": {"consumer.session.timeout.ms": 50000}}}',
    b'{"format": 1, "version": 1, "groups": {"g": {}}}',
])
def test_a_corrupt_file_is_corrupt_state_never_no_configs(tmp_path, content):
    path = tmp_path / "group_configs.json"
    path.write_bytes(content)
    with pytest.raises(CorruptState):
        GroupConfigFile(path).read()
    assert path.read_bytes() == content


def test_the_file_is_json_with_a_format(tmp_path):
    f = GroupConfigFile(tmp_path / "group_configs.json", fsync=False)
    f.write(GroupConfigs().with_group("g", {"consumer.session.timeout.ms": "50000"}))
    assert json.loads(f.path.read_text()) == {"format": 1, "version": 1,
                                               "groups": {"g": {"consumer.session.timeout.ms": "50000"}}}
