"""Admin APIs through real clients: confluent AdminClient and kafka-python KafkaAdminClient."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from tests.kafka import watermarks

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def admin(shared_broker):
    return AdminClient({"bootstrap.servers": shared_broker.bootstrap})


def kafka_error(exc_info) -> KafkaError:
    err = exc_info.value.args[0]
    assert isinstance(err, KafkaError), err
    return err


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> list[tuple[int, int]]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    out = []

    def cb(err, msg):
        assert err is None, err
        out.append((msg.partition(), msg.offset()))

    for v in values:
        p.produce(topic, value=v, partition=partition, on_delivery=cb)
    assert p.flush(15) == 0
    return out


def consumer(bootstrap: str, **conf) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"admin-{uuid.uuid4()}",
                     "enable.auto.commit": False, "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 1000, **conf})


def describe_topic(admin: AdminClient, name: str):
    return admin.describe_topics(TopicCollection([name]))[name].result(10)


def topic_configs(admin: AdminClient, name: str) -> dict:
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    return admin.describe_configs([res])[res].result(10)


# ---------------------------------------------------------------------------- topics


def test_create_topics_ok_invalid_existing_and_validate_only(admin, shared_broker):
    futs = admin.create_topics([NewTopic("adm-created", 3, 1)])
    assert futs["adm-created"].result(10) is None
    md = admin.list_topics(timeout=5)
    assert sorted(md.topics["adm-created"].partitions) == [0, 1, 2]
    for p in md.topics["adm-created"].partitions.values():
        assert p.leader == 0 and p.replicas == [0] and p.isrs == [0]

    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic("adm-created", 3, 1)])["adm-created"].result(10)
    assert kafka_error(ei).code() == KafkaError.TOPIC_ALREADY_EXISTS

    for bad in ("bad name!", "a" * 250, "..", ""):
        if bad == "":
            continue  # librdkafka refuses an empty name locally
        with pytest.raises(KafkaException) as ei:
            admin.create_topics([NewTopic(bad, 1, 1)])[bad].result(10)
        assert kafka_error(ei).code() == KafkaError.TOPIC_EXCEPTION, bad

    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic("adm-zero-parts", 0, 1)])["adm-zero-parts"].result(10)
    assert kafka_error(ei).code() == KafkaError.INVALID_PARTITIONS

    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic("adm-rf3", 1, 3)])["adm-rf3"].result(10)
    assert kafka_error(ei).code() == KafkaError.INVALID_REPLICATION_FACTOR

    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic("adm-badcfg", 1, 1, config={"retention.ms": "soon"})])["adm-badcfg"].result(10)
    assert kafka_error(ei).code() == KafkaError.INVALID_CONFIG

    futs = admin.create_topics([NewTopic("adm-validate-only", 2, 1)], validate_only=True)
    assert futs["adm-validate-only"].result(10) is None
    md = admin.list_topics(timeout=5)
    assert "adm-validate-only" not in md.topics
    for name in ("bad name!", "adm-zero-parts", "adm-rf3", "adm-badcfg"):
        assert name not in md.topics


def test_describe_and_list_topics(admin):
    admin.create_topics([NewTopic("adm-describe", 2, 1)])["adm-describe"].result(10)
    d = describe_topic(admin, "adm-describe")
    assert d.name == "adm-describe"
    assert not d.is_internal
    assert d.topic_id is not None and str(d.topic_id) != "AAAAAAAAAAAAAAAAAAAAAA"
    assert [p.id for p in d.partitions] == [0, 1]
    for p in d.partitions:
        assert p.leader.id == 0
        assert [r.id for r in p.replicas] == [0]
        assert [r.id for r in p.isr] == [0]

    md = admin.list_topics(timeout=5)
    assert "adm-describe" in md.topics
    assert md.topics["adm-describe"].error is None
    assert md.controller_id == 0
    assert list(md.brokers) == [0]

    one = admin.list_topics("adm-describe", timeout=5)
    assert list(one.topics) == ["adm-describe"]

    with pytest.raises(KafkaException) as ei:
        describe_topic(admin, "adm-does-not-exist")
    assert kafka_error(ei).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "adm-does-not-exist" not in admin.list_topics(timeout=5).topics  # describing did not create it


def test_delete_and_recreate_gives_a_fresh_topic(admin, shared_broker):
    name = "adm-delete-me"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    first_id = str(describe_topic(admin, name).topic_id)
    assert produce(shared_broker.bootstrap, name, [b"old-1", b"old-2", b"old-3"])[-1] == (0, 2)
    assert watermarks(shared_broker.bootstrap, name) == (0, 3)

    assert admin.delete_topics([name])[name].result(10) is None
    assert name not in admin.list_topics(timeout=5).topics
    with pytest.raises(KafkaException) as ei:
        admin.delete_topics([name])[name].result(10)
    assert kafka_error(ei).code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    assert str(describe_topic(admin, name).topic_id) != first_id
    assert watermarks(shared_broker.bootstrap, name) == (0, 0)
    assert produce(shared_broker.bootstrap, name, [b"new-1"]) == [(0, 0)]
    c = consumer(shared_broker.bootstrap)
    try:
        c.assign([TopicPartition(name, 0, 0)])
        msgs = c.consume(10, 3)
    finally:
        c.close()
    assert [m.value() for m in msgs if m.error() is None] == [b"new-1"]


def test_create_partitions_grow_and_produce_to_the_new_one(admin, shared_broker):
    name = "adm-grow"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    assert admin.create_partitions([NewPartitions(name, 4)])[name].result(10) is None
    assert [p.id for p in describe_topic(admin, name).partitions] == [0, 1, 2, 3]
    assert produce(shared_broker.bootstrap, name, [b"on-three"], partition=3) == [(3, 0)]

    with pytest.raises(KafkaException) as ei:  # cannot shrink or stay equal
        admin.create_partitions([NewPartitions(name, 2)])[name].result(10)
    assert kafka_error(ei).code() == KafkaError.INVALID_PARTITIONS
    with pytest.raises(KafkaException) as ei:
        admin.create_partitions([NewPartitions("adm-grow-missing", 2)])["adm-grow-missing"].result(10)
    assert kafka_error(ei).code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    assert admin.create_partitions([NewPartitions(name, 6)], validate_only=True)[name].result(10) is None
    assert len(describe_topic(admin, name).partitions) == 4


# ---------------------------------------------------------------------------- configs


def test_describe_configs_topic_defaults_and_overrides(admin):
    name = "adm-configs"
    admin.create_topics([NewTopic(name, 1, 1, config={"retention.ms": "3600000"})])[name].result(10)
    cfg = topic_configs(admin, name)
    assert cfg["retention.ms"].value == "3600000"
    assert not cfg["retention.ms"].is_default
    assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["cleanup.policy"].value == "delete"
    assert cfg["cleanup.policy"].is_default
    assert cfg["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert cfg["retention.bytes"].value == "-1" and cfg["retention.bytes"].is_default

    res = ConfigResource(ConfigResource.Type.TOPIC, "adm-configs-missing")
    with pytest.raises(KafkaException) as ei:
        admin.describe_configs([res])[res].result(10)
    assert kafka_error(ei).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_configs_broker(admin, shared_broker):
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    cfg = admin.describe_configs([res])[res].result(10)
    assert cfg["num.partitions"].value == "1"  # the shared broker runs with --num-partitions 1
    assert cfg["auto.create.topics.enable"].value == "true"
    assert cfg["broker.id"].value == "0"
    assert cfg["log.retention.ms"].value == str(7 * 24 * 3600 * 1000)


def test_alter_configs_replaces_the_overrides(admin):
    name = "adm-alter"
    admin.create_topics([NewTopic(name, 1, 1, config={"retention.ms": "3600000"})])[name].result(10)
    res = ConfigResource(ConfigResource.Type.TOPIC, name, set_config={"retention.bytes": "1048576"})
    assert admin.alter_configs([res])[res].result(10) is None
    cfg = topic_configs(admin, name)
    assert cfg["retention.bytes"].value == "1048576" and not cfg["retention.bytes"].is_default
    # AlterConfigs is a full replacement: the earlier override is gone
    assert cfg["retention.ms"].value == str(7 * 24 * 3600 * 1000) and cfg["retention.ms"].is_default

    bad = ConfigResource(ConfigResource.Type.TOPIC, name, set_config={"no.such.config": "1"})
    with pytest.raises(KafkaException) as ei:
        admin.alter_configs([bad])[bad].result(10)
    assert kafka_error(ei).code() == KafkaError.INVALID_CONFIG
    assert topic_configs(admin, name)["retention.bytes"].value == "1048576"


def test_incremental_alter_configs(admin):
    name = "adm-incremental"
    admin.create_topics([NewTopic(name, 1, 1, config={"retention.ms": "3600000"})])[name].result(10)
    res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ])
    assert admin.incremental_alter_configs([res])[res].result(10) is None
    cfg = topic_configs(admin, name)
    assert cfg["segment.bytes"].value == "1048576" and not cfg["segment.bytes"].is_default
    assert cfg["retention.ms"].value == "3600000"  # untouched: incremental
    # APPEND to a list without an override starts from the default (as Apache does)
    assert cfg["cleanup.policy"].value == "delete,compact"

    res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    assert admin.incremental_alter_configs([res])[res].result(10) is None
    cfg = topic_configs(admin, name)
    assert cfg["retention.ms"].is_default
    assert cfg["segment.bytes"].value == "1048576"

    bad = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "never", incremental_operation=AlterConfigOpType.SET),
    ])
    with pytest.raises(KafkaException) as ei:
        admin.incremental_alter_configs([bad])[bad].result(10)
    assert kafka_error(ei).code() == KafkaError.INVALID_CONFIG
    assert topic_configs(admin, name)["retention.ms"].is_default


# ---------------------------------------------------------------------------- cluster, records


def test_describe_cluster(admin, shared_broker):
    d = admin.describe_cluster().result(10)
    assert d.cluster_id == "kaas-cluster"
    assert d.controller.id == 0
    assert [(n.id, n.host, n.port) for n in d.nodes] == [(0, "127.0.0.1", shared_broker.port)]
    assert admin.list_topics(timeout=5).cluster_id == "kaas-cluster"


def test_delete_records_advances_the_low_watermark(admin, shared_broker):
    name = "adm-delete-records"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    produce(shared_broker.bootstrap, name, [f"r{i}".encode() for i in range(10)])
    assert watermarks(shared_broker.bootstrap, name) == (0, 10)

    tp = TopicPartition(name, 0, 5)
    futs = admin.delete_records([tp])
    deleted = next(iter(futs.values())).result(10)
    assert deleted.low_watermark == 5
    assert watermarks(shared_broker.bootstrap, name) == (5, 10)

    # Below the log start: the broker answers OFFSET_OUT_OF_RANGE; with reset=error the client
    # surfaces it, with reset=earliest it resumes at the new log start.
    c = consumer(shared_broker.bootstrap, **{"auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(name, 0, 2)])
        deadline = time.monotonic() + 10
        err = None
        while err is None and time.monotonic() < deadline:
            for m in c.consume(10, 0.5):
                assert m.error() is not None, f"read offset {m.offset()} below the log start"
                err = m.error()
        assert err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET, err
    finally:
        c.close()

    c = consumer(shared_broker.bootstrap, **{"auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(name, 0, 2)])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 5 and time.monotonic() < deadline:
            got.extend(m for m in c.consume(10, 0.5) if m.error() is None)
        assert [(m.offset(), m.value()) for m in got] == [(i, f"r{i}".encode()) for i in range(5, 10)]
    finally:
        c.close()

    # -1 = up to the high watermark; past the high watermark is out of range
    deleted = next(iter(admin.delete_records([TopicPartition(name, 0, -1)]).values())).result(10)
    assert deleted.low_watermark == 10
    with pytest.raises(KafkaException) as ei:
        next(iter(admin.delete_records([TopicPartition(name, 0, 99)]).values())).result(10)
    assert kafka_error(ei).code() == KafkaError.OFFSET_OUT_OF_RANGE


def test_auto_created_topics_appear_in_metadata(admin, shared_broker):
    name = f"adm-auto-{uuid.uuid4().hex[:8]}"
    assert produce(shared_broker.bootstrap, name, [b"hello"]) == [(0, 0)]
    md = admin.list_topics(timeout=5)
    assert name in md.topics
    assert len(md.topics[name].partitions) == 1
    assert md.topics[name].partitions[0].leader == 0
    from kafka import KafkaAdminClient

    ka = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        described = ka.describe_topics([name])
        assert described[0]["error_code"] == 0 and described[0]["name"] == name
    finally:
        ka.close()


# ---------------------------------------------------------------------------- kafka-python


def test_kafka_python_admin_create_describe_delete(shared_broker):
    from kafka import KafkaAdminClient
    from kafka.errors import TopicAlreadyExistsError

    ka = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        ka.create_topics({"adm-kp": {"num_partitions": 2, "replication_factor": 1,
                                     "configs": {"retention.ms": "120000"}}})
        assert "adm-kp" in ka.list_topics()
        (desc,) = ka.describe_topics(["adm-kp"])
        assert desc["error_code"] == 0
        assert desc["name"] == "adm-kp"
        assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1]
        assert all(p["leader_id"] == 0 for p in desc["partitions"])

        with pytest.raises(TopicAlreadyExistsError):
            ka.create_topics({"adm-kp": {"num_partitions": 2, "replication_factor": 1}})

        ka.delete_topics(["adm-kp"])
        deadline = time.monotonic() + 5
        while "adm-kp" in ka.list_topics() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "adm-kp" not in ka.list_topics()
    finally:
        ka.close()


def test_admin_changes_survive_a_restart(broker):
    """Topic configs, partition growth, deletions and the low watermark are on disk."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("adm-keep", 1, 1, config={"retention.ms": "3600000"}),
                         NewTopic("adm-gone", 1, 1)])["adm-keep"].result(10)
    admin.create_partitions([NewPartitions("adm-keep", 2)])["adm-keep"].result(10)
    produce(broker.bootstrap, "adm-keep", [f"k{i}".encode() for i in range(6)])
    next(iter(admin.delete_records([TopicPartition("adm-keep", 0, 4)]).values())).result(10)
    admin.delete_topics(["adm-gone"])["adm-gone"].result(10)
    topic_id = str(describe_topic(admin, "adm-keep").topic_id)
    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    md = admin.list_topics(timeout=5)
    assert "adm-gone" not in md.topics
    assert sorted(md.topics["adm-keep"].partitions) == [0, 1]
    assert str(describe_topic(admin, "adm-keep").topic_id) == topic_id
    assert topic_configs(admin, "adm-keep")["retention.ms"].value == "3600000"
    assert watermarks(broker.bootstrap, "adm-keep") == (4, 6)
