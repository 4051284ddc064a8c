"""The operator tools: `kaas topics`, `kaas groups` against real brokers (one, and a
3-broker cluster) and the offline `kaas inspect` commands against a data directory with
known content, asserting on their --json output."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition

from kaas.cli import cli
from kaas.testing import ClusterProcess, wait_for
from tests.kafka import uniq

pytestmark = pytest.mark.slow


def invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def run(*args: str):
    """Run a command with --json; it must succeed; returns the parsed stdout."""
    res = invoke(*args, "--json")
    assert res.exit_code == 0, (args, res.output, res.exception)
    return json.loads(res.stdout)


def human(*args: str) -> str:
    res = invoke(*args)
    assert res.exit_code == 0, (args, res.output, res.exception)
    return res.stdout


def fails(*args: str) -> str:
    res = invoke(*args)
    assert res.exit_code != 0, (args, res.output)
    return res.output


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2})
    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, value=f"{part}-{i}".encode(), partition=part)
    assert p.flush(20) == 0


def leaders_ready(bs: str, topic: str):
    rows = run("topics", "describe", topic, "--bootstrap", bs)
    parts = rows[0]["partitions"]
    return rows if parts and all(p["leader"] >= 0 and p["leader_epoch"] >= 1 for p in parts) else None


# --------------------------------------------------------------------------- health


def test_health_answers_0_for_a_serving_broker_and_1_otherwise(shared_broker):
    res = invoke("health", "--bootstrap", shared_broker.bootstrap)
    assert res.exit_code == 0 and "ok" in res.output
    from kaas.testing import free_port

    res = invoke("health", "--bootstrap", f"127.0.0.1:{free_port()}", "--timeout", "1")
    assert res.exit_code == 1 and "not healthy" in res.output
    assert invoke("health", "--bootstrap", f"127.0.0.1:{free_port()}", "-q").output == ""


# --------------------------------------------------------------------------- topics


def test_topics(shared_broker):
    bs = shared_broker.bootstrap
    name = uniq("tools-topic")
    out = run("topics", "create", name, "--partitions", "3", "--config", "retention.ms=123456",
              "--config", "cleanup.policy=delete", "--bootstrap", bs)
    assert out["created"] and out["partitions"] == 3 and out["topic_id"] and out["replication_factor"] == 1
    assert "INVALID_REPLICATION_FACTOR" in fails("topics", "create", uniq("tools-rf"), "--replication-factor", "2",
                                                 "--bootstrap", bs)
    assert "TOPIC_ALREADY_EXISTS" in fails("topics", "create", name, "--bootstrap", bs)
    again = run("topics", "create", name, "--if-not-exists", "--bootstrap", bs)
    assert again["created"] is False and again["exists"] is True
    assert "INVALID_CONFIG" in fails("topics", "create", uniq("tools-bad"), "--config", "no.such.config=1",
                                     "--bootstrap", bs)
    assert "KEY=VALUE" in fails("topics", "create", uniq("tools-bad"), "--config", "novalue", "--bootstrap", bs)

    listed = {r["name"]: r for r in run("topics", "list", "--bootstrap", bs)}
    assert listed[name]["partition_count"] == 3 and listed[name]["topic_id"] == out["topic_id"]

    rows = wait_for(lambda: leaders_ready(bs, name), what="leaders of the new topic", timeout=15.0, interval=0.1)
    (d,) = rows
    assert d["name"] == name and d["topic_id"] == out["topic_id"] and d["partition_count"] == 3
    assert [p["partition"] for p in d["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == 0 and p["replicas"] == [0] and p["isr"] == [0] and p["offline"] == []
               for p in d["partitions"])
    assert d["replication_factor"] == 1
    assert d["configs"] == {"retention.ms": "123456", "cleanup.policy": "delete"}
    text = human("topics", "describe", name, "--bootstrap", bs)
    assert f"Topic: {name}" in text and "PartitionCount: 3" in text and "retention.ms=123456" in text
    assert "ReplicationFactor: 1" in text and "OFFLINE" in text
    assert "LEADER_EPOCH" in text
    assert name in human("topics", "list", "--bootstrap", bs)
    # describe of everything includes it; of an unknown topic fails
    assert name in {r["name"] for r in run("topics", "describe", "--bootstrap", bs)}
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails("topics", "describe", uniq("tools-none"), "--bootstrap", bs)

    deleted = run("topics", "delete", name, "--bootstrap", bs)
    assert deleted == [{"name": name, "topic_id": out["topic_id"], "deleted": True, "error": None}]
    assert name not in {r["name"] for r in run("topics", "list", "--bootstrap", bs)}
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails("topics", "delete", name, "--bootstrap", bs)
    assert run("topics", "delete", name, "--if-exists", "--bootstrap", bs)[0]["deleted"] is False
    assert "no broker answered" in fails("topics", "list", "--bootstrap", "127.0.0.1:1")


# --------------------------------------------------------------------------- groups


def test_groups(shared_broker):
    bs = shared_broker.bootstrap
    topic, group = uniq("tools-gt"), uniq("tools-g")
    run("topics", "create", topic, "--partitions", "2", "--bootstrap", bs)
    wait_for(lambda: leaders_ready(bs, topic), what="leaders", timeout=15.0, interval=0.1)
    produce(bs, topic, {0: 5, 1: 5})

    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                  "client.id": "tools-client"})
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 20
        while got < 10 and time.monotonic() < deadline:
            got += sum(1 for m in c.consume(10, 0.2) if not m.error())
        assert got == 10
        c.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 5)], asynchronous=False)

        d = run("groups", "describe", group, "--bootstrap", bs)
        assert d["state"] == "Stable" and d["protocol_type"] == "consumer" and d["coordinator"]["id"] == 0
        (member,) = d["members"]
        assert member["client_id"] == "tools-client"
        assert member["assignment"] == [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]
        offs = {o["partition"]: o for o in d["offsets"]}
        assert (offs[0]["current_offset"], offs[0]["log_end_offset"], offs[0]["lag"]) == (3, 5, 2)
        assert (offs[1]["current_offset"], offs[1]["log_end_offset"], offs[1]["lag"]) == (5, 5, 0)
        assert offs[0]["consumer_id"] == member["member_id"] and offs[0]["client_id"] == "tools-client"
        text = human("groups", "describe", group, "--bootstrap", bs)
        assert "LOG_END_OFFSET" in text and "Stable" in text and member["member_id"] in text

        listed = {r["group_id"]: r for r in run("groups", "list", "--bootstrap", bs)}
        assert listed[group]["state"] == "Stable" and listed[group]["coordinator"] == 0
        assert group in {r["group_id"] for r in run("groups", "list", "--state", "Stable", "--bootstrap", bs)}
        assert group not in {r["group_id"] for r in run("groups", "list", "--state", "Empty", "--bootstrap", bs)}

        err = fails("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute",
                    "--bootstrap", bs)
        assert "can only be reset if the group" in err and "Stable" in err
    finally:
        c.close()

    wait_for(lambda: run("groups", "describe", group, "--bootstrap", bs)["state"] == "Empty", what="an Empty group",
             timeout=15.0, interval=0.1)
    plan = run("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--bootstrap", bs)
    assert plan["executed"] is False
    assert [(o["partition"], o["current_offset"], o["new_offset"]) for o in plan["offsets"]] == [(0, 3, 0), (1, 5, 0)]
    d = run("groups", "describe", group, "--bootstrap", bs)
    assert {o["partition"]: o["current_offset"] for o in d["offsets"]} == {0: 3, 1: 5}  # a dry run commits nothing

    done = run("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", "--bootstrap", bs)
    assert done["executed"] is True
    d = run("groups", "describe", group, "--bootstrap", bs)
    assert d["members"] == [] and {o["partition"]: (o["current_offset"], o["lag"]) for o in d["offsets"]} == \
        {0: (0, 5), 1: (0, 5)}

    run("groups", "reset-offsets", group, "--topic", f"{topic}:1", "--to-offset", "99", "--execute", "--bootstrap", bs)
    run("groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-latest", "--execute", "--bootstrap", bs)
    d = run("groups", "describe", group, "--bootstrap", bs)
    assert {o["partition"]: o["current_offset"] for o in d["offsets"]} == {0: 5, 1: 5}  # 99 clamped to the log end
    out = run("groups", "reset-offsets", group, "--all-topics", "--shift-by", "-2", "--execute", "--bootstrap", bs)
    assert [(o["partition"], o["new_offset"]) for o in out["offsets"]] == [(0, 3), (1, 3)]
    d = run("groups", "describe", group, "--bootstrap", bs)
    assert {o["partition"]: o["lag"] for o in d["offsets"]} == {0: 2, 1: 2}
    assert "dry run" in human("groups", "reset-offsets", group, "--all-topics", "--to-latest", "--bootstrap", bs)

    assert group in {r["group_id"] for r in run("groups", "list", "--state", "Empty", "--bootstrap", bs)}
    assert "exactly one of" in fails("groups", "reset-offsets", group, "--all-topics", "--bootstrap", bs)
    assert "--topic" in fails("groups", "reset-offsets", group, "--to-latest", "--bootstrap", bs)
    nobody = run("groups", "describe", uniq("tools-nobody"), "--bootstrap", bs)
    assert nobody["state"] == "Dead" and nobody["members"] == [] and nobody["offsets"] == []


# --------------------------------------------------------------------------- a 3-broker cluster


def test_cluster_topics_groups_and_inspect(tmp_path):
    with ClusterProcess(tmp_path / "data", 3).running() as cluster:
        bs = cluster.bootstrap
        first = f"127.0.0.1:{cluster.ports[0]}"
        topic = uniq("tools-ct")
        run("topics", "create", topic, "--partitions", "6", "--bootstrap", first)
        rows = wait_for(lambda: (r := leaders_ready(bs, topic)) and
                        {p["leader"] for p in r[0]["partitions"]} == {0, 1, 2} and r, what="leaders on every broker",
                        timeout=30, interval=0.1)
        parts = rows[0]["partitions"]
        produce(bs, topic, {p: 2 for p in range(6)})

        groups = [f"tools-cg-{i}" for i in range(8)]
        for i, g in enumerate(groups):  # new groups: commits at generation -1 (retried while coordinators load)
            out = run("groups", "reset-offsets", g, "--topic", f"{topic}:{i % 6}", "--to-offset", "1", "--execute",
                      "--bootstrap", first)
            assert out["state"] == "Dead"
            assert [(o["partition"], o["new_offset"]) for o in out["offsets"]] == [(i % 6, 1)]
        listed = {r["group_id"]: r for r in run("groups", "list", "--bootstrap", bs)}
        assert set(groups) <= set(listed)
        assert {listed[g]["state"] for g in groups} == {"Empty"}
        assert len({listed[g]["coordinator"] for g in groups}) > 1  # spread over the brokers
        for i, g in enumerate(groups):
            d = run("groups", "describe", g, "--bootstrap", first)  # FindCoordinator leads elsewhere
            assert d["coordinator"]["id"] == listed[g]["coordinator"]
            assert [(o["topic"], o["partition"], o["current_offset"], o["log_end_offset"], o["lag"])
                    for o in d["offsets"]] == [(topic, i % 6, 1, 2, 1)]

        info = run("inspect", "cluster", "--data", cluster.data)
        a = info["assignment"]
        assert a["error"] is None and a["version"] >= 1 and a["brokers"] == [0, 1, 2]
        assert [(p["leader"], p["epoch"]) for p in a["partitions"][topic]] == \
            [(p["leader"], p["leader_epoch"]) for p in parts]
        assert sum(a["txn_slot_owners"].values()) == 50
        assert info["controller"]["broker_id"] in (0, 1, 2) and info["controller"]["epoch"] >= 1
        assert info["controller"]["epoch"] == a["controller_epoch"]
        hb = {b["broker_id"]: b for b in info["brokers"]}
        assert sorted(hb) == [0, 1, 2]
        for bid, b in hb.items():
            assert b["counter"] > 0 and b["address"] == f"127.0.0.1:{cluster.ports[bid]}" and b["draining"] is False
            assert b["applied_version"] >= 1 and b["age_s"] < 3 and not b["stale"]
        mine = [p for p in info["partitions"] if p["topic"] == topic]
        assert [p["partition"] for p in mine] == list(range(6))
        assert all(p["manifest_epoch"] == p["leader_epoch"] and p["high_watermark"] is not None for p in mine)
        assert {g["group_id"] for g in info["groups"]} >= set(groups)
        assert all(q["depth"] == 0 for q in info["marker_queues"])
        assert topic in {t["name"] for t in info["topics"]}
        text = human("inspect", "cluster", "--data", cluster.data)
        assert "Assignment: version" in text and "Marker queues" in text


# --------------------------------------------------------------------------- offline inspectors


def tree_state(root: Path) -> dict[str, tuple]:
    """Every file and directory under root with its mtime, size and content digest."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        st = os.stat(dirpath)
        out[dirpath] = ("dir", st.st_mtime_ns, tuple(sorted(dirnames + filenames)))
        for f in filenames:
            p = os.path.join(dirpath, f)
            st = os.stat(p)
            out[p] = (st.st_mtime_ns, st.st_size, hashlib.sha256(Path(p).read_bytes()).hexdigest())
    return out


