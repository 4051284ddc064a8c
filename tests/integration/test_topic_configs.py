"""No silent topic configs (issue 18.4): a walk over the whole of ``kaas.configs.TOPIC_CONFIGS``.

Every key has an entry in ``WALK``: the tests that show kaas honours it, the non-default
values CreateTopics and AlterConfigs must take, and the values kaas would not honour, which
CreateTopics, AlterConfigs and IncrementalAlterConfigs must refuse with INVALID_CONFIG and
the reason. A key added to the table without an entry fails
``test_every_topic_config_is_classified``. The behavioural tests of the keys nobody else
tests (segment.bytes, index.interval.bytes, retention.*, max.message.bytes) are here too.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass
from pathlib import Path

import msgpack
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from kaas import configs
from kaas.settings import Settings
from kaas.testing import BrokerProcess, wait_for
from tests.fixtures import broker_fixture
from tests.kafka import uniq, watermarks

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LONG_MAX = str(2**63 - 1)
HERE = "tests/integration/test_topic_configs.py"
COMPACTION = "tests/component/test_compaction.py"  # the log cleaner's tests
COMPACTION_INT = "tests/integration/test_compaction.py"
REPLICAS = "tests/integration/test_replicas.py"  # replication factor, min.insync.replicas, LogAppendTime
VALIDATION = "tests/integration/test_validation.py"  # wire.validate through a broker (issue 31)
VALIDATE_UNIT = "tests/unit/test_validate.py"


@dataclass(frozen=True)
class Entry:
    """How kaas treats one topic config.

    honoured_by: tests showing the values kaas takes are honoured ("path" or "path::test").
    accepts: non-default values CreateTopics and AlterConfigs must take (and DescribeConfigs show).
    refuses: values answered INVALID_CONFIG (kaas would not honour them), with ``why`` in the message.
    """

    honoured_by: tuple[str, ...] = ()
    accepts: tuple[str, ...] = ()
    refuses: tuple[str, ...] = ()
    why: str = ""


WALK: dict[str, Entry] = {
    # honoured by the log cleaner and the produce path (their tests)
    "cleanup.policy": Entry(honoured_by=(f"{COMPACTION}::test_retention_follows_the_cleanup_policy",
                                         f"{COMPACTION_INT}::test_compacted_topic_keeps_latest_committed_values",
                                         f"{HERE}::test_retention_ms_deletes_old_segments")),
    "segment.ms": Entry(honoured_by=(f"{COMPACTION}::test_an_idle_active_segment_rolls_after_segment_ms",
                                     "tests/component/test_partition_log.py::test_roll_by_time")),
    "min.cleanable.dirty.ratio": Entry(honoured_by=(COMPACTION, COMPACTION_INT)),
    "min.compaction.lag.ms": Entry(honoured_by=(
        COMPACTION, f"{COMPACTION_INT}::test_sigkill_at_each_cleaner_step_keeps_the_log_readable")),
    "max.compaction.lag.ms": Entry(honoured_by=(COMPACTION, COMPACTION_INT)),
    "delete.retention.ms": Entry(honoured_by=(
        f"{COMPACTION}::test_tombstones_go_after_the_horizon_and_take_the_key_with_them",)),
    "message.timestamp.type": Entry(honoured_by=(
        "tests/component/test_log_append_time.py::test_log_append_time_stamps_answers_and_finds_by_append_time",
        f"{REPLICAS}::test_log_append_time_topic_with_real_clients")),
    "min.insync.replicas": Entry(honoured_by=(
        f"{REPLICAS}::test_replication_factor_isr_and_min_insync_replicas_on_three_brokers",
        f"{REPLICAS}::test_min_insync_replicas_validation_and_single_broker_acks_all")),
    # honoured, tested here (and at the storage level)
    "retention.ms": Entry(honoured_by=(f"{HERE}::test_retention_ms_deletes_old_segments",
                                       "tests/component/test_partition_log.py::test_retention_by_time",
                                       "tests/component/test_retention_active.py"),
                          accepts=("3600000", "-1"), refuses=("-2",), why="at least -1"),
    "retention.bytes": Entry(honoured_by=(f"{HERE}::test_retention_bytes_deletes_the_oldest_segments",
                                          "tests/component/test_partition_log.py::test_retention_by_bytes"),
                             accepts=("1048576",)),
    "segment.bytes": Entry(honoured_by=(f"{HERE}::test_segment_bytes_and_index_interval_bytes",),
                           accepts=("1048576",), refuses=("13", "4294967296"), why="must be"),
    "index.interval.bytes": Entry(honoured_by=(f"{HERE}::test_segment_bytes_and_index_interval_bytes",),
                                  accepts=("0", "65536"), refuses=("-1",), why="at least 0"),
    "max.message.bytes": Entry(honoured_by=(f"{HERE}::test_max_message_bytes_limits_the_topic_batches",),
                               accepts=("2000", "10485760"), refuses=("-1",), why="at least 0"),
    # honoured vacuously: every takeover on the shared volume is clean
    "unclean.leader.election.enable": Entry(
        honoured_by=("tests/integration/test_cluster.py::test_failover_under_load_and_controller_loss",
                     "tests/integration/test_durability.py::test_sigkill_during_load_loses_no_acknowledged_write"),
        accepts=("true", "false")),
    # batch validation and recompression (docs/validation.rst)
    "compression.type": Entry(
        honoured_by=("tests/integration/test_produce_fetch.py::test_confluent_round_trip_all_codecs",
                     f"{VALIDATION}::test_compression_type_recompresses_every_producer_codec",
                     f"{VALIDATION}::test_compression_type_keeps_transactions"),
        accepts=("gzip", "snappy", "lz4", "zstd", "uncompressed"), refuses=("brotli",), why="must be one of"),
    "compression.gzip.level": Entry(honoured_by=(f"{VALIDATE_UNIT}::test_compression_levels",),
                                    accepts=("1", "9"), refuses=("0", "10"), why="between 1 and 9 or -1"),
    "compression.lz4.level": Entry(honoured_by=(f"{VALIDATE_UNIT}::test_compression_levels",),
                                   accepts=("1", "17"), refuses=("0", "18"), why="between 1 and 17"),
    "compression.zstd.level": Entry(honoured_by=(f"{VALIDATE_UNIT}::test_compression_levels",),
                                    accepts=("-5", "22"), refuses=("23",), why="between -131072 and 22"),
    "message.timestamp.before.max.ms": Entry(
        honoured_by=(f"{VALIDATION}::test_each_rule_is_answered_as_apache_and_appends_nothing",),
        accepts=("0", "60000"), refuses=("-1",), why="must not be negative"),
    "message.timestamp.after.max.ms": Entry(
        honoured_by=(f"{VALIDATION}::test_each_rule_is_answered_as_apache_and_appends_nothing",),
        accepts=("0", LONG_MAX), refuses=("-1",), why="must not be negative"),
    "file.delete.delay.ms": Entry(honoured_by=(
        "tests/integration/test_file_delete_delay.py::test_deleted_segments_and_topics_wait_out_the_delay",
        "tests/component/test_file_delete_delay.py"), accepts=("60000", "1", "0"), refuses=("-1",),
        why="must not be negative"),
    "flush.messages": Entry(honoured_by=("tests/component/test_flush.py",), accepts=("1", "10000"),
                            refuses=("0",), why="at least 1"),
    "flush.ms": Entry(honoured_by=("tests/component/test_flush.py",), accepts=("0", "1000"), refuses=("-1",),
                      why="at least 0"),
}


def test_every_topic_config_is_classified():
    assert set(WALK) == set(configs.TOPIC_CONFIGS), \
        "classify every key of kaas.configs.TOPIC_CONFIGS here: honoured (and tested) or refused"
    assert set(configs.HOW) == set(configs.TOPIC_CONFIGS), "kaas.configs.HOW documents every key"
    for name, e in WALK.items():
        assert e.honoured_by or e.refuses, f"{name}: neither honoured by a test nor refused"
        assert configs.default(Settings(), name) not in e.refuses
        for value in e.accepts:
            assert configs.validate(name, value) is None, (name, value)
        for value in e.refuses:
            err = configs.validate(name, value)
            assert err is not None and e.why in err, (name, value, err)


def _references():
    return [pytest.param(name, ref, id=f"{name}-{ref.rsplit('/', 1)[-1]}")
            for name, e in WALK.items() for ref in e.honoured_by]


@pytest.mark.parametrize(("name", "ref"), _references())
def test_honoured_keys_point_at_real_tests(name, ref):
    path, _, test = ref.partition("::")
    file = ROOT / path
    assert file.exists(), f"{path} (named for {name}, classified honoured by it) does not exist"
    if test:
        tree = ast.parse(file.read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert test in names, f"{ref} (named for {name}) is not a test of {path}"


# --------------------------------------------------------------------------- a real broker


cfg_broker = broker_fixture(scope="module", name="topic-configs", extra=["--retention-check-ms", "200"],
                            doc="One broker whose retention runs every 200 ms (topics are named per test).")


@pytest.fixture(scope="module")
def admin(cfg_broker):
    return AdminClient({"bootstrap.servers": cfg_broker.bootstrap})


def create(admin: AdminClient, name: str, config: dict[str, str]) -> None:
    admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(10)


def described(admin: AdminClient, name: str) -> dict:
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    return admin.describe_configs([res])[res].result(10)


def refused(fn) -> KafkaError:
    with pytest.raises(KafkaException) as ei:
        fn()
    err = ei.value.args[0]
    assert isinstance(err, KafkaError), err
    return err


def alter(admin: AdminClient, name: str, config: dict[str, str]) -> None:
    res = ConfigResource(ConfigResource.Type.TOPIC, name, set_config=config)
    admin.alter_configs([res])[res].result(10)


def incremental_set(admin: AdminClient, name: str, key: str, value: str) -> None:
    res = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, e in WALK.items() for v in e.accepts])
def test_honoured_values_are_taken(admin, name, value):
    topic = uniq("cfg-take")
    create(admin, topic, {name: value})
    cfg = described(admin, topic)[name]
    assert cfg.value == value and not cfg.is_default
    other = uniq("cfg-take-alter")
    create(admin, other, {})
    alter(admin, other, {name: value})
    assert described(admin, other)[name].value == value


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, e in WALK.items() for v in e.refuses])
def test_refused_values_answer_invalid_config(admin, name, value):
    why = WALK[name].why
    topic = uniq("cfg-refuse")
    err = refused(lambda: create(admin, topic, {name: value}))
    assert err.code() == KafkaError.INVALID_CONFIG and why in err.str(), err
    err = refused(lambda: described(admin, topic))
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART  # nothing was created

    default = configs.default(Settings(), name)
    create(admin, topic, {name: default})  # the default, set explicitly, is taken
    before = described(admin, topic)[name].value
    err = refused(lambda: alter(admin, topic, {name: value}))
    assert err.code() == KafkaError.INVALID_CONFIG and why in err.str(), err
    err = refused(lambda: incremental_set(admin, topic, name, value))
    assert err.code() == KafkaError.INVALID_CONFIG and why in err.str(), err
    assert described(admin, topic)[name].value == before


def test_broker_configs_read_only_and_refused(admin):
    """Dynamic broker configs are tests/integration/test_broker_configs.py's; here, on one
    broker: a read-only key gets Apache's INVALID_REQUEST, one kaas reads only at start
    INVALID_CONFIG with the reason, and nothing changes."""
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("num.partitions", "4", incremental_operation=AlterConfigOpType.SET)])
    err = refused(lambda: admin.incremental_alter_configs([res])[res].result(10))
    assert err.code() == KafkaError.INVALID_REQUEST and "Cannot update these configs dynamically" in err.str()
    res = ConfigResource(ConfigResource.Type.BROKER, "0", set_config={"listeners": "PLAINTEXT://:1"})
    err = refused(lambda: admin.alter_configs([res])[res].result(10))
    assert err.code() == KafkaError.INVALID_CONFIG and "at start" in err.str()
    res = ConfigResource(ConfigResource.Type.BROKER, "0")
    cfg = admin.describe_configs([res])[res].result(10)
    assert cfg["num.partitions"].value == "1" and cfg["num.partitions"].is_read_only


# --------------------------------------------------------------------------- behaviour


def produce(bootstrap: str, topic: str, values: list[bytes], timestamp: int = 0) -> list[KafkaError | None]:
    """One batch per value (flushed one by one); the delivery error of each."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": False,
                  "message.max.bytes": 20_000_000})
    errors: list[KafkaError | None] = []
    for v in values:
        p.produce(topic, value=v, partition=0, timestamp=timestamp,
                  on_delivery=lambda err, _msg: errors.append(err))
        assert p.flush(15) == 0
    return errors


