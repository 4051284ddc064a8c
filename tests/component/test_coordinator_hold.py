"""The coordinator hold on real brokers' membership ticks over one tmp data directory: broker
0 (the controller) and broker 1 run their ticks by hand, broker 2 is a heartbeat file
written by hand (so it can lag). A broker back from the dead is left out of the
assignment's coordinators list until the hold ends; its groups stay where they moved; when
it is listed again it serves them only once every live broker applied that list."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kaas.broker import Broker
from kaas.domain.routing import coordinator_for
from kaas.errors import KaasError
from kaas.settings import Settings
from kaas.storage import atomic, deaths
from tests.component.ticks import membership, tick


def make_broker(tmp_path, broker_id: int) -> Broker:
    return Broker(Settings(broker_id=broker_id, data=tmp_path / "data", fsync=False))


def beat(broker: Broker, peer: int, counter: int, applied: int, seen: dict[int, int]) -> None:
    obj = {"format": 1, "broker_id": peer, "counter": counter, "host": "127.0.0.1", "port": 1,
           "incarnation": f"{peer:032x}", "pid": 1, "applied_version": applied, "draining": False,
           "pending": [], "seen": {str(k): v for k, v in seen.items()}}
    atomic.write_json(broker.layout.broker_file(peer), obj, fsync=False)


def restart(tmp_path, broker_id: int, **kw) -> Broker:
    """A new incarnation of ``broker_id``, its counter continuing its predecessor's (as
    ``Membership.serve`` starts it)."""
    b = Broker(Settings(broker_id=broker_id, data=tmp_path / "data", fsync=False, **kw))
    b.cluster.counter = membership(b)._last_counter()
    return b


def refused(broker: Broker, group: str) -> ErrorCode | None:
    """What the group coordinator answers for ``group`` (None: it serves it)."""
    try:
        broker.groups.check_owner(group)
    except KaasError as exc:
        return exc.code
    return None


async def test_a_returning_broker_gets_its_groups_back_only_after_the_hold_and_every_peer_applied(tmp_path):
    b0 = make_broker(tmp_path, 0)
    b0.layout.ensure()
    b1 = make_broker(tmp_path, 1)
    group = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [0, 1, 2], [0, 1, 2]) == 1)
    counter2 = 10

    async def settle(*brokers: Broker) -> None:
        """Tick ``brokers`` and broker 2 (it applies the assignment in force) until quiet."""
        nonlocal counter2
        for _ in range(3):
            for b in brokers:
                await tick(b)
            counter2 += 1
            a = b0.cluster.assignment
            beat(b0, 2, counter2, a.version if a else 0, {0: b0.cluster.counter, 1: brokers[-1].cluster.counter})
        for b in brokers:
            await tick(b)

    await settle(b0, b1)
    assert b0.cluster.is_controller and b0.cluster.coordinators() == (0, 1, 2)
    assert b0.group_owner(group) == b1.group_owner(group) == 1
    assert refused(b1, group) is None and refused(b0, group) == ErrorCode.not_coordinator

    # broker 1 is SIGKILLed: its supervisor's death notice, then a restart (a new incarnation)
    path = b0.layout.death_file(1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(deaths.encode(1, b1.incarnation, -9, now=1.0, pid=1))
    await settle(b0)
    assert b0.cluster.coordinators() == (0, 2) and b0.group_owner(group) in (0, 2)
    interim = b0.group_owner(group)
    b1 = restart(tmp_path, 1)
    await settle(b1, b0)
    assert 1 in b0.cluster.alive()  # back and alive ...
    assert b0.cluster.coordinators() == (0, 2)  # ... but held out of coordination
    assert b1.group_owner(group) == b0.group_owner(group) == interim
    assert refused(b1, group) == ErrorCode.not_coordinator

    # the hold ends: the controller lists broker 1 again (a new assignment version)
    b0.cluster.peers[1].back_at -= b0.cluster.coordinator_hold
    await tick(b0)
    listed = b0.cluster.assignment
    assert listed.coordinators == (0, 1, 2)
    assert b0.group_owner(group) == 1 and group not in b0.groups.groups
    await tick(b1)
    assert b1.cluster.coordinators() == (0, 1, 2) and b1.group_owner(group) == 1
    # broker 2 has not applied the new list yet: it may still serve the group by the old one
    assert b0.cluster.peers[2].applied_version < listed.version or pytest.fail("broker 2 ran ahead")
    assert refused(b1, group) == ErrorCode.coordinator_load_in_progress
    counter2 += 1
    beat(b0, 2, counter2, listed.version, {0: b0.cluster.counter, 1: b1.cluster.counter})
    await tick(b1)
    assert refused(b1, group) is None


async def test_hold_zero_gives_a_returning_broker_its_groups_at_once(tmp_path):
    b0 = Broker(Settings(broker_id=0, data=tmp_path / "data", fsync=False, group_coordinator_rejoin_hold_ms=0))
    b0.layout.ensure()
    b1 = make_broker(tmp_path, 1)
    await tick(b0)
    await tick(b1)
    await tick(b0)
    path = b0.layout.death_file(1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(deaths.encode(1, b1.incarnation, -9, now=1.0, pid=1))
    await tick(b0)
    assert b0.cluster.coordinators() == (0,)
    b1 = restart(tmp_path, 1)
    await tick(b1)
    await tick(b0)
    assert b0.cluster.coordinators() == (0, 1)
