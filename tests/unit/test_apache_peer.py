"""scripts/peers/apache.py's pure parts: the node configuration and cluster ids (the
cluster itself runs in make diff, which needs Java and Maven)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("apache_peer", REPO / "scripts" / "peers" / "apache.py")
assert _spec is not None and _spec.loader is not None
apache = importlib.util.module_from_spec(_spec)
sys.modules["apache_peer"] = apache
_spec.loader.exec_module(apache)


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_cluster_ids_are_kafka_uuids_not_options():
    for _ in range(500):
        cid = apache.cluster_id()
        assert len(cid) == 22 and not cid.startswith("-")


def test_combined_mode_node_config():
    voters = "1@127.0.0.1:7001,2@127.0.0.1:7002,3@127.0.0.1:7003"
    p = _props(apache.node_properties(2, 3, 9093, voters, Path("/tmp/x")))
    assert p["process.roles"] == "broker,controller" and p["node.id"] == "2"
    assert p["listeners"] == "PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:7002"
    assert p["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9093"
    assert p["controller.quorum.voters"] == voters
    assert p["offsets.topic.replication.factor"] == "3"
    one = _props(apache.node_properties(1, 1, 9092, "1@127.0.0.1:7001", Path("/tmp/x")))
    assert one["offsets.topic.replication.factor"] == "1" and one["transaction.state.log.min.isr"] == "1"


def test_cluster_layout_on_given_ports(tmp_path):
    c = apache.ApacheCluster(3, 41000, tmp_path)
    assert c.bootstrap == "127.0.0.1:41000,127.0.0.1:41001,127.0.0.1:41002"
    c.configure()
    for node in (1, 2, 3):
        props = _props((tmp_path / f"node-{node}" / "server.properties").read_text())
        assert props["log.dirs"] == str(tmp_path / f"node-{node}" / "logs")
        assert (tmp_path / f"node-{node}" / "log4j2.properties").exists()


def test_secure_node_config():
    """--secure: clients on SASL_PLAINTEXT with SCRAM, brokers among themselves on
    PLAINTEXT as ANONYMOUS, StandardAuthorizer with admin and ANONYMOUS super users."""
    voters = "1@127.0.0.1:7001"
    p = _props(apache.node_properties(1, 1, 9092, voters, Path("/tmp/x"), internal_port=9192))
    assert p["listeners"] == ("SASL_PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9192,"
                              "CONTROLLER://127.0.0.1:7001")
    assert p["advertised.listeners"] == "SASL_PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9192"
    assert p["inter.broker.listener.name"] == "INTERNAL"
    assert p["sasl.enabled.mechanisms"] == "SCRAM-SHA-256,SCRAM-SHA-512"
    assert p["authorizer.class.name"].endswith("StandardAuthorizer")
    assert p["super.users"] == "User:admin;User:ANONYMOUS"
    assert "ScramLoginModule" in p["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"]
    assert "sasl.enabled.mechanisms" not in _props(apache.node_properties(1, 1, 9092, voters, Path("/tmp/x")))
