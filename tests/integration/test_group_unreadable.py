"""A classic group whose membership on file does not parse, on a real broker process
(docs/groups.rst, "Group kinds"): reported once in the broker log, every request that
depends on the membership refused with UNKNOWN_SERVER_ERROR, the file left as it is (the
committed offsets in it kept), ListGroups still listing the group; and the way out the
docs give: the offsets read from the file (``kaas inspect cluster``), ``kaas groups
delete``, ``kaas groups reset-offsets`` to commit them again, after which the id serves a
new group."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode as E

from kaas.cli import cli
from kaas.client import WireClient
from kaas.testing import BrokerProcess, wait_for
from tests.fixtures import broker_fixture
from tests.kafka import create_topic, uniq

pytestmark = pytest.mark.slow

JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT, FETCH, DESCRIBE, LIST, DELETE = 11, 14, 12, 13, 8, 9, 15, 16, 42
OFFSET_DELETE, CONSUMER_HEARTBEAT, SHARE_HEARTBEAT = 47, 68, 76
RETRIABLE = (E.coordinator_load_in_progress, E.not_coordinator, E.coordinator_not_available)
SUBSCRIPTION = b"\x00\x01\x00\x00\x00\x01\x00\x01q\xff\xff\xff\xff"  # ConsumerProtocolSubscription v1: ["q"]

broker = broker_fixture(extra=["--group-initial-rebalance-delay-ms", "0"],
                        doc="A broker of the test's own: it is killed and restarted on the damaged file.")


def join(wc: WireClient, group: str, member: str = "") -> object:
    return wc.call(JOIN, 8, {"group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000,
                             "member_id": member, "group_instance_id": "static-1", "protocol_type": "consumer",
                             "protocols": [{"name": "range", "metadata": SUBSCRIPTION}], "reason": None})


def stable_group(wc: WireClient, group: str, topic: str) -> tuple[str, int]:
    """A Stable classic group of one static member, with offset 7 committed on ``topic``-0."""
    j = join(wc, group)
    assert j.error_code == E.none, j
    s = wc.call(SYNC, 5, {"group_id": group, "generation_id": j.generation_id, "member_id": j.member_id,
                          "group_instance_id": "static-1", "protocol_type": "consumer", "protocol_name": "range",
                          "assignments": [{"member_id": j.member_id, "assignment": b""}]})
    assert s.error_code == E.none, s
    assert commit(wc, group, topic, j.member_id, j.generation_id, 7) == E.none
    return j.member_id, j.generation_id


def commit(wc: WireClient, group: str, topic: str, member: str, generation: int, offset: int) -> E:
    r = wc.call(COMMIT, 8, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
                            "group_instance_id": None,
                            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                       "committed_leader_epoch": -1,
                                                                       "committed_metadata": ""}]}]})
    return r.topics[0].partitions[0].error_code


def fetch(wc: WireClient, group: str, topic: str) -> E:
    return wc.call(FETCH, 8, {"groups": [{"group_id": group, "topics": [
        {"name": topic, "partition_indexes": [0]}]}], "require_stable": False}).groups[0].error_code


def fetch_offset(wc: WireClient, group: str, topic: str) -> int:
    r = wc.call(FETCH, 8, {"groups": [{"group_id": group, "topics": [
        {"name": topic, "partition_indexes": [0]}]}], "require_stable": False})
    [part] = r.groups[0].topics[0].partitions
    assert (r.groups[0].error_code, part.error_code) == (E.none, E.none), r
    return part.committed_offset


def answers(wc: WireClient, group: str, topic: str, member: str, generation: int) -> dict[str, E]:
    """What each request on the group answers (the error of the group, or of its one partition)."""
    out: dict[str, E] = {"join": join(wc, group, member).error_code}
    out["sync"] = wc.call(SYNC, 5, {"group_id": group, "generation_id": generation, "member_id": member,
                                    "group_instance_id": "static-1", "protocol_type": "consumer",
                                    "protocol_name": "range", "assignments": []}).error_code
    out["heartbeat"] = wc.call(HEARTBEAT, 4, {"group_id": group, "generation_id": generation, "member_id": member,
                                              "group_instance_id": "static-1"}).error_code
    out["leave"] = wc.call(LEAVE, 4, {"group_id": group, "members": [
        {"member_id": member, "group_instance_id": "static-1"}]}).error_code
    out["commit"] = commit(wc, group, topic, member, generation, 9)
    out["commit_simple"] = commit(wc, group, topic, "", -1, 9)
    out["fetch"] = fetch(wc, group, topic)
    out["offset_delete"] = wc.call(OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0}]}]}).error_code
    out["describe"] = wc.call(DESCRIBE, 5, {"groups": [group], "include_authorized_operations": False}
                              ).groups[0].error_code
    out["consumer_heartbeat"] = wc.call(CONSUMER_HEARTBEAT, 0, {
        "group_id": group, "member_id": "c-1", "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout": 30_000, "subscribed_topic_names": [topic], "server_assignor": None,
        "topic_partitions": []}).error_code
    out["share_heartbeat"] = wc.call(SHARE_HEARTBEAT, 1, {
        "group_id": group, "member_id": "s-1", "member_epoch": 0, "rack_id": None,
        "subscribed_topic_names": [topic]}).error_code
    return out


def test_an_unreadable_membership_is_refused_kept_and_deleted_on_request(broker: BrokerProcess):
    topic, group = uniq("unreadable"), uniq("unreadable-group")
    create_topic(broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(10):  # records to commit offset 7 against (a reset clamps to the log)
        p.produce(topic, value=b"%d" % i, partition=0)
    assert p.flush(10) == 0
    with WireClient("127.0.0.1", broker.port) as wc:
        member, generation = stable_group(wc, group, topic)
    broker.kill()
    path = next((broker.data / "__cluster" / "consumer_offsets").glob("*.json"))
    obj = json.loads(path.read_bytes())
    assert obj["group_id"] == group and obj["membership"]["state"] == "Stable"
    obj["membership"]["members"][0]["session_timeout_ms"] = "soon"  # does not parse
    path.write_text(json.dumps(obj))
    damaged = path.read_bytes()
    broker.start()

    with WireClient("127.0.0.1", broker.port) as wc:
        # the restarted broker serves its groups once it holds its lease (a retriable error before)
        wait_for(lambda: fetch(wc, group, topic) not in RETRIABLE, 30, "the coordinator serving")
        for _ in range(2):  # answered alike every time, reported once
            got = answers(wc, group, topic, member, generation)
            assert got == dict.fromkeys(got, E.unknown_server_error), got
        listed = wc.call(LIST, 5, {"states_filter": [], "types_filter": []})
        assert [g.group_type for g in listed.groups if g.group_id == group] == ["classic"]
    assert path.read_bytes() == damaged  # nothing rewritten: the offset committed is still on file
    assert json.loads(damaged)["offsets"][topic]["0"][0] == 7
    assert broker.log_text().count("group_membership_unreadable") == 1

    # the way out (docs/groups.rst): note the offsets from the file, delete the group, commit them again
    res = CliRunner().invoke(cli, ["inspect", "cluster", "--data", str(broker.data), "--json"])
    assert res.exit_code == 0, res.output
    [row] = [g for g in json.loads(res.stdout)["groups"] if g["group_id"] == group]
    noted = json.loads((path.parent / row["file"]).read_bytes())["offsets"]
    assert noted == {topic: {"0": noted[topic]["0"]}} and noted[topic]["0"][0] == 7
    res = CliRunner().invoke(cli, ["groups", "delete", group, "--bootstrap", broker.bootstrap])
    assert res.exit_code == 0 and not path.exists(), res.output
    res = CliRunner().invoke(cli, ["groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset",
                                   str(noted[topic]["0"][0]), "--execute", "--bootstrap", broker.bootstrap])
    assert res.exit_code == 0, res.output
    with WireClient("127.0.0.1", broker.port) as wc:
        assert fetch_offset(wc, group, topic) == 7
        assert stable_group(wc, group, topic)[1] == 1  # a new group, generation 1