def test_inspect_offline(broker):
    bs, data = broker.bootstrap, broker.data
    topic = "tools-insp"
    run("topics", "create", topic, "--partitions", "1", "--bootstrap", bs)
    wait_for(lambda: leaders_ready(bs, topic), what="leader", timeout=15.0, interval=0.1)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 50})
    for i in range(3):
        p.produce(topic, value=f"plain-{i}".encode(), partition=0)
    assert p.flush(10) == 0
    t = Producer({"bootstrap.servers": bs, "transactional.id": "tools-insp-txn", "linger.ms": 50})
    t.init_transactions(20)
    t.begin_transaction()
    t.produce(topic, value=b"committed-0", partition=0)
    t.produce(topic, value=b"committed-1", partition=0)
    t.commit_transaction(20)
    t.begin_transaction()
    t.produce(topic, value=b"aborted-0", partition=0)
    t.flush(10)
    t.abort_transaction(20)
    del p, t
    assert broker.stop() == 0

    before = tree_state(data)

    log = run("inspect", "log", topic, "0", "--data", data)
    batches = log["batches"]
    # (the manifest's high_watermark is only a hint refreshed on relinquish: not checked)
    assert log["manifest"]["epoch"] >= 1 and log["manifest_error"] is None
    assert max(s["next_offset"] for s in log["segments"]) == batches[-1]["last_offset"] + 1
    nxt = 0
    for b in batches:
        assert b["base_offset"] == nxt and b["crc_ok"] and not b["dead"] and b["magic"] == 2
        assert b["segment"].endswith(f"-e{b['segment_epoch']}.log")
        nxt = b["last_offset"] + 1
    data_batches = [b for b in batches if not b["control"]]
    markers = [b for b in batches if b["control"]]
    assert sum(b["count"] for b in data_batches) == 6
    plain = [b for b in data_batches if not b["transactional"]]
    txn = [b for b in data_batches if b["transactional"]]
    assert sum(b["count"] for b in plain) == 3 and sum(b["count"] for b in txn) == 3
    assert plain[0]["base_sequence"] == 0 and plain[0]["producer_id"] >= 0
    txn_pid = txn[0]["producer_id"]
    assert txn_pid != plain[0]["producer_id"] and {b["producer_id"] for b in txn} == {txn_pid}
    assert [m["control_type"] for m in markers] == ["COMMIT", "ABORT"]
    assert all(m["transactional"] and m["producer_id"] == txn_pid and m["base_sequence"] == -1 for m in markers)
    commit_at, abort_at = markers[0]["base_offset"], markers[1]["base_offset"]
    assert sum(b["count"] for b in txn if b["base_offset"] < commit_at) == 2
    assert sum(b["count"] for b in txn if commit_at < b["base_offset"] < abort_at) == 1
    positions = [b["position"] for b in batches if b["segment"] == batches[0]["segment"]]
    assert positions[0] == 0 and positions == sorted(positions)
    seg = next(s for s in log["segments"] if s["file"] == batches[-1]["segment"])
    assert seg["epoch"] == batches[-1]["segment_epoch"] and seg["torn_bytes"] == 0 and seg["bad_crc"] == 0
    aborted_first = min(b["base_offset"] for b in txn if commit_at < b["base_offset"] < abort_at)
    assert {"marker_offset": abort_at, "producer_id": txn_pid, "first_offset": aborted_first} in \
        [a for s in log["segments"] for a in (s["aborted_txns"] or [])]

    limited = run("inspect", "log", topic, "0", "--data", data, "--limit", "2")
    assert len(limited["batches"]) == 2 and limited["truncated"] is True
    assert [b["base_offset"] for b in run("inspect", "log", topic, "0", "--data", data,
                                          "--start-offset", abort_at)["batches"]] == [abort_at]
    text = human("inspect", "log", topic, "0", "--data", data)
    assert "CONTROL:COMMIT" in text and "CONTROL:ABORT" in text and "MISMATCH" not in text
    assert "no partition directory" in fails("inspect", "log", topic, "7", "--data", data)

    slots = run("inspect", "slots", "--data", data)
    assert slots["corrupt"] == []
    (entry,) = [(s, x) for s in slots["slots"] for x in s["transactions"] if x["transactional_id"] == "tools-insp-txn"]
    slot, tx = entry
    assert tx["state"] == "CompleteAbort" and tx["producer_id"] == txn_pid
    assert tx["transaction_version"] == 1 and tx["next_producer_id"] == -1  # librdkafka: EndTxn below v5
    assert tx["producer_epoch"] == markers[1]["producer_epoch"] and tx["partitions"] == []
    assert "tools-insp-txn" in human("inspect", "slots", "--data", data)
    assert [x for s in run("inspect", "slots", "--data", data, "--state", "Ongoing")["slots"]
            for x in s["transactions"]] == []

    info = run("inspect", "cluster", "--data", data)
    assert info["assignment"]["partitions"][topic][0]["epoch"] >= 1
    assert [b["broker_id"] for b in info["brokers"]] == [0] and info["brokers"][0]["counter"] > 0
    (prow,) = [x for x in info["partitions"] if x["topic"] == topic]
    assert prow["manifest_epoch"] >= 1 and prow["segments"] >= 1 and prow["error"] is None
    assert {t["name"]: t["partitions"] for t in info["topics"]}[topic] == 1
    assert all(q["depth"] == 0 for q in info["marker_queues"])
    human("inspect", "cluster", "--data", data)

    assert tree_state(data) == before, "an inspector modified the data directory"

    # A flipped byte inside a batch's records: its CRC no longer matches.
    victim = txn[0]
    seg_path = data / "data" / topic / "0" / victim["segment"]
    raw = bytearray(seg_path.read_bytes())
    raw[victim["position"] + victim["size"] - 2] ^= 0xFF
    seg_path.write_bytes(bytes(raw))
    after = run("inspect", "log", topic, "0", "--data", data)["batches"]
    assert [b["crc_ok"] for b in after] == [b["base_offset"] != victim["base_offset"] for b in batches]
    assert "MISMATCH" in human("inspect", "log", topic, "0", "--data", data)

    # A corrupt slot file is reported, not skipped.
    slot_path = data / "__cluster" / "txn_state" / slot["file"]
    slot_path.write_bytes(b"{not json")
    slots = run("inspect", "slots", "--data", data)
    assert slots["corrupt"] == [slot["file"]]
    bad = next(s for s in slots["slots"] if s["file"] == slot["file"])
    assert bad["ok"] is False and "invalid JSON" in bad["error"]
    assert f"CORRUPT {slot['file']}" in human("inspect", "slots", "--data", data)


