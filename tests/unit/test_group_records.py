"""The group files' records (``storage.offset_store.GroupFile`` and the three kinds'
snapshots): files in the format on the volume read back and are written byte for byte the
same; a file whose group part is malformed is reported (CorruptState, or the kind's
ValueError the coordinator reports), never read as an empty group."""

from __future__ import annotations

import copy
import json

import pytest

from kaas.domain.groups.classic.group import Group
from kaas.domain.groups.consumer.group import ConsumerGroup
from kaas.domain.groups.share.group import ShareGroup
from kaas.errors import CorruptState
from kaas.storage import atomic
from kaas.storage.offset_store import GroupOffsets

NOW = 10_000_000

CLASSIC = {
    "state": "Stable", "generation": 3, "protocol_type": "consumer", "protocol": "range", "leader": "m-1",
    "since_ms": 9_000_000,
    "members": [
        {"member_id": "m-1", "group_instance_id": None, "client_id": "c1", "client_host": "/10.0.0.1",
         "session_timeout_ms": 45000, "rebalance_timeout_ms": 300000, "protocol_type": "consumer",
         "protocols": [["range", "0001"], ["roundrobin", ""]], "assignment": "00ff",
         "last_heartbeat_ms": 9_990_000},
        {"member_id": "m-2", "group_instance_id": "static-2", "client_id": "c2", "client_host": "/10.0.0.2",
         "session_timeout_ms": 10000, "rebalance_timeout_ms": 60000, "protocol_type": "consumer",
         "protocols": [["range", "02"]], "assignment": "", "last_heartbeat_ms": 9_995_000},
    ],
}
CLASSIC_EMPTY = {"state": "Empty", "generation": 7, "protocol_type": "consumer", "since_ms": 9_500_000}

CONSUMER = {
    "format": 1, "group_epoch": 5, "assignment_epoch": 5, "signature": "sig",
    "regexes": {"t.*": ["t1", "t2"]},
    "members": [
        {"member_id": "a", "protocol": "consumer", "instance_id": None, "rack_id": "r1", "client_id": "ca",
         "client_host": "/h", "subscribed_names": ["t1"], "subscribed_regex": "t.*", "server_assignor": "uniform",
         "rebalance_timeout_ms": 30000, "member_epoch": 5, "previous_member_epoch": 4,
         "state": "unrevoked_partitions", "assigned": {"id1": [0, 1]}, "pending_revocation": {"id1": [2]},
         "target": {"id1": [0, 1]}, "last_contact_ms": 9_999_000, "revocation_asked_ms": 9_998_000},
        {"member_id": "b", "protocol": "classic",
         "classic": {"session_timeout_ms": 45000, "protocols": [["range", "0a0b"]]},
         "instance_id": "i-b", "rack_id": None, "client_id": "cb", "client_host": "/h2",
         "subscribed_names": ["t1", "t2"], "subscribed_regex": None, "server_assignor": None,
         "rebalance_timeout_ms": 60000, "member_epoch": 5, "previous_member_epoch": -1,
         "state": "unreleased_partitions", "assigned": {"id2": [0]}, "pending_revocation": {},
         "target": {"id1": [2], "id2": [0]},
         "last_contact_ms": 9_997_000},
    ],
}

SHARE = {
    "group_epoch": 4, "assignment_epoch": 4, "metadata": {"t1": ["id1", 3]},
    "members": [
        {"member_id": "s1", "member_epoch": 4, "previous_member_epoch": 3, "subscribed": ["t1"], "rack_id": None,
         "client_id": "c", "client_host": "/h", "assignment": {"id1": [0, 1, 2]}, "last_contact_ms": 9_999_500},
    ],
    "initialized": {"id1": [0, 1, 2]}, "initializing": {"id2": [0]},
}

OFFSETS = {"t1": {"0": [10, 2, "", 1234], "1": [11, -1, None, 1235, 99999]}}
PENDING = {"77": {"t1": {"2": [5, -1, "m", 1236]}}}


def _file(**kinds: object) -> dict[str, object]:
    return {"format": 1, "group_id": "g", "generation": 9, "offsets": OFFSETS, "pending": PENDING, **kinds}


def _classic(snap: dict[str, object]) -> Group:
    return Group.restore("g", copy.deepcopy(snap), now_ms=NOW)


@pytest.mark.parametrize("kinds", [{}, {"membership": CLASSIC}, {"membership": CLASSIC_EMPTY},
                                   {"consumer": CONSUMER}, {"share": SHARE},
                                   {"membership": CLASSIC_EMPTY, "share": SHARE}])
