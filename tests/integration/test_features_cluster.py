"""Feature levels (KIP-584) and client quotas (KIP-546) on a 3-broker cluster: the
controller writes ``__cluster/features.json`` and ``__cluster/client_quotas.json``, the
other brokers forward UpdateFeatures and AlterClientQuotas to it and every broker shows the
change within a poll; ``kaas features`` drives them; Apache 4.4's own ``kafka-features``
(org.apache.kafka.tools.FeatureCommand from the Maven-resolved kafka-tools,
``compat/tools/pom.xml``, run by tests/apache_tools.py) describes, upgrades and
downgrades against kaas, and its ``kafka-configs`` (ConfigCommand) sets, shows and
deletes client quotas.

The Apache tool tests need java, a JDK and mvn: they skip saying so when one is missing, and
fails instead when KAAS_REQUIRE_ALL=1.
"""

from __future__ import annotations

import re
import time

import pytest
from click.testing import CliRunner

from kaas.cli import cli
from kaas.client import WireClient
from kaas.domain import features
from kaas.testing import wait_for
from tests.apache_tools import ToolResult, tools
from tests.fixtures import cluster_fixture

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

TV_MAX = features.TRANSACTION_VERSION_MAX

cluster = cluster_fixture(3, scope="module", name="features")


def finalized(port: int) -> tuple[int, dict[str, int]]:
    with WireClient("127.0.0.1", port) as c:
        r = c.call(18, 4, {"client_software_name": "t", "client_software_version": "1"})
    return r.finalized_features_epoch, {f.name: f.max_version_level for f in r.finalized_features}


def update(port: int, *ups: tuple[str, int, int]) -> tuple[int, str | None]:
    with WireClient("127.0.0.1", port, timeout=20) as c:
        r = c.call(57, 1, {"timeout": 30000, "validate_only": False, "feature_updates": [
            {"feature": f, "max_version_level": lv, "upgrade_type": t} for f, lv, t in ups]})
    return r.error_code, r.error_message


def levels_everywhere(cluster, expect: dict[str, int]) -> int:
    """Wait until every broker advertises ``expect``; the epoch they agree on."""
    def same():
        got = [finalized(p) for p in cluster.ports]
        return got[0][0] if all(g == got[0] and g[1] == expect for g in got) else None
    return wait_for(same, timeout=10, what=f"every broker finalizing {expect}")


def test_updates_from_any_broker_reach_every_broker(cluster):
    new = {"metadata.version": 33, "transaction.version": TV_MAX, "group.version": 1, "share.version": 1}
    epoch = levels_everywhere(cluster, new)
    assert epoch >= 1
    for i, port in enumerate(cluster.ports):  # at least two of them forward to the controller
        down = {k: v for k, v in new.items() if k != "group.version"}
        assert update(port, ("group.version", 0, 2)) == (0, None)
        assert finalized(port)[1] == down  # the broker that answered shows it at once
        assert levels_everywhere(cluster, down) == epoch + 2 * i + 1
        assert update(port, ("group.version", 1, 1)) == (0, None)
        assert levels_everywhere(cluster, new) == epoch + 2 * i + 2
    code, message = update(cluster.ports[1], ("transaction.version", TV_MAX + 1, 1))
    assert code == 95 and message.endswith(f"only supports versions 0-{TV_MAX}")  # INVALID_UPDATE_VERSION


def test_kaas_features_cli(cluster):
    runner = CliRunner()
    boot = ["--bootstrap", cluster.bootstrap]
    r = runner.invoke(cli, ["features", "describe", *boot])
    assert r.exit_code == 0, r.output
    assert re.search(r"^metadata\.version\s+4\.4-IV2\s+4\.4-IV2\s+4\.4-IV2\s+\d+$", r.output, re.M), r.output
    r = runner.invoke(cli, ["features", "downgrade", *boot, "--feature", "share.version=0", "--dry-run"])
    assert (r.exit_code, r.output) == (0, "share.version can be downgraded to 0 (disabled)\n")
    assert finalized(cluster.ports[0])[1]["share.version"] == 1
    r = runner.invoke(cli, ["features", "disable", *boot, "--feature", "share.version"])
    assert r.exit_code == 0, r.output
    levels_everywhere(cluster, {"metadata.version": 33, "transaction.version": TV_MAX, "group.version": 1})
    r = runner.invoke(cli, ["features", "upgrade", *boot, "--feature", "share.version=1", "--feature", "foo=1"])
    assert r.exit_code == 1 and "Local controller" in r.output and "foo" in r.output, r.output
    r = runner.invoke(cli, ["features", "upgrade", *boot, "--feature", "share.version=1"])
    assert (r.exit_code, r.output) == (0, "share.version upgraded to 1\n")