def test_inspect_log_dead_and_torn(tmp_path):
    """Recovery's view without a broker: a segment superseded by a newer epoch at the same
    base is dead, bytes of an older segment past the next segment's base are dead, and a
    torn tail is counted, not parsed."""
    from kaas.wire.batch import build_batch

    pdir = tmp_path / "data" / "t" / "0"
    pdir.mkdir(parents=True)

    def batch(offset: int, n: int, epoch: int) -> bytes:
        return build_batch(base_offset=offset, leader_epoch=epoch, records=[(None, b"v")] * n)

    (pdir / f"{0:020d}-e0.log").write_bytes(batch(0, 1, 0))
    e1 = batch(0, 1, 1) + batch(1, 1, 1) + batch(2, 1, 1)
    (pdir / f"{0:020d}-e1.log").write_bytes(e1 + b"\x00" * 10)
    (pdir / f"{2:020d}-e2.log").write_bytes(batch(2, 2, 2))
    before = tree_state(tmp_path)
    out = run("inspect", "log", "t", "0", "--data", tmp_path)
    segs = {s["file"]: s for s in out["segments"]}
    assert segs[f"{0:020d}-e0.log"]["dead"] is True
    s1 = segs[f"{0:020d}-e1.log"]
    assert not s1["dead"] and s1["torn_bytes"] == 10 and s1["batches"] == 3
    assert s1["recoverable_bytes"] == len(batch(0, 1, 1)) * 2  # cut where the dead batch at 2 starts
    rows = [(b["segment_epoch"], b["base_offset"], b["last_offset"], b["dead"], b["crc_ok"]) for b in out["batches"]]
    assert rows == [(0, 0, 0, True, True), (1, 0, 0, False, True), (1, 1, 1, False, True), (1, 2, 2, True, True),
                    (2, 2, 3, False, True)]
    assert out["manifest"] is None and out["manifest_error"] is None
    assert "DEAD" in human("inspect", "log", "t", "0", "--data", tmp_path)
    assert tree_state(tmp_path) == before


