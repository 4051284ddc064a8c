"""The ``kaas inspect`` click group and its commands: options in, a view collected
(``_log``, ``_coordinators``, ``_cluster``), printed as JSON or rendered (``_render``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kaas.tools.inspect_data._cluster import cluster_view
from kaas.tools.inspect_data._coordinators import slots_view
from kaas.tools.inspect_data._log import log_view
from kaas.tools.inspect_data._render import cluster_lines, log_lines, shares_lines, slots_lines
from kaas.tools.inspect_data._shares import shares_view
from kaas.tools.output import emit

F = TypeVar("F", bound=Callable[..., Any])


def _data_option(f: F) -> F:
    return click.option("--data", required=True, type=click.Path(path_type=Path, exists=True, file_okay=False),
                        help="The data directory (read only, never written).")(f)


def _json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout, for scripts.")(f)


@click.group("inspect")
def inspect() -> None:
    """Read a data directory offline (never writes it): logs, share-group state, txn slots,
    cluster state."""


@inspect.command("log")
@click.argument("topic")
@click.argument("partition", type=int)
@_data_option
@click.option("--start-offset", type=int, default=0, show_default=True,
              help="Skip batches that end before this offset.")
@click.option("--limit", type=int, default=None, help="Show at most this many batches.")
@_json_option
def log_(topic: str, partition: int, data: Path, start_offset: int, limit: int | None, as_json: bool) -> None:
    """Every record batch of TOPIC PARTITION: offsets, position, size, producer, sequence,
    transactional/control flags (COMMIT/ABORT), CRC check, segment and its epoch."""
    view = log_view(data, topic, partition, start_offset, limit)
    emit(view, as_json, lambda: log_lines(view, limit))


@inspect.command("shares")
@click.argument("topic")
@click.argument("partition", type=int)
@_data_option
@click.option("--group", default=None, help="Only this share group.")
@click.option("--ranges", "show_ranges", is_flag=True, help="Also every (first, last, state, delivery count) range.")
@_json_option
def shares(topic: str, partition: int, data: Path, group: str | None, show_ranges: bool, as_json: bool) -> None:
    """Every share group's state of TOPIC PARTITION (KIP-932): its snapshot and journals,
    the share-partition start and end offsets, the offsets per state (available, acquired,
    acknowledged, archived), torn journal tails; files that do not parse as corrupt."""
    view = shares_view(data, topic, partition, group)
    emit(view, as_json, lambda: shares_lines(view, show_ranges))


@inspect.command("slots")
@_data_option
@click.option("--state", "states", multiple=True, help="Only transactions in these states.")
@_json_option
def slots(data: Path, states: tuple[str, ...], as_json: bool) -> None:
    """Every transaction slot file: transactional ids, state, producer id and epoch,
    partitions. Files that do not parse are reported as corrupt."""
    view = slots_view(data, states)
    emit(view, as_json, lambda: slots_lines(view))


@inspect.command("cluster")
@_data_option
@click.option("--session-timeout-ms", type=int, default=3000, show_default=True,
              help="A heartbeat file older than this is shown as stale.")
@_json_option
def cluster(data: Path, session_timeout_ms: int, as_json: bool) -> None:
    """Assignment (version, controller epoch, leader per partition), controller epoch files,
    broker heartbeats, marker queue depths, fence logs, PID blocks, topics and groups.
    A partition's high watermark is its log end read from its segments, live while a broker
    writes (the manifest's copy, written only at a hand-over, is in --json)."""
    view = cluster_view(data, session_timeout_ms)
    emit(view, as_json, lambda: cluster_lines(view))
