"""scripts/bench: the command line stays what the docs, the Makefile and ``suite`` call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench.cli import cli  # noqa: E402
from bench.suite import suite_benches  # noqa: E402

COMMANDS = {"produce", "idempotence", "fetch", "consume", "txn", "eos", "failover", "scale", "create",
            "compare", "suite", "table", "mock-peer", "security", "ingest", "brokers", "roundtrip", "recompress",
            "group-join", "group-add", "startup", "share", "share-lock", "share-once", "cpu", "txn-many",
            "txn-many-once", "txn-many-worker"}


def test_the_commands():
    assert set(cli.commands) == COMMANDS


def test_every_suite_benchmark_runs_a_command():
    benches = suite_benches(1.0, 30.0)
    assert {b["argv"][0] for b in benches if not b.get("startup")} <= set(cli.commands)
    # start-up is measured on the target itself, not by a child command
    assert [b["name"] for b in benches if b.get("startup")] == ["startup"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help(command):
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage:")