def test_inspect_cluster_shows_the_live_high_watermark(broker):
    """A broker still running with 5,000 records written: `kaas inspect cluster` shows a
    high watermark of 5,000 (read from the segments), not the manifest's copy, which is
    written only at a hand-over."""
    bs, data = broker.bootstrap, broker.data
    topic = "tools-hw"
    run("topics", "create", topic, "--partitions", "1", "--config", "segment.bytes=4096", "--bootstrap", bs)
    wait_for(lambda: leaders_ready(bs, topic), what="leader", timeout=15.0, interval=0.1)
    for _ in range(10):  # at least ten batches of ~6 KB: at least ten segments
        produce(bs, topic, {0: 500})
    info = run("inspect", "cluster", "--data", data)
    (row,) = [x for x in info["partitions"] if x["topic"] == topic]
    assert row["high_watermark"] == 5000 and row["error"] is None
    assert row["segments"] > 1  # the end is past the first segment
    assert row["manifest_high_watermark"] != 5000  # the stale copy the column used to show
    text = human("inspect", "cluster", "--data", data)
    head, line = [ln.split() for ln in text.split("Partitions", 1)[1].splitlines()
                  if ln.startswith(("TOPIC", topic))][:2]
    assert line[head.index("HIGH_WATERMARK")] == "5000"
    assert broker.alive()