def test_group_file_reads_and_writes_byte_for_byte(kinds):
    raw = atomic.json_bytes(_file(**kinds))
    g = GroupOffsets.from_json(atomic.parse_json("g.json", raw), "g.json")
    assert atomic.json_bytes(g.to_json()) == raw


def test_snapshots_written_as_restored():
    """Each kind restored from its snapshot writes it again unchanged (times on file kept)."""
    assert _classic(CLASSIC).snapshot(NOW) == CLASSIC
    assert _classic(CLASSIC_EMPTY).snapshot(NOW) == CLASSIC_EMPTY
    c = ConsumerGroup.restore("g", copy.deepcopy(CONSUMER), now_ms=NOW, session_timeout_ms=45000)
    assert c.snapshot() == CONSUMER
    s = ShareGroup.restore("g", copy.deepcopy(SHARE), now_ms=NOW, session_timeout_ms=45000)
    assert s.snapshot() == SHARE


def test_snapshot_bytes_are_the_format_on_the_volume():
    """The snapshots' canonical bytes, spelled out: a change of member name or shape fails here."""
    c = ConsumerGroup.restore("g", copy.deepcopy(CONSUMER), now_ms=NOW, session_timeout_ms=45000)
    assert atomic.json_bytes(c.snapshot()) == (
        b'{"assignment_epoch":5,"format":1,"group_epoch":5,"members":[{"assigned":{"id1":[0,1]},'
        b'"client_host":"/h","client_id":"ca","instance_id":null,"last_contact_ms":9999000,"member_epoch":5,'
        b'"member_id":"a","pending_revocation":{"id1":[2]},"previous_member_epoch":4,"protocol":"consumer",'
        b'"rack_id":"r1","rebalance_timeout_ms":30000,"revocation_asked_ms":9998000,"server_assignor":"uniform",'
        b'"state":"unrevoked_partitions","subscribed_names":["t1"],"subscribed_regex":"t.*",'
        b'"target":{"id1":[0,1]}},{"assigned":{"id2":[0]},"classic":{"protocols":[["range","0a0b"]],'
        b'"session_timeout_ms":45000},"client_host":"/h2","client_id":"cb","instance_id":"i-b",'
        b'"last_contact_ms":9997000,"member_epoch":5,"member_id":"b","pending_revocation":{},'
        b'"previous_member_epoch":-1,"protocol":"classic","rack_id":null,"rebalance_timeout_ms":60000,'
        b'"server_assignor":null,"state":"unreleased_partitions","subscribed_names":["t1","t2"],"subscribed_regex":null,'
        b'"target":{"id1":[2],"id2":[0]}}],"regexes":{"t.*":["t1","t2"]},"signature":"sig"}')
    s = ShareGroup.restore("g", copy.deepcopy(SHARE), now_ms=NOW, session_timeout_ms=45000)
    assert atomic.json_bytes(s.snapshot()) == (
        b'{"assignment_epoch":4,"group_epoch":4,"initialized":{"id1":[0,1,2]},"initializing":{"id2":[0]},'
        b'"members":[{"assignment":{"id1":[0,1,2]},"client_host":"/h","client_id":"c","last_contact_ms":9999500,'
        b'"member_epoch":4,"member_id":"s1","previous_member_epoch":3,"rack_id":null,"subscribed":["t1"]}],'
        b'"metadata":{"t1":["id1",3]}}')
    assert atomic.json_bytes(_classic(CLASSIC).snapshot(NOW)) == (
        b'{"generation":3,"leader":"m-1","members":[{"assignment":"00ff","client_host":"/10.0.0.1",'
        b'"client_id":"c1","group_instance_id":null,"last_heartbeat_ms":9990000,"member_id":"m-1",'
        b'"protocol_type":"consumer","protocols":[["range","0001"],["roundrobin",""]],'
        b'"rebalance_timeout_ms":300000,"session_timeout_ms":45000},{"assignment":"","client_host":"/10.0.0.2",'
        b'"client_id":"c2","group_instance_id":"static-2","last_heartbeat_ms":9995000,"member_id":"m-2",'
        b'"protocol_type":"consumer","protocols":[["range","02"]],"rebalance_timeout_ms":60000,'
        b'"session_timeout_ms":10000}],"protocol":"range","protocol_type":"consumer","since_ms":9000000,'
        b'"state":"Stable"}')


