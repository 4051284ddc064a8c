"""A partition's ``producer-state.snapshot``: msgpack ``{format, offset, producers}``, the
idempotence window and open transactions of every producer as of ``offset`` (the log end
at a segment roll or a relinquish). Written whole by the partition's leader; the next
leader loads it and replays the batches after ``offset``.

The snapshot is a cache of what the log holds: one that does not parse is reported and the
state is rebuilt from the whole log (the file stays for inspection until replaced).
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import msgpack

from kaas.domain.producer_state import ProducerStateTable, TableSnapshot
from kaas.storage import atomic, fs

__all__ = ["NAME", "SnapshotError", "load", "write"]

NAME = "producer-state.snapshot"


class ProducerSnapshotFile(TypedDict):
    """``producer-state.snapshot`` (msgpack), format 1: the producers as of ``offset``,
    where replay starts."""

    format: int
    offset: int
    producers: TableSnapshot


class SnapshotError(Exception):
    """The snapshot exists but cannot be used (the message says why)."""


def load(directory: Path, *, now_ms: int) -> tuple[ProducerStateTable, int] | None:
    """(the producers, the offset replay starts from), None when there is no snapshot.

    Args:
        now_ms: the broker's clock at this open (entries idle since before it are capped).
    Raises:
        SnapshotError: the file is not a snapshot of this format.
    """
    path = Path(directory) / NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        obj = msgpack.unpackb(raw, strict_map_key=False)
        if not isinstance(obj, dict) or obj.get("format") != 1:
            raise ValueError("unknown snapshot format")
        return ProducerStateTable.from_snapshot(obj["producers"], now_ms=now_ms), int(obj["offset"])
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
        raise SnapshotError(f"{path}: {exc}") from None


def write(directory: Path, offset: int, producers: ProducerStateTable, *, fsync: bool) -> None:
    fs.crash_point("snapshot.before_write")
    snapshot: ProducerSnapshotFile = {"format": 1, "offset": offset, "producers": producers.to_snapshot()}
    data = msgpack.packb(snapshot)
    atomic.write_bytes(Path(directory) / NAME, data, fsync=fsync)