def test_inspect_cluster_high_watermark_from_segment_files(tmp_path):
    """Without a broker: the end of the last live segment (a dead segment of an older epoch
    and a torn tail do not count); a summary (.idx) covering the whole segment is used, a
    stale one (the segment grew since) is not."""
    import msgpack

    from kaas.wire.batch import build_batch

    pdir = tmp_path / "data" / "t" / "0"
    pdir.mkdir(parents=True)

    def batch(offset: int, n: int, epoch: int) -> bytes:
        return build_batch(base_offset=offset, leader_epoch=epoch, records=[(None, b"v")] * n)

    def end() -> int:
        (row,) = run("inspect", "cluster", "--data", tmp_path)["partitions"]
        return row["high_watermark"]

    (pdir / f"{0:020d}-e1.log").write_bytes(batch(0, 1, 1) + batch(1, 1, 1) + batch(2, 1, 1))
    last = pdir / f"{2:020d}-e2.log"
    last.write_bytes(b"")
    assert end() == 2  # an empty active segment: its base
    last.write_bytes(batch(2, 2, 2) + batch(4, 1, 2) + b"\x00" * 10)
    (pdir / f"{5:020d}-e1.log").write_bytes(batch(5, 3, 1))  # older epoch than a segment before it: dead
    assert end() == 5
    last.write_bytes(batch(2, 2, 2))
    last.with_suffix(".idx").write_bytes(msgpack.packb({"format": 1, "size": last.stat().st_size, "next_offset": 7}))
    assert end() == 7  # the summary is trusted when it covers the file (a made-up 7 shows it was read)
    with open(last, "ab") as f:
        f.write(batch(4, 1, 2))
    assert end() == 5


def test_inspect_log_shows_what_recovery_cut(tmp_path):
    """A takeover that truncates a torn tail says so, and `kaas inspect log` shows the
    segment, the byte range, the offset and the reason afterwards."""
    from kaas.storage.partition_log import LogConfig, PartitionLog
    from kaas.wire.batch import build_batch, validate_produce

    pdir = tmp_path / "data" / "t" / "0"
    log = PartitionLog(pdir, LogConfig(fsync=False))
    log.open()
    for _ in range(3):
        raw = build_batch(records=[(None, b"v" * 10)])
        log.append(raw, validate_produce(raw, 1 << 20))
    active = log.active
    good = active.size
    log.abandon()
    with open(active.path, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x01\x00torn")
    again = PartitionLog(pdir, LogConfig(fsync=False))
    again.open()
    again.close()
    out = run("inspect", "log", "t", "0", "--data", tmp_path)
    [cut] = out["recoveries"]
    assert (cut["segment"], cut["action"], cut["from_byte"], cut["to_byte"], cut["from_offset"]) == \
        (active.path.name, "truncated", good, good + 16, 3)
    text = human("inspect", "log", "t", "0", "--data", tmp_path)
    assert "Recovery cuts" in text and active.path.name in text and cut["reason"] in text
