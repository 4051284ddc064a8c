"""The cluster runtime's fast paths over a tmp data directory, with peers' heartbeat files
and death notices written by hand (no peer processes): death notices, suspicion, the
opened-leader view, the hand-back acknowledgement, and the inotify doorbell."""

from __future__ import annotations

import json
import os

import trio

from kaas import dirwatch
from kaas.broker import Broker
from kaas.settings import Settings
from kaas.storage import atomic, deaths
from tests.component.ticks import membership, tick


def make_broker(tmp_path, broker_id: int = 0, **kw) -> Broker:
    return Broker(Settings(broker_id=broker_id, data=tmp_path / "data", fsync=False, **kw))


def I(n: int) -> str:  # noqa: E743
    """Incarnation number ``n`` (32 hex digits)."""
    return f"{n:032x}"


def beat(broker: Broker, peer: int, counter: int, *, inc: str = I(4242), applied: int = 0,
         pending=(), seen=None) -> None:
    obj = {"format": 1, "broker_id": peer, "counter": counter, "host": "127.0.0.1", "port": 1,
           "incarnation": inc, "pid": 1, "applied_version": applied, "draining": False,
           "pending": [list(k) for k in pending]}
    if seen is not None:
        obj["seen"] = {str(k): v for k, v in seen.items()}
    atomic.write_json(broker.layout.broker_file(peer), obj, fsync=False)


def notice(broker: Broker, peer: int, inc: str, at: float = 1.0) -> None:
    path = broker.layout.death_file(peer)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(deaths.encode(peer, inc, -9, now=at, pid=1))


def test_a_death_notice_kills_that_incarnation_until_its_counter_moves(tmp_path):
    b = make_broker(tmp_path)
    b.layout.ensure()
    rt = b.cluster
    tk = membership(b)
    beat(b, 1, 10, inc=I(500))
    assert tk._read_peers()  # joined
    assert rt.is_alive_any(1)
    notice(b, 1, inc=I(499))  # an older incarnation's notice: not this one
    assert not tk._read_peers()
    assert rt.is_alive_any(1)
    notice(b, 1, inc=I(500))
    assert tk._read_peers()  # dead at once, without waiting out the session
    assert not rt.is_alive_any(1) and 1 not in rt.alive()
    assert not tk._read_peers()  # the same notice is acted on once
    beat(b, 1, 11, inc=I(501))  # the restarted incarnation
    assert tk._read_peers()
    assert rt.is_alive_any(1)
    # the old notice (pid 500) no longer matches; a new one for 501 kills it again
    assert not tk._read_peers() and rt.is_alive_any(1)
    notice(b, 1, inc=I(501), at=2.0)
    tk._read_peers()
    assert not rt.is_alive_any(1)


def test_a_notice_for_a_reused_incarnation_applies_only_until_the_counter_moves(tmp_path):
    b = make_broker(tmp_path)
    b.layout.ensure()
    rt = b.cluster
    tk = membership(b)
    beat(b, 1, 10, inc=I(500))
    notice(b, 1, inc=I(500))
    tk._read_peers()
    assert not rt.is_alive_any(1)
    beat(b, 1, 11, inc=I(500))  # a new incarnation that got the same pid
    tk._read_peers()
    assert rt.is_alive_any(1)


def test_suspicion_lasts_until_the_next_heartbeat_and_moves_nothing(tmp_path):
    b = make_broker(tmp_path)
    b.layout.ensure()
    rt = b.cluster
    tk = membership(b)
    beat(b, 1, 10, inc=I(500))
    tk._read_peers()
    rt.suspect(1, I(499))  # another incarnation's connection: ignored
    assert not rt.is_suspected(1)
    rt.suspect(1, I(500))
    assert rt.is_suspected(1)
    assert rt.is_alive_any(1) and 1 in rt.alive()  # ownership stays
    beat(b, 1, 11, inc=I(500))
    tk._read_peers()
    assert not rt.is_suspected(1)


