"""scripts/eos_harness and scripts/chaos --group-protocol: the copiers' group settings per
protocol (librdkafka itself refuses the classic-only ones with group.protocol=consumer), the
brokers' options for consumer-protocol groups, and the options reaching the run."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaException

from kaas.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import chaos.cli  # noqa: E402
import eos_harness  # noqa: E402
import eos_harness.cli  # noqa: E402
from chaos.runner import mixed_phase_commits, upgrade_done  # noqa: E402
from chaos.scenarios import SCENARIOS  # noqa: E402

CFG = eos_harness.HarnessConfig(bootstrap="127.0.0.1:1", input="in-1", output="out-1", group="g-1", seed=1)
CLASSIC_ONLY = ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy")


def _consumer(settings: dict) -> None:
    """Build (and close) a real librdkafka consumer: it validates its config on creation."""
    Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", **settings}).close()


def test_group_settings_per_protocol():
    assert CFG.group_protocol == "classic"
    classic = eos_harness.group_settings(CFG)
    assert classic["session.timeout.ms"] == CFG.session_timeout_ms
    assert classic["partition.assignment.strategy"] == "cooperative-sticky"
    consumer = eos_harness.group_settings(replace(CFG, group_protocol="consumer"))
    assert consumer == {"group.protocol": "consumer"}
    assert eos_harness.group_settings(CFG, "consumer") == consumer  # an incarnation's own protocol wins
    with pytest.raises(ValueError, match="group protocol"):
        eos_harness.group_settings(CFG, "modern")


def test_librdkafka_takes_both_and_refuses_classic_settings_with_the_consumer_protocol():
    _consumer(eos_harness.group_settings(CFG))
    _consumer(eos_harness.group_settings(CFG, "consumer"))
    for key in CLASSIC_ONLY:
        with pytest.raises(KafkaException, match=key):
            _consumer({**eos_harness.group_settings(CFG, "consumer"), key: eos_harness.group_settings(CFG)[key]})


def test_consumer_broker_args_are_settings_with_the_copiers_timeouts():
    args = eos_harness.consumer_broker_args()
    opts = dict(zip(args[::2], args[1::2], strict=True))
    fields = {f"--{name.replace('_', '-')}" for name in Settings.__dataclass_fields__}
    assert set(opts) <= fields, set(opts) - fields
    assert int(opts["--group-consumer-session-timeout-ms"]) == CFG.session_timeout_ms
    assert int(opts["--group-consumer-heartbeat-interval-ms"]) == CFG.heartbeat_interval_ms
    assert int(opts["--group-consumer-min-session-timeout-ms"]) <= CFG.session_timeout_ms
    assert int(opts["--group-consumer-min-heartbeat-interval-ms"]) <= CFG.heartbeat_interval_ms
    assert CFG.heartbeat_interval_ms < CFG.session_timeout_ms


class _Ran(Exception):
    """Raised by the stand-in for the run: carries what it was called with."""


def test_the_harness_option_reaches_the_config(monkeypatch):
    def capture(cfg, **_kw):
        raise _Ran(cfg)

    monkeypatch.setattr(eos_harness.cli, "run_harness", capture)
    for argv, want in ((["--group-protocol", "consumer"], "consumer"), ([], "classic")):
        result = CliRunner().invoke(eos_harness.cli.cli, ["run", "--bootstrap", "127.0.0.1:1", *argv])
        assert isinstance(result.exception, _Ran), result.output
        assert result.exception.args[0].group_protocol == want
    result = CliRunner().invoke(eos_harness.cli.cli, ["run", "--bootstrap", "127.0.0.1:1", "--group-protocol", "x"])
    assert result.exit_code == 2 and "--group-protocol" in result.output


def test_chaos_option_and_scenario(monkeypatch):
    calls = []

    def capture(name, *args):
        calls.append((name, args[-1]))
        raise _Ran(name)

    monkeypatch.setattr(chaos.cli, "run_scenario", capture)
    for argv in (["--scenario", "continuous", "--no-baseline", "--group-protocol", "consumer"],
                 ["--scenario", "rolling-upgrade"]):
        result = CliRunner().invoke(chaos.cli.cli, ["run", *argv])
        assert isinstance(result.exception, _Ran), result.output
    assert calls == [("continuous", "consumer"), ("rolling-upgrade", "classic")]
    assert "rolling-upgrade" not in SCENARIOS  # not part of --scenario all


def test_an_upgrade_is_done_when_every_copier_went_classic_to_consumer():
    assert upgrade_done({0: ["classic", "consumer"], 1: ["classic", "classic", "consumer"]})
    assert not upgrade_done({0: ["classic", "consumer"], 1: ["classic"]})
    assert not upgrade_done({0: ["consumer"]})
    assert not upgrade_done({})


def test_mixed_phase_commits_count_each_upgraded_copier_before_the_next_stop():
    # copier 0 stopped at 10, restarted at 11; copier 1 stopped at 20, restarted at 21
    stops, restarts = [10.0, 20.0], [11.0, 21.0]
    commits = {0: [5.0, 12.0, 15.0, 25.0], 1: [9.0, 22.0]}
    assert mixed_phase_commits(restarts, stops, commits) == {0: 2}  # the last copier has no mixed phase
    assert mixed_phase_commits(restarts, stops, {0: [5.0, 21.0], 1: [22.0]}) == {0: 0}  # refused until alone
    assert mixed_phase_commits([], [], {}) == {}
