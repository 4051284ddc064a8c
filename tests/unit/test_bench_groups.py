"""scripts/bench group-join / group-add: what counts as a stable assignment, which partitions
did not move, the gaps measured, and the brokers' options being kaas settings."""

from __future__ import annotations

import sys
from pathlib import Path

from click.testing import CliRunner

from kaas.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench.cli import cli  # noqa: E402
from bench.workloads import groups  # noqa: E402


class _Seen:
    """Stands in for a polled consumer: only what the analysis reads."""

    def __init__(self, assignment: set[int], changes: list[tuple[float, set[int]]] | None = None) -> None:
        self.assignment = frozenset(assignment)
        self.changes = [(at, frozenset(a)) for at, a in (changes or [])]


def test_stable_means_each_partition_once_and_balanced():
    assert groups._stable([_Seen({0, 1}), _Seen({2})], 3)
    assert not groups._stable([_Seen({0, 1, 2}), _Seen(set())], 3)  # not balanced
    assert not groups._stable([_Seen({0, 1}), _Seen({1, 2})], 3)  # owned twice
    assert not groups._stable([_Seen({0}), _Seen({1})], 3)  # one unowned


def test_a_partition_held_through_the_join_did_not_move():
    m = _Seen({0, 1}, [(1.0, {0, 1, 2}), (5.0, {0, 1})])
    assert groups._held(m, 0, 3.0, 9.0)
    assert not groups._held(m, 2, 3.0, 9.0)  # revoked during the window
    assert not groups._held(m, 3, 3.0, 9.0)  # never owned
    back = _Seen({0}, [(1.0, {0}), (4.0, set()), (6.0, {0})])
    assert not groups._held(back, 0, 3.0, 9.0)  # moved away and back is a move


def test_longest_gap_within_the_window():
    assert groups._longest_gap([1.0, 1.5, 4.0, 4.2, 9.0], 1.2, 5.0) == 2.5
    assert groups._longest_gap([1.0], 0.0, 5.0) is None


def test_broker_options_are_kaas_settings():
    args = groups.GROUP_BROKER_ARGS
    fields = {f"--{name.replace('_', '-')}" for name in Settings.__dataclass_fields__}
    assert set(args[::2]) <= fields


def test_targets_option():
    result = CliRunner().invoke(cli, ["group-join", "--targets", "mock-consumer,nope"])
    assert result.exit_code == 2 and "a comma-separated choice" in result.output
