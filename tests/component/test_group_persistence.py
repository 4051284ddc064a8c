"""The group coordinator keeps its members' heartbeat times on file (throttled, and with
every offset commit), and a coordinator that loads the group counts restored sessions
from them (``Group.restore``), on a real ``Broker`` over ``tmp_path`` with a fake clock."""

from __future__ import annotations

import json

import pytest
from kio.schema.errors import ErrorCode

from kaas.coord.group import GroupCoordinator
from kaas.storage.offset_store import Committed
from tests.clocks import SteppedWall
from tests.component.test_coordinator_disk_faults import started_broker

SESSION = 6_000


@pytest.fixture
def clock() -> SteppedWall:
    return SteppedWall(1_000_000)


def on_file(groups: GroupCoordinator, group: str) -> dict:
    return json.loads(groups.store.path(group).read_bytes())["membership"]


def heard(groups: GroupCoordinator, group: str) -> dict[str, int]:
    return {m["member_id"]: m["last_heartbeat_ms"] for m in on_file(groups, group)["members"]}


async def test_heartbeat_times_reach_the_file_and_a_new_coordinator_counts_from_them(tmp_path, clock):
    broker = await started_broker(tmp_path, clock, group_initial_rebalance_delay_ms=0)
    groups = broker.groups
    t0 = clock.now_ms
    reply = await groups.join("g", member_id="", group_instance_id=None, client_id="c", client_host="h",
                              session_timeout_ms=SESSION, rebalance_timeout_ms=SESSION,
                              protocol_type="consumer", protocols=[("range", b"")], require_known_member=False)
    member, gen = reply.member_id, reply.generation_id
    sync = await groups.sync("g", member_id=member, group_instance_id=None, generation_id=gen,
                             assignments=[(member, b"a")], protocol_type="consumer", protocol_name="range")
    assert sync.error_code == ErrorCode.none
    assert on_file(groups, "g")["state"] == "Stable" and heard(groups, "g") == {member: t0}

    # heartbeats within a third of a session: nothing written
    clock.now_ms = t0 + SESSION // 3 - 1
    assert groups.heartbeat("g", member, None, gen) == ErrorCode.none
    before = groups.store.path("g").read_bytes()
    await groups.classic.persist_membership(groups.groups["g"])
    assert groups.store.path("g").read_bytes() == before
    # a third of a session late: written
    clock.now_ms = t0 + SESSION // 3 + 1
    assert groups.heartbeat("g", member, None, gen) == ErrorCode.none
    await groups.classic.persist_membership(groups.groups["g"])
    assert heard(groups, "g") == {member: t0 + SESSION // 3 + 1}
    # an offset commit writes the file anyway: it carries the latest heartbeat along
    clock.now_ms += 500
    assert await groups.commit("g", member_id=member, group_instance_id=None, generation_id=gen,
                               offsets={("t", 0): Committed(7)}) == ErrorCode.none
    last = clock.now_ms
    assert heard(groups, "g") == {member: last}

    # the member dies; much later another coordinator (fresh memory) loads the group
    fresh = GroupCoordinator(broker)
    clock.now_ms = last + SESSION - 1_000
    e = fresh.loaded("g")
    assert e is not None and e.group.generation_id == gen
    m = e.group.members[member]
    # a second of its session left: the grace from the load instead
    assert m.last_heartbeat_ms == last and m.session_deadline_ms == clock.now_ms + SESSION // 2
    # loading wrote nothing; nor does the timer loop's check while nobody is heard from
    before = groups.store.path("g").read_bytes()
    await fresh.classic.persist_membership(e)
    assert groups.store.path("g").read_bytes() == before
    # its session ends half a session after the load, not a whole one
    clock.now_ms += SESSION // 2
    assert e.group.next_deadline() == clock.now_ms
    e.group.tick(clock.now_ms)
    assert member not in e.group.members
    await fresh.classic.persist_membership(e)
    assert on_file(groups, "g") == {"state": "Empty", "generation": gen + 1, "protocol_type": "consumer",
                                    "since_ms": clock.now_ms}  # when it emptied: offset retention counts from it
    got, _ = await fresh.fetch("g", [("t", 0)], False)
    assert got[("t", 0)].offset == 7


async def test_a_file_without_heartbeat_times_restarts_sessions_on_load(tmp_path, clock):
    """Files written before heartbeat times were kept (format 1 all the same) still load:
    every session starts afresh, Apache's rule."""
    broker = await started_broker(tmp_path, clock)
    groups = broker.groups
    path = groups.store.path("old")
    path.parent.mkdir(parents=True, exist_ok=True)
    member = {"member_id": "m-1", "group_instance_id": None, "client_id": "c", "client_host": "h",
              "session_timeout_ms": SESSION, "rebalance_timeout_ms": SESSION, "protocol_type": "consumer",
              "protocols": [["range", ""]], "assignment": "61"}
    path.write_text(json.dumps({"format": 1, "group_id": "old", "generation": 3, "offsets": {}, "pending": {},
                                "membership": {"state": "Stable", "generation": 4, "protocol_type": "consumer",
                                               "protocol": "range", "leader": "m-1", "members": [member]}}))
    e = groups.loaded("old")
    assert e is not None and e.group.generation_id == 4
    assert e.group.members["m-1"].session_deadline_ms == clock.now_ms + SESSION
    # the first write of the group adds the heartbeat times (format stays 1)
    await groups.classic.persist_membership(e)
    obj = json.loads(path.read_bytes())
    assert obj["format"] == 1 and obj["membership"]["members"][0]["last_heartbeat_ms"] == clock.now_ms