def test_files_from_before_the_newer_members_still_read():
    """A file without heartbeat times, ``since_ms``, share initialization or an expiry
    reads as it did: the record's later members are optional on read."""
    old = copy.deepcopy(CLASSIC)
    del old["since_ms"]
    for m in old["members"]:
        del m["last_heartbeat_ms"]
    g = _classic(old)
    assert g.snapshot(NOW)["since_ms"] == NOW
    share = copy.deepcopy(SHARE)
    del share["initialized"], share["initializing"], share["members"][0]["previous_member_epoch"]
    s = ShareGroup.restore("g", share, now_ms=NOW, session_timeout_ms=45000)
    assert s.initialized == {"id1": frozenset({0, 1, 2})}
    raw = {"format": 1, "group_id": "g", "offsets": {"t": {"0": [1, -1, "", 5]}}}
    back = GroupOffsets.from_json(raw, "g.json")
    assert back.generation == 0 and back.pending == {} and back.offsets[("t", 0)].expire_timestamp == -1


@pytest.mark.parametrize("bad", [
    {"membership": []}, {"consumer": "x"}, {"share": 3},
    {"offsets": {"t": {"0": "ten"}}}, {"offsets": {"t": {"x": [1, -1, "", 5]}}}, {"offsets": []},
    {"pending": {"p": {}}}, {"generation": "many"}, {"group_id": None}, {"offsets": {"t": {"0": [1]}}},
])
def test_malformed_group_file_is_corrupt(bad):
    raw = {**_file(), **bad}
    with pytest.raises(CorruptState):
        GroupOffsets.from_json(json.loads(json.dumps(raw)), "g.json")


def _without(snap: dict[str, object], *path: str | int) -> dict[str, object]:
    out = copy.deepcopy(snap)
    where: object = out
    for key in path[:-1]:
        where = where[key]  # type: ignore[index]
    del where[path[-1]]  # type: ignore[union-attr]
    return out


def _with(snap: dict[str, object], value: object, *path: str | int) -> dict[str, object]:
    out = copy.deepcopy(snap)
    where: object = out
    for key in path[:-1]:
        where = where[key]  # type: ignore[index]
    where[path[-1]] = value  # type: ignore[index]
    return out


@pytest.mark.parametrize("snap", [
    _without(CLASSIC, "generation"), _with(CLASSIC, "Rebalancing", "state"), _with(CLASSIC, [3], "members"),
    _without(CLASSIC, "members", 0, "member_id"), _with(CLASSIC, "zz", "members", 0, "assignment"),
    _with(CLASSIC, "nobody", "leader"), _with(CLASSIC, "x", "generation"),
    _with(CLASSIC, [["range"]], "members", 0, "protocols"), _with(CLASSIC, "soon", "since_ms"),
])
def test_malformed_classic_snapshot_is_refused(snap):
    with pytest.raises(ValueError):
        _classic(snap)


@pytest.mark.parametrize("snap", [
    _with(CONSUMER, 2, "format"), _without(CONSUMER, "group_epoch"), _with(CONSUMER, [], "regexes"),
    _with(CONSUMER, ["a"], "members"), _with(CONSUMER, "gone", "members", 0, "state"),
    _with(CONSUMER, "kip", "members", 0, "protocol"), _without(CONSUMER, "members", 1, "classic"),
    _with(CONSUMER, {"id1": ["x"]}, "members", 0, "assigned"), _with(CONSUMER, "(", "regexes", "(", ),
    _with(CONSUMER, 6, "assignment_epoch"), _with(CONSUMER, "late", "members", 0, "last_contact_ms"),
    _with(CONSUMER, {"id1": [0]}, "members", 1, "assigned"),  # a partition held by two members
])
def test_malformed_consumer_snapshot_is_refused(snap):
    with pytest.raises(ValueError):
        ConsumerGroup.restore("g", snap, now_ms=NOW, session_timeout_ms=45000)


@pytest.mark.parametrize("snap", [
    _without(SHARE, "group_epoch"), _with(SHARE, "x", "members"), _with(SHARE, [7], "members"),
    _with(SHARE, {"t1": "id1"}, "metadata"), _with(SHARE, {"id1": "x"}, "initialized"),
    _without(SHARE, "members", 0, "assignment"), _with(SHARE, "x", "members", 0, "member_epoch"),
    _with(SHARE, [1], "initializing"),
])
def test_malformed_share_snapshot_is_refused(snap):
    with pytest.raises(ValueError):
        ShareGroup.restore("g", snap, now_ms=NOW, session_timeout_ms=45000)