def test_client_quotas_from_any_broker_reach_every_broker(cluster):
    for port in cluster.ports:
        with WireClient("127.0.0.1", port) as c:
            r = c.call(49, 1, {"validate_only": False, "entries": [{"entity": [
                {"entity_type": "user", "entity_name": f"u{port}"}, {"entity_type": "client-id", "entity_name": None}],
                "ops": [{"key": "producer_byte_rate", "value": 1000.0, "remove": False}]}]})
        assert [(e.error_code, e.error_message) for e in r.entries] == [(0, None)]
    want = sorted([("client-id", None), ("user", f"u{p}")] for p in cluster.ports)

    def described(port: int):
        with WireClient("127.0.0.1", port) as c:
            r = c.call(48, 1, {"strict": True, "components": [
                {"entity_type": "user", "match_type": 2, "match": None},
                {"entity_type": "client-id", "match_type": 1, "match": None}]})
        assert r.error_code == 0
        return sorted([(x.entity_type, x.entity_name) for x in e.entity] for e in r.entries)
    for port in cluster.ports:
        wait_for(lambda port=port: described(port) == want, timeout=10, what=f"broker on {port} seeing the quotas")


def kafka_features(bootstrap: str, *args: str) -> ToolResult:
    return tools().run("kafka-features", *args, bootstrap=bootstrap)


def described(out: str) -> dict[str, tuple[str, str, str, int]]:
    """kafka-features describe's lines: feature -> (supported min, max, finalized, epoch)."""
    rows = {}
    for line in out.splitlines():
        m = re.match(r"Feature: (\S+)\s+SupportedMinVersion: (\S+)\s+SupportedMaxVersion: (\S+)\s+"
                     r"FinalizedVersionLevel: (\S+)\s+Epoch: (\d+)", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4), int(m.group(5)))
    return rows


def test_apache_kafka_features(cluster):
    boot = f"127.0.0.1:{cluster.ports[2]}"
    r = kafka_features(boot, "describe")
    assert r.returncode == 0, r.stderr
    rows = described(r.stdout)
    epoch = rows["metadata.version"][3]
    assert {k: v[:3] for k, v in rows.items()} == {
        "group.version": ("0", "1", "1"), "metadata.version": ("4.4-IV2", "4.4-IV2", "4.4-IV2"),
        "share.version": ("0", "1", "1"), "transaction.version": ("0", str(TV_MAX), str(TV_MAX))}, r.stdout

    r = kafka_features(boot, "downgrade", "--feature", "transaction.version=0")
    assert (r.returncode, r.stdout.strip()) == (0, "transaction.version was downgraded to 0."), r.stderr
    wait_for(lambda: described(kafka_features(boot, "describe").stdout)["transaction.version"] ==
             ("0", str(TV_MAX), "0", epoch + 1), timeout=10, what="transaction.version at 0")

    r = kafka_features(boot, "upgrade", "--feature", f"transaction.version={TV_MAX + 1}")
    assert r.returncode == 1
    assert f"Could not upgrade transaction.version to {TV_MAX + 1}." in r.stdout + r.stderr
    assert f"only supports versions 0-{TV_MAX}" in r.stdout + r.stderr

    r = kafka_features(boot, "upgrade", "--feature", f"transaction.version={TV_MAX}", "--dry-run")
    assert (r.returncode, r.stdout.strip()) == (0, f"transaction.version can be upgraded to {TV_MAX}."), r.stderr
    r = kafka_features(boot, "upgrade", "--feature", f"transaction.version={TV_MAX}")
    assert (r.returncode, r.stdout.strip()) == (0, f"transaction.version was upgraded to {TV_MAX}."), r.stderr
    wait_for(lambda: described(kafka_features(boot, "describe").stdout)["transaction.version"] ==
             ("0", str(TV_MAX), str(TV_MAX), epoch + 2), timeout=10, what="transaction.version back")


def kafka_configs(bootstrap: str, *args: str) -> ToolResult:
    return tools().run("kafka-configs", *args, bootstrap=bootstrap)


