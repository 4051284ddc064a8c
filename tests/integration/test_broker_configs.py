"""Dynamic broker configs (KIP-226) on a 3-broker cluster: AlterConfigs and
IncrementalAlterConfigs on BROKER resources, per broker and at the cluster default, stored
in ``__cluster/broker_configs.json`` by the controller, seen by every broker within a poll,
shown by DescribeConfigs with their sources and synonyms, and honoured (a dynamic
``log.retention.ms`` deletes the segments of a topic without an override). Group configs
(KIP-848/932, GROUP resources) take the same path into ``__cluster/group_configs.json``.

Every request here is sent to broker 0 (bootstrap = broker 0 only); what the other brokers
answer is read with raw DescribeConfigs on their own ports.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from kaas.client import WireClient
from kaas.testing import wait_for
from tests.fixtures import cluster_fixture
from tests.kafka import uniq, watermarks

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT, TOPIC_CONFIG, GROUP_CONFIG = 2, 3, 4, 5, 1, 8

cluster = cluster_fixture(3, scope="module", name="dyncfg", extra=["--retention-check-ms", "300"])


@pytest.fixture(scope="module")
def admin(cluster):
    """An admin client that knows only broker 0: every alteration reaches the cluster there."""
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{cluster.ports[0]}"})


@pytest.fixture(autouse=True)
def clean_layers(cluster, admin):
    """Every test starts and ends without dynamic configs (legacy AlterConfigs with no
    entries empties a layer)."""
    yield
    for name in ("", "0", "1", "2"):
        assert raw_alter(cluster.ports[0], name, {}) == (0, None)


def raw_alter(port: int, name: str, configs: dict[str, str], validate_only: bool = False) -> tuple[int, str | None]:
    """Raw AlterConfigs v2 of one BROKER resource (confluent-kafka cannot name the cluster
    default, ``""``): (error code, message)."""
    with WireClient("127.0.0.1", port, timeout=20) as wc:
        resp = wc.call(33, 2, {"resources": [{"resource_type": 4, "resource_name": name, "configs": [
            {"name": k, "value": v} for k, v in configs.items()]}], "validate_only": validate_only})
    r = resp.responses[0]
    return r.error_code, r.error_message


def raw_incremental(port: int, name: str, ops: list[tuple[str, int, str | None]]) -> tuple[int, str | None]:
    """Raw IncrementalAlterConfigs v1 of one BROKER resource: (error code, message)."""
    with WireClient("127.0.0.1", port, timeout=20) as wc:
        resp = wc.call(44, 1, {"resources": [{"resource_type": 4, "resource_name": name, "configs": [
            {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}], "validate_only": False})
    r = resp.responses[0]
    return r.error_code, r.error_message


def describe(port: int, resource_type: int, name: str, keys=None, synonyms: bool = True) -> dict:
    """Raw DescribeConfigs v4 on one broker: name -> (value, source, [(synonym, value, source)])."""
    with WireClient("127.0.0.1", port, timeout=10) as wc:
        resp = wc.call(32, 4, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                              "configuration_keys": keys}],
                               "include_synonyms": synonyms, "include_documentation": False})
    r = resp.results[0]
    assert r.error_code == 0, (r.error_code, r.error_message)
    return {c.name: (c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms])
            for c in r.configs}


def alter(admin: AdminClient, name: str, configs: dict[str, str], **kw) -> None:
    res = ConfigResource(ConfigResource.Type.BROKER, name, set_config=configs)
    admin.alter_configs([res], **kw)[res].result(15)


def alter_default(cluster, configs: dict[str, str], validate_only: bool = False) -> None:
    assert raw_alter(cluster.ports[0], "", configs, validate_only) == (0, None)


def refused(fn) -> KafkaError:
    with pytest.raises(KafkaException) as ei:
        fn()
    return ei.value.args[0]


def test_default_and_per_broker_layers_reach_every_broker(cluster, admin):
    """A cluster default set through broker 0 is seen by brokers 1 and 2 within a poll, for
    the broker config and for a topic without an override; a per-broker value beats it on
    that broker only; sources and synonyms are Apache's."""
    topic = uniq("dyn-layers")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    alter_default(cluster, {"log.retention.ms": "3600000", "log.cleanup.policy": "compact"})
    for port in cluster.ports:
        wait_for(lambda port=port: describe(port, 4, str(cluster.ports.index(port)))["log.retention.ms"][:2]
                 == ("3600000", DYNAMIC_DEFAULT), 10, f"default layer on {port}")
        cfg = describe(port, 2, topic)
        assert cfg["retention.ms"][:2] == ("3600000", DYNAMIC_DEFAULT)
        assert cfg["cleanup.policy"][:2] == ("compact", DYNAMIC_DEFAULT)
        assert ("log.retention.ms", "3600000", DYNAMIC_DEFAULT) in cfg["retention.ms"][2]
    # the default resource lists its dynamic values only
    assert describe(cluster.ports[1], 4, "") == {
        "log.cleanup.policy": ("compact", DYNAMIC_DEFAULT, [("log.cleanup.policy", "compact", DYNAMIC_DEFAULT)]),
        "log.retention.ms": ("3600000", DYNAMIC_DEFAULT, [("log.retention.ms", "3600000", DYNAMIC_DEFAULT)])}

    # broker 2's own layer (with a synonym: hours beat the default's ms there)
    alter(admin, "2", {"log.retention.hours": "2"})
    wait_for(lambda: describe(cluster.ports[2], 4, "2")["log.retention.ms"][:2] == ("7200000", DYNAMIC_BROKER),
             10, "per-broker layer on broker 2")
    cfg = describe(cluster.ports[2], 4, "2")
    assert cfg["log.retention.hours"][:2] == ("2", DYNAMIC_BROKER)
    assert describe(cluster.ports[2], 2, topic)["retention.ms"][:2] == ("7200000", DYNAMIC_BROKER)
    syn = describe(cluster.ports[2], 2, topic)["retention.ms"][2]
    assert [s for s in syn if s[2] == DYNAMIC_BROKER] == [("log.retention.hours", "2", DYNAMIC_BROKER)]
    assert ("log.retention.ms", "3600000", DYNAMIC_DEFAULT) in syn
    assert syn[-1] == ("log.retention.ms", str(7 * 24 * 3600 * 1000), DEFAULT)
    # broker 1 keeps the default
    assert describe(cluster.ports[1], 4, "1")["log.retention.ms"][:2] == ("3600000", DYNAMIC_DEFAULT)
    assert describe(cluster.ports[1], 2, topic)["retention.ms"][:2] == ("3600000", DYNAMIC_DEFAULT)
    # a static option: STATIC_BROKER_CONFIG (the cluster runs with --retention-check-ms 300)
    assert describe(cluster.ports[1], 4, "1")["log.retention.check.interval.ms"][:2] == ("300", STATIC)

    # one file, one writer (the controller): both layers in it
    data = json.loads((cluster.data / "__cluster" / "broker_configs.json").read_text())
    assert data["default"] == {"log.cleanup.policy": "compact", "log.retention.ms": "3600000"}
    assert data["brokers"] == {"2": {"log.retention.hours": "2"}}

    # IncrementalAlterConfigs DELETE takes the default's value away everywhere
    assert raw_incremental(cluster.ports[0], "", [("log.cleanup.policy", 1, None)]) == (0, None)
    for port in cluster.ports:
        wait_for(lambda port=port: describe(port, 2, topic)["cleanup.policy"][:2] == ("delete", DEFAULT), 10,
                 f"default removed on {port}")