def segment_files(broker: BrokerProcess, topic: str) -> list[Path]:
    return sorted((broker.data / "data" / topic / "0").glob("*.log"))


def test_segment_bytes_and_index_interval_bytes(admin, cfg_broker):
    """segment.bytes rolls the active segment at that size; index.interval.bytes=0 indexes
    every batch (in the closed segments' summaries), a large interval one per segment.
    AlterConfigs changes both on the partition being written."""
    topic = uniq("cfg-seg")
    create(admin, topic, {"segment.bytes": "4096", "index.interval.bytes": "0"})
    produce(cfg_broker.bootstrap, topic, [b"x" * 500] * 24)  # ~570 bytes a batch
    segs = segment_files(cfg_broker, topic)
    closed = segs[:-1]
    assert len(closed) >= 2
    for seg in closed:
        assert 4096 <= seg.stat().st_size < 4096 + 600
        summary = msgpack.unpackb(seg.with_suffix(".idx").read_bytes())
        assert len(summary["offsets"]) == summary["next_offset"] - int(seg.name[:20])  # one entry per batch

    alter(admin, topic, {"segment.bytes": "8192", "index.interval.bytes": "1048576"})
    produce(cfg_broker.bootstrap, topic, [b"y" * 500] * 40)
    later = [s for s in segment_files(cfg_broker, topic)[:-1] if s not in closed]
    assert len(later) >= 2
    for seg in later[1:]:  # (the first was the active segment at the alter)
        assert 8192 <= seg.stat().st_size < 8192 + 600
        assert len(msgpack.unpackb(seg.with_suffix(".idx").read_bytes())["offsets"]) == 1