def test_apache_kafka_configs_quotas(cluster):
    """Apache's kafka-configs sets, shows and deletes client quotas on kaas (AlterClientQuotas
    and DescribeClientQuotas underneath)."""
    boot = f"127.0.0.1:{cluster.ports[1]}"
    r = kafka_configs(boot, "--alter", "--entity-type", "users", "--entity-name", "carol",
                      "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    assert (r.returncode, r.stdout.strip()) == (0, "Completed updating config for user carol."), r.stderr
    r = kafka_configs(boot, "--alter", "--entity-type", "users", "--entity-default", "--entity-type", "clients",
                      "--entity-name", "c9", "--add-config", "request_percentage=50")
    assert r.returncode == 0, r.stderr
    r = kafka_configs(boot, "--alter", "--entity-type", "ips", "--entity-name", "10.9.9.9",
                      "--add-config", "connection_creation_rate=5")
    assert (r.returncode, r.stdout.strip()) == (0, "Completed updating config for ip 10.9.9.9."), r.stderr
    r = kafka_configs(boot, "--describe", "--entity-type", "users", "--entity-name", "carol")
    assert r.stdout.strip() == ("Quota configs for user-principal 'carol' are consumer_byte_rate=2048.0, "
                                "producer_byte_rate=1024.0"), r.stderr
    r = kafka_configs(boot, "--describe", "--entity-type", "users", "--entity-default", "--entity-type",
                      "clients", "--entity-name", "c9")
    assert r.stdout.strip() == ("Quota configs for the default user-principal, client-id 'c9' are "
                                "request_percentage=50.0")
    r = kafka_configs(boot, "--describe", "--entity-type", "ips", "--entity-name", "10.9.9.9")
    assert r.stdout.strip() == "Quota configs for ip '10.9.9.9' are connection_creation_rate=5.0"
    r = kafka_configs(boot, "--alter", "--entity-type", "users", "--entity-name", "carol",
                      "--delete-config", "producer_byte_rate")
    assert r.returncode == 0, r.stderr
    # every broker reads the change within a poll: a describe right after may find the old one
    wait_for(lambda: kafka_configs(boot, "--describe", "--entity-type", "users", "--entity-name", "carol")
             .stdout.strip() == "Quota configs for user-principal 'carol' are consumer_byte_rate=2048.0", 15,
             "producer_byte_rate of carol deleted")


def controller_of(port: int) -> int:
    with WireClient("127.0.0.1", port) as c:
        return c.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False}).controller_id


def test_controller_takeover_keeps_levels_and_quotas(cluster):
    """SIGKILL the controller: its successor serves UpdateFeatures and AlterClientQuotas from
    the files as they are (nothing handed over), the epoch goes on from there, and the
    restarted broker advertises the cluster's levels."""
    before = levels_everywhere(cluster, {"metadata.version": 33, "transaction.version": TV_MAX,
                                         "group.version": 1, "share.version": 1})
    old = controller_of(cluster.ports[0])
    pid = cluster.kill(old)
    other = cluster.ports[(old + 1) % len(cluster.ports)]
    wait_for(lambda: update(other, ("group.version", 0, 2)) == (0, None), timeout=20,
             what="UpdateFeatures served by the new controller")
    assert controller_of(other) != old
    with WireClient("127.0.0.1", other) as c:
        r = c.call(49, 1, {"validate_only": False, "entries": [{"entity": [
            {"entity_type": "client-id", "entity_name": "after-takeover"}],
            "ops": [{"key": "consumer_byte_rate", "value": 10.0, "remove": False}]}]})
    assert [e.error_code for e in r.entries] == [0]
    cluster.wait_restarted(old, pid)
    down = {"metadata.version": 33, "transaction.version": TV_MAX, "share.version": 1}
    assert levels_everywhere(cluster, down) == before + 1
    assert update(cluster.ports[old], ("group.version", 1, 1)) == (0, None)
    levels_everywhere(cluster, {**down, "group.version": 1})
    with WireClient("127.0.0.1", cluster.ports[old]) as c:
        r = c.call(48, 1, {"strict": True, "components": [
            {"entity_type": "client-id", "match_type": 0, "match": "after-takeover"}]})
    got = [[(x.entity_type, x.entity_name) for x in e.entity] for e in r.entries]
    assert got == [[("client-id", "after-takeover")]]


def test_group_version_zero_turns_kip848_off_for_clients(cluster):
    """With group.version at 0 a librdkafka consumer of the consumer protocol (KIP-848)
    fails as against Apache (ConsumerGroupHeartbeat: UNSUPPORTED_VERSION, fatal); back at 1
    it joins."""
    from confluent_kafka import Consumer

    def join(group: str) -> tuple[str, str]:
        """("error", text) of the first error, or ("joined", member id), or ("neither", "")."""
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "group.protocol": "consumer"})
        try:
            c.subscribe(["features-gate"])
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error():
                    return "error", str(m.error())
                if c.memberid():
                    return "joined", c.memberid()
            return "neither", ""
        finally:
            c.close()

    assert update(cluster.ports[0], ("group.version", 0, 2)) == (0, None)
    levels_everywhere(cluster, {"metadata.version": 33, "transaction.version": TV_MAX, "share.version": 1})
    try:
        kind, err = join("gate-off")
        assert kind == "error" and "ConsumerGroupHeartbeat" in err and "API version not supported" in err, err
    finally:
        assert update(cluster.ports[0], ("group.version", 1, 1)) == (0, None)
    levels_everywhere(cluster, {"metadata.version": 33, "transaction.version": TV_MAX, "group.version": 1,
                                "share.version": 1})
    assert join("gate-on")[0] == "joined"