def test_librdkafka_0081_broker_resource_and_apache_errors(cluster, admin):
    """librdkafka 0081 alters sasl.kerberos.min.time.before.relogin on a broker: accepted
    (stored; kaas has no Kerberos), by AlterConfigs and IncrementalAlterConfigs. Apache's
    errors for the rest."""
    alter(admin, "0", {"sasl.kerberos.min.time.before.relogin": "58000"})
    res = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("sasl.kerberos.min.time.before.relogin", "58000", incremental_operation=AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([res])[res].result(15) is None
    wait_for(lambda: describe(cluster.ports[1], 4, "1").get("sasl.kerberos.min.time.before.relogin", ())[:2]
             == ("58000", DYNAMIC_BROKER), 10, "stored per broker")

    code, msg = raw_alter(cluster.ports[0], "", {"sasl.kerberos.min.time.before.relogin": "1"})
    assert code == KafkaError.INVALID_REQUEST and "broker id must be specified" in msg
    code, msg = raw_alter(cluster.ports[0], "", {"log.flush.interval.ms": "-1"})
    assert code == KafkaError.INVALID_CONFIG and "flush.ms" in msg
    code, msg = raw_alter(cluster.ports[0], "", {"log.retention.ms": "-2"})
    assert code == KafkaError.INVALID_CONFIG and "at least -1" in msg
    cases = [
        ("0", {"num.partitions": "4"}, KafkaError.INVALID_REQUEST, "Cannot update these configs dynamically"),
        ("0", {"broker.id": "4"}, KafkaError.INVALID_REQUEST, "Cannot update these configs dynamically"),
        ("0", {"ssl.keystore.location": "/x"}, KafkaError.INVALID_REQUEST, "only per-listener"),
        ("0", {"log.retention.ms": "soon"}, KafkaError.INVALID_REQUEST, "Not a number"),
        ("0", {"no.such.config": "1"}, KafkaError.INVALID_CONFIG, "Unknown broker configs"),
        ("0", {"ssl.client.auth": "required"}, KafkaError.INVALID_CONFIG, "at start"),
    ]
    for name, configs, code, why in cases:
        err = refused(lambda name=name, configs=configs: alter(admin, name, configs))
        assert err.code() == code and why in err.str(), (name, configs, err)
    code, msg = raw_alter(cluster.ports[0], "x", {"log.retention.ms": "1"})
    assert code == KafkaError.INVALID_REQUEST and "base 10" in msg

    # validate_only: answered, not stored
    alter_default(cluster, {"log.retention.ms": "1234"}, validate_only=True)
    assert "log.retention.ms" not in describe(cluster.ports[0], 4, "")


def test_dynamic_log_retention_ms_deletes_segments_and_message_max_bytes_applies(cluster, admin):
    """Honoured, not only stored: a dynamic default log.retention.ms deletes old segments of
    a topic without an override; message.max.bytes caps produce on every broker."""
    topic = uniq("dyn-ret")
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "1024"})])[topic].result(15)
    bootstrap = cluster.bootstrap
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    old = 1_000_000_000_000  # 2001: older than any retention below
    for i in range(6):
        p.produce(topic, value=b"x" * 900, partition=0, timestamp=old + i)
        assert p.flush(15) == 0
    low, high = watermarks(bootstrap, topic, 0)
    assert (low, high) == (0, 6)
    alter_default(cluster, {"log.retention.ms": "60000"})
    wait_for(lambda: watermarks(bootstrap, topic, 0)[0] >= 4, 20, "retention by the dynamic default")

    alter_default(cluster, {"message.max.bytes": "2000"})
    errors = []
    p2 = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "enable.idempotence": False,
                   "retries": 0})

    def try_big() -> bool:
        errors.clear()
        p2.produce(topic, value=b"y" * 5000, partition=0, on_delivery=lambda err, _m: errors.append(err))
        p2.flush(15)
        return bool(errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE)

    wait_for(try_big, 15, "message.max.bytes applied")