def test_opened_by_follows_the_leaders_heartbeat(tmp_path):
    b = make_broker(tmp_path)
    b.layout.ensure()
    rt = b.cluster
    tk = membership(b)
    rt._since[("t", 0)] = 7
    rt._since[("t", 1)] = 5
    beat(b, 1, 10, applied=6)
    tk._read_peers()
    assert not rt.opened_by(1, "t", 0)  # has not applied the version that gave it t-0
    assert rt.opened_by(1, "t", 1)
    beat(b, 1, 11, applied=7, pending=[("t", 0)])
    tk._read_peers()
    assert not rt.opened_by(1, "t", 0)  # applied, still opening
    beat(b, 1, 12, applied=7)
    tk._read_peers()
    assert rt.opened_by(1, "t", 0)
    assert not rt.opened_by(2, "t", 0)  # unknown broker


def test_acknowledged_once_every_live_peer_read_this_incarnation(tmp_path):
    b = make_broker(tmp_path)
    b.layout.ensure()
    rt = b.cluster
    tk = membership(b)
    assert not rt.acknowledged()  # no heartbeat of ours yet
    rt.first_counter = 41
    beat(b, 1, 10, seen={0: 40})
    beat(b, 2, 10, seen={0: 41})
    tk._read_peers()
    assert not rt.acknowledged()  # peer 1 has only read our previous incarnation
    beat(b, 1, 11, seen={0: 42})
    tk._read_peers()
    assert rt.acknowledged()
    notice(b, 2, inc=I(4242))
    tk._read_peers()
    assert rt.acknowledged()  # a dead peer is not waited for


async def test_counters_continue_across_incarnations_and_heartbeats_publish_views(tmp_path):
    b = make_broker(tmp_path)
    b.layout.ensure()
    atomic.write_json(b.layout.broker_file(0), {"format": 1, "broker_id": 0, "counter": 77}, fsync=False)
    beat(b, 1, 5)
    b.cluster.counter = membership(b)._last_counter()
    await tick(b)
    obj = json.loads(b.layout.broker_file(0).read_bytes())
    assert obj["counter"] == 78 and b.cluster.first_counter == 78
    assert obj["seen"] == {"1": 5} and obj["pending"] == []
    assert obj["incarnation"] == b.incarnation and obj["pid"] == os.getpid()


async def test_doorbell_reports_entries_of_every_watched_directory(tmp_path):
    a, c = tmp_path / "a", tmp_path / "c"
    watch = dirwatch.open_watch([a, c])
    assert watch is not None
    try:
        (a / "x.json").write_text("1")
        (c / "y.json").write_text("2")
        got: set = set()
        with trio.fail_after(5):
            while {(a, "x.json"), (c, "y.json")} - got:
                got |= await watch.wait_changes()
    finally:
        watch.close()


async def test_a_peer_heartbeat_wakes_the_runtime_through_the_doorbell(tmp_path):
    b = make_broker(tmp_path)
    b.layout.ensure()
    rt = b.cluster
    tk = membership(b)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tk._serve_doorbell)
        with trio.fail_after(5):
            while not rt.doorbell:
                await trio.sleep(0.01)
            beat(b, 3, 1)  # a broker joins: a material change
            await rt.wait_woken()
        assert 3 in rt.peers
        nursery.cancel_scope.cancel()


async def test_polling_only_opens_no_doorbell(tmp_path):
    b = make_broker(tmp_path, inotify=False)
    b.layout.ensure()
    with trio.move_on_after(0.2):
        await membership(b)._serve_doorbell()  # returns at once
    assert not b.cluster.doorbell


def test_a_broker_back_from_the_dead_gets_keys_placed_on_it_only_after_the_hold(tmp_path):
    b = make_broker(tmp_path)
    b.layout.ensure()
    rt = b.cluster
    tk = membership(b)
    beat(b, 1, 10, inc=I(500))
    beat(b, 2, 10, inc=I(600))
    tk._read_peers()
    assert tk._placeable() == [0, 1, 2]  # first seen: no hold
    notice(b, 1, inc=I(500))
    tk._read_peers()
    assert tk._placeable() == [0, 2]
    beat(b, 1, 11, inc=I(501))  # restarted
    tk._read_peers()
    assert 1 in rt.alive() and tk._placeable() == [0, 2]  # alive, but not given keys yet
    rt.peers[1].back_at -= rt.rejoin_hold
    assert tk._placeable() == [0, 1, 2]


