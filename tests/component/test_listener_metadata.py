"""Metadata per listener (issue 21): a broker's heartbeat publishes every advertised
listener, and ``Broker.brokers(listener)`` names each broker at its endpoint of that
listener; a peer without it is left out, a peer of an older version (no ``listeners`` in
its heartbeat) counts as one PLAINTEXT listener at host/port."""

from __future__ import annotations

import json

from kaas.broker import Broker
from kaas.handlers import find_coordinator
from kaas.listeners import resolve
from kaas.settings import Settings
from tests.component.ticks import membership


def _settings(tmp_path) -> Settings:
    ls, ib = resolve("PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,INTERNAL://127.0.0.1:9094",
                     advertised="PLAINTEXT://a:9092,SSL://a:9093,INTERNAL://a:9094",
                     protocol_map="PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SSL", inter_broker="INTERNAL")
    return Settings(broker_id=0, data=tmp_path / "data", fsync=False, listeners=ls, inter_broker_listener=ib)


async def test_heartbeat_publishes_every_listener_and_metadata_picks_the_one_asked(tmp_path):
    broker = Broker(_settings(tmp_path))
    tk = membership(broker)
    new_peer = {"format": 1, "broker_id": 1, "counter": 1, "host": "b", "port": 9194, "pid": 1,
                "listeners": [{"name": "PLAINTEXT", "host": "b", "port": 9192, "protocol": "PLAINTEXT"},
                              {"name": "INTERNAL", "host": "b", "port": 9194, "protocol": "SSL"}],
                "applied_version": 0, "draining": False, "controller_epoch": 0}
    old_peer = {"format": 1, "broker_id": 2, "counter": 1, "host": "c", "port": 9292, "pid": 2,
                "applied_version": 0, "draining": False, "controller_epoch": 0}
    broker.layout.broker_file(1).write_text(json.dumps(new_peer))
    broker.layout.broker_file(2).write_text(json.dumps(old_peer))
    await tk._tick()

    beat = json.loads(broker.layout.broker_file(0).read_bytes())
    assert (beat["host"], beat["port"]) == ("a", 9094)  # the inter-broker listener, for older versions
    assert beat["listeners"] == [{"name": "PLAINTEXT", "host": "a", "port": 9092, "protocol": "PLAINTEXT"},
                                 {"name": "SSL", "host": "a", "port": 9093, "protocol": "SSL"},
                                 {"name": "INTERNAL", "host": "a", "port": 9094, "protocol": "SSL"}]

    def at(listener):
        return [(b.node_id, b.host, b.port) for b in broker.brokers(listener)]

    assert at("PLAINTEXT") == [(0, "a", 9092), (1, "b", 9192), (2, "c", 9292)]
    assert at("SSL") == [(0, "a", 9093)]  # the peers have no SSL listener
    assert at("INTERNAL") == [(0, "a", 9094), (1, "b", 9194)]
    assert at(None) == at("INTERNAL")
    assert broker.controller_id("SSL") == 0
    # peer links: the inter-broker endpoint; an older peer at host/port whatever the name
    assert broker.peer_links.endpoint(1).port == 9194 and broker.peer_links.endpoint(1).protocol == "SSL"
    assert broker.peer_links.endpoint(2).port == 9292
    # FindCoordinator: a coordinator without the request's listener is not available there
    for key in (f"g{i}" for i in range(40)):
        owner = broker.group_owner(key)
        got = find_coordinator.locate(broker, key, find_coordinator.GROUP, "SSL")
        assert (got["node_id"], got["port"]) == ((0, 9093) if owner == 0 else (-1, -1))
