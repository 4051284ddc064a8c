"""Removal of deleted files once their ``file.delete.delay.ms`` passed (``storage.trash``):
every second, each partition this broker leads has its due ``*.deleted`` files removed (its
leader is the directory's one writer), and the controller removes the due directories of
deleted topics. A new leader or controller removes what its predecessor set aside, when
due: the due time is in the file's name."""

from __future__ import annotations

from pathlib import Path

import structlog
import trio

from kaas.broker import Broker
from kaas.storage import trash

SWEEP_S = 1.0

log = structlog.get_logger()


def sweep(dirs: list[tuple[str, int, Path]], data_dir: Path | None, now_ms: int) -> list[tuple[str, object]]:
    """Remove what is due; returns (what, names) pairs for the log."""
    done: list[tuple[str, object]] = []
    for topic, index, path in dirs:
        gone = trash.sweep(path, now_ms)
        if gone:
            done.append((f"{topic}/{index}", gone))
    if data_dir is not None:
        gone = trash.sweep_topics(data_dir, now_ms)
        if gone:
            done.append(("topics", gone))
    return done


async def serve_trash(broker: Broker, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    while True:
        await trio.sleep(SWEEP_S)
        dirs = [(p.topic, p.index, p.log.path) for p in list(broker.partitions.values()) if not p.closed]
        data_dir = broker.layout.data if broker.cluster.is_controller else None
        try:
            done = await broker.run_io(sweep, dirs, data_dir, broker.clock.wall_ms())
        except OSError as exc:
            log.error("deleted_files_sweep_failed", error=str(exc))
            continue
        for what, names in done:
            log.info("deleted_files_removed", where=what, files=names)