async def test_a_controller_dead_by_notice_is_replaced_within_the_first_session(tmp_path):
    """A broker waits one session after its start before it deposes a silent controller
    (it may not have heard from everyone yet), but not one whose supervisor wrote its
    death notice: that is certain, and the keys must move before the liveness timeout."""
    b = make_broker(tmp_path, session_timeout_ms=20_000)
    b.layout.ensure()
    b.layout.controller.mkdir(parents=True, exist_ok=True)
    (b.layout.controller / "epoch-1").write_text(json.dumps({"format": 1, "broker_id": 1, "epoch": 1}))
    beat(b, 1, 10, inc=I(500))
    await tick(b)
    assert b.cluster.controller_id == 1 and not b.cluster.is_controller  # a live controller: kept
    (b.layout.deaths / "kaas-1.json").unlink(missing_ok=True)
    notice(b, 1, inc=I(499))  # another incarnation's notice: still no reason to depose it
    await tick(b)
    assert b.cluster.controller_id == 1 and not b.cluster.is_controller
    notice(b, 1, inc=I(500))  # its supervisor reaped it
    await tick(b)
    assert b.cluster.is_controller and b.cluster.controller_epoch == 2


async def test_a_notice_read_after_a_pid_1_restart_does_not_kill_the_new_incarnation(tmp_path, monkeypatch):
    """Broker 1 runs as PID 1 (a container), dies, its notice is written, and it comes
    back, again PID 1. A broker that reads the volume only now (it started, or was paused,
    or NFS showed it the notice late) sees the old notice beside the new heartbeat. With
    pids both name PID 1 and the live broker was taken for dead (and, by a controller, its
    keys moved away); the notice names the old incarnation, so the new one stays alive."""
    monkeypatch.setattr(os, "getpid", lambda: 1)  # what a PID namespace shows
    first = make_broker(tmp_path, broker_id=1)
    first.layout.ensure()
    await tick(first)  # incarnation 1 heartbeats
    notice(first, 1, first.incarnation)  # it died; its supervisor (or itself, at SIGTERM) says so
    second = make_broker(tmp_path, broker_id=1)  # the restart, PID 1 again
    await tick(second)
    assert second.incarnation != first.incarnation
    observer = make_broker(tmp_path)
    membership(observer)._read_peers()
    assert observer.cluster.is_alive_any(1) and 1 in observer.cluster.alive()


async def test_a_draining_controller_moves_its_own_keys_away_and_its_notice_elects_another(tmp_path):
    """SIGTERM of the controller: it stays controller while it drains and writes the
    assignment that moves its partitions and transaction slots to the others (it used to
    resign at once, leaving no controller until its lease ran out); its own death notice
    at the end lets a peer become controller within its first session."""
    b0, b1 = make_broker(tmp_path, 0), make_broker(tmp_path, 1, session_timeout_ms=20_000)
    b0.layout.ensure()
    await tick(b0)
    assert b0.cluster.is_controller
    b0.topics.create("t", 4, {})
    await tick(b1)
    await tick(b0)
    await tick(b1)
    a = b0.cluster.assignment
    assert a is not None and {a.leader_of("t", p).leader for p in range(4)} == {0, 1}
    b0.cluster.draining = True
    await tick(b0)
    a = b0.cluster.assignment
    assert b0.cluster.is_controller  # still: nobody else is
    assert all(a.leader_of("t", p).leader == 1 for p in range(4))
    assert set(a.txn_slots.values()) == {1}
    await tick(b1)
    assert not b1.cluster.is_controller  # a live (draining) controller is not deposed
    await b0.record_own_death()
    await tick(b1)
    assert b1.cluster.is_controller and b1.cluster.controller_epoch == 2