def test_retention_ms_deletes_old_segments(admin, cfg_broker):
    """Segments whose newest record is older than retention.ms are deleted, the active one
    too when all its records are (Apache's UnifiedLog.deleteRetentionMsBreachedSegments):
    the log start moves to the log end, ListOffsets earliest and latest both answer it, and
    the next produce continues there. A recent record keeps the active segment; a topic
    with records younger than retention.ms keeps all of them."""
    old, mixed, young = uniq("cfg-ret-old"), uniq("cfg-ret-mixed"), uniq("cfg-ret-young")
    for t in (old, mixed, young):
        create(admin, t, {"segment.bytes": "4096", "retention.ms": "3600000", "cleanup.policy": "delete"})
    alter(admin, mixed, {"segment.bytes": "4096", "retention.ms": "-1"})  # until its last record is in
    bs = cfg_broker.bootstrap
    two_hours_ago = int(time.time() * 1000) - 2 * 3600 * 1000
    produce(bs, old, [b"o" * 500] * 24, timestamp=two_hours_ago)
    produce(bs, mixed, [b"m" * 500] * 20, timestamp=two_hours_ago)  # 8 batches a segment
    produce(bs, mixed, [b"recent"])  # into the active segment, beside 4 old records
    alter(admin, mixed, {"segment.bytes": "4096", "retention.ms": "3600000"})
    produce(bs, young, [b"y" * 500] * 24)
    assert wait_for(lambda: watermarks(bs, old) == (24, 24), what="the whole log deleted by time",
                    timeout=10.0, interval=0.1)
    [seg] = segment_files(cfg_broker, old)  # a new empty segment at the log end
    assert int(seg.name[:20]) == 24 and seg.stat().st_size == 0
    low, high = wait_for(lambda: (w := watermarks(bs, mixed))[0] > 0 and w, what="closed segments deleted",
                         timeout=10.0, interval=0.1)
    assert high == 21 and low == int(segment_files(cfg_broker, mixed)[0].name[:20]) < 20
    c = Consumer({"bootstrap.servers": bs, "group.id": uniq("ret"), "enable.auto.commit": False})
    try:
        [found] = c.offsets_for_times([TopicPartition(old, 0, two_hours_ago)], timeout=5)
        assert found.offset == -1  # no record at or after that time any more
        assert produce(bs, old, [b"after"]) == [None]
        c.assign([TopicPartition(old, 0, OFFSET_BEGINNING)])
        msg = wait_for(lambda: (m := c.poll(0.5)) is not None and m.error() is None and m, 10, "the new record")
        assert (msg.offset(), msg.value()) == (24, b"after")
    finally:
        c.close()
    assert watermarks(bs, old) == (24, 25)
    time.sleep(1.0)  # five retention passes
    assert watermarks(bs, young) == (0, 24)
    assert watermarks(bs, old) == (24, 25) and watermarks(bs, mixed) == (low, 21)


