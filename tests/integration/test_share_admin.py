"""The operator side of KIP-932 share groups on two real kaas brokers, with confluent-kafka's
``ShareConsumer`` as the members: ``kaas groups list|describe`` (start offset, lag and the
records in flight per share partition), ``kaas groups reset-offsets`` (AlterShareGroupOffsets,
refused while the group has members) whose new start offsets the next consumer reads from,
``kaas inspect shares``, and DeleteGroups (confluent-kafka's AdminClient) taking the share
state along. The partitions are led by both brokers, so the group's coordinator asks a peer
for some of them. (confluent-kafka 2.16's AdminClient has no share-group offsets calls: the
kaas CLI speaks APIs 90 and 91.)"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient

from kaas.cli import cli
from kaas.testing import wait_for
from tests.fixtures import cluster_fixture
from tests.integration.test_share_groups import FLAGS, group_configs
from tests.kafka import create_topic, uniq

pytestmark = pytest.mark.slow

shcluster = cluster_fixture(2, scope="module", name="share-admin", extra=FLAGS,
                            doc="Two brokers: a share group's partitions led by both.")
PARTS, PER = 4, 10


def run(*args: object, ok: bool = True) -> dict:
    res = CliRunner().invoke(cli, [str(a) for a in args] + ["--json"])
    assert (res.exit_code == 0) == ok, (args, res.output, res.exception)
    return json.loads(res.stdout) if ok else {"output": res.output}


def by_partition(doc: dict) -> dict[int, dict]:
    return {r["partition"]: r for r in doc["offsets"]}


def test_describe_reset_inspect_and_delete_a_share_group(shcluster):
    bs, topic, group = shcluster.bootstrap, uniq("sh-admin"), uniq("g-admin")
    create_topic(bs, topic, PARTS)
    group_configs(bs, group, share_auto_offset_reset="earliest")
    p = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for part in range(PARTS):
        for i in range(PER):
            p.produce(topic, f"{part}-{i}".encode(), partition=part)
    assert p.flush(15) == 0
    leaders = {row["leader"] for row in run("topics", "describe", topic, "--bootstrap", bs)[0]["partitions"]}
    assert leaders == {0, 1}, "the partitions are led by both brokers"

    a = ShareConsumer({"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"})
    a.subscribe([topic])
    held: list = []
    wait_for(lambda: held.extend(a.poll(0.5)) or len(held) > 0, 20, "a first delivery")
    # held, not acknowledged: in flight (acquired) and still lag, on the partitions fetched
    # so far (a share partition gets its state at its first fetch)
    d = run("groups", "describe", group, "--bootstrap", bs)
    assert (d["group_protocol"], d["state"], len(d["members"])) == ("share", "Stable", 1)
    rows = by_partition(d)
    assert sorted(rows) == list(range(PARTS))  # every partition is assigned to the member
    assert sum(r["acquired"] or 0 for r in rows.values()) == len(held)
    fetched = [r for r in rows.values() if r["start_offset"] is not None]
    assert fetched and all((r["start_offset"], r["lag"]) == (0, PER) for r in fetched)
    assert group in {g["group_id"] for g in run("groups", "list", "--type", "share", "--bootstrap", bs)}

    got = list(held)
    for m in held:
        a.acknowledge(m, AcknowledgeType.ACCEPT)

    def drained() -> bool:
        for m in a.poll(0.5):
            a.acknowledge(m, AcknowledgeType.ACCEPT)
            got.append(m)
        return len(got) >= PARTS * PER
    wait_for(drained, 30, "every record delivered")
    a.commit_sync(10)
    rows = by_partition(run("groups", "describe", group, "--bootstrap", bs))
    assert {p: (r["start_offset"], r["lag"], r["in_flight"]) for p, r in rows.items()} == \
        dict.fromkeys(range(PARTS), (PER, 0, 0))

    # refused while the consumer is a member (the tool checks, and so does the broker)
    assert "not empty" in run("groups", "reset-offsets", group, "--all-topics", "--to-earliest", "--execute",
                              "--bootstrap", bs, ok=False)["output"]
    a.close()
    wait_for(lambda: run("groups", "describe", group, "--bootstrap", bs)["state"] == "Empty", 20, "group empty")
    plan = run("groups", "reset-offsets", group, "--all-topics", "--to-earliest", "--execute", "--bootstrap", bs)
    assert [(r["partition"], r["current_offset"], r["new_offset"]) for r in plan["offsets"]] == \
        [(p, PER, 0) for p in range(PARTS)]
    plan = run("groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "5", "--execute",
               "--bootstrap", bs)
    assert [(r["partition"], r["new_offset"]) for r in plan["offsets"]] == [(0, 5)]
    rows = by_partition(run("groups", "describe", group, "--bootstrap", bs))
    assert {p: (r["start_offset"], r["lag"]) for p, r in rows.items()} == {0: (5, 5), 1: (0, PER), 2: (0, PER),
                                                                          3: (0, PER)}

    # the next member reads from the new start offsets, on both brokers' partitions
    b = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    b.subscribe([topic])
    again: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(again) < PARTS * PER - 5 and time.monotonic() < deadline:
        again += [m.value() for m in b.poll(0.5)]
    b.commit_sync(10)
    b.close()
    assert sorted(again) == sorted(f"{p}-{i}".encode() for p in range(PARTS) for i in range(PER)
                                   if p != 0 or i >= 5)

    # the files, offline: every partition's state of the group
    shares = run("inspect", "shares", topic, "1", "--data", shcluster.data)
    (st,) = [g for g in shares["groups"] if g["group"] == group]
    assert (st["start"], st["end"], st["error"]) == (PER, PER, None)
    text = CliRunner().invoke(cli, ["inspect", "shares", topic, "1", "--data", str(shcluster.data), "--ranges"])
    assert text.exit_code == 0 and f"Start offset: {PER}\tEnd offset: {PER}" in text.stdout, text.output

    # DeleteGroups once empty takes the share state along
    admin = AdminClient({"bootstrap.servers": bs})
    wait_for(lambda: admin.delete_consumer_groups([group])[group].exception(15) is None, 20, "deleted once empty")
    for part in range(PARTS):
        assert group not in [g["group"] for g in run("inspect", "shares", topic, part, "--data", shcluster.data)
                             ["groups"]]
    assert group not in {g["group_id"] for g in run("groups", "list", "--type", "share", "--bootstrap", bs)}