def test_group_configs_set_through_one_broker_reach_every_broker(cluster, admin):
    """GROUP config resources (KIP-848/932) with confluent-kafka's AdminClient: set through
    broker 0 (forwarded to the controller, the file's one writer) for a group that does not
    exist, described by every broker within a poll as GROUP_CONFIG; a value outside the
    broker's bounds is refused with INVALID_CONFIG; the configs make no group."""
    group = uniq("grp-cfg")
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.isolation.level", "read_committed", incremental_operation=AlterConfigOpType.SET)])
    assert admin.incremental_alter_configs([res])[res].result(15) is None
    for port in cluster.ports:
        wait_for(lambda port=port: describe(port, 32, group).get("consumer.session.timeout.ms", ())[:2]
                 == ("50000", GROUP_CONFIG), 10, f"group config on {port}")
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    entries = next(iter(described.values())).result(15)
    assert (entries["share.isolation.level"].value, entries["share.isolation.level"].source) == \
        ("read_committed", ConfigSource.GROUP_CONFIG.value)
    assert (entries["share.auto.offset.reset"].value, entries["share.auto.offset.reset"].source) == \
        ("latest", ConfigSource.DEFAULT_CONFIG.value)

    bad = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    err = refused(lambda: admin.incremental_alter_configs([bad])[bad].result(15))
    assert err.code() == KafkaError.INVALID_CONFIG and "group.consumer.min.session.timeout.ms" in err.str(), err
    data = json.loads((cluster.data / "__cluster" / "group_configs.json").read_text())
    assert data["groups"][group] == {"consumer.session.timeout.ms": "50000", "share.isolation.level": "read_committed"}
    assert group not in [g.group_id for g in admin.list_consumer_groups().result(15).valid]