def test_retention_ms_makes_acks_1_appends_durable_before_deleting_them(admin, cfg_broker):
    """acks=1 appends are not fsynced by the produce; retention, finding the active segment
    due, runs the partition's group commit first and then deletes the whole log."""
    topic = uniq("cfg-ret-acks1")
    create(admin, topic, {"retention.ms": "3600000"})
    p = Producer({"bootstrap.servers": cfg_broker.bootstrap, "acks": "1", "linger.ms": 0,
                  "enable.idempotence": False})
    old = int(time.time() * 1000) - 2 * 3600 * 1000
    for _ in range(3):
        p.produce(topic, value=b"a1", partition=0, timestamp=old)
        assert p.flush(15) == 0
    assert wait_for(lambda: watermarks(cfg_broker.bootstrap, topic) == (3, 3), what="the acks=1 log deleted",
                    timeout=10.0, interval=0.1)


def test_retention_bytes_deletes_the_oldest_segments(admin, cfg_broker):
    """Altered down to 8 KiB, retention.bytes deletes the oldest closed segments until the
    partition is within one segment of it."""
    topic = uniq("cfg-ret-bytes")
    create(admin, topic, {"segment.bytes": "4096"})
    produce(cfg_broker.bootstrap, topic, [b"b" * 500] * 48)
    assert watermarks(cfg_broker.bootstrap, topic) == (0, 48)
    alter(admin, topic, {"segment.bytes": "4096", "retention.bytes": "8192"})
    low, high = wait_for(lambda: (w := watermarks(cfg_broker.bootstrap, topic))[0] > 0 and w,
                         what="retention by size", timeout=10.0, interval=0.1)
    sizes = [s.stat().st_size for s in segment_files(cfg_broker, topic)]
    assert high == 48 and sum(sizes) - sizes[0] < 8192 <= sum(sizes)


def test_max_message_bytes_limits_the_topic_batches(admin, cfg_broker):
    """max.message.bytes bounds the batches of its topic (above the broker's default too)
    and an alter takes effect on the next produce."""
    small, big = uniq("cfg-max-small"), uniq("cfg-max-big")
    create(admin, small, {"max.message.bytes": "2000"})
    create(admin, big, {"max.message.bytes": "3000000"})
    bs = cfg_broker.bootstrap
    assert produce(bs, small, [b"s" * 1000]) == [None]
    [err] = produce(bs, small, [b"s" * 5000])
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert watermarks(bs, small) == (0, 1)
    assert produce(bs, big, [b"b" * 2_000_000]) == [None]  # the broker default is 1 MiB
    alter(admin, small, {"max.message.bytes": "10000"})
    assert produce(bs, small, [b"s" * 5000]) == [None]
