"""A partition directory's ``manifest.json``: ``{format, epoch, log_start_offset,
high_watermark}``, written whole (tmp + fsync + rename) by the partition's leader only.

The epoch in it says which leader owns the directory. A new leader writes it *before* it
scans the log; an old leader reads it after its fsync and before acknowledging, and
answers NOT_LEADER_OR_FOLLOWER when it moved (``EpochWatch``: a stat per check, a read
only when the file changed, since that check runs on every acks=all produce).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypedDict, cast

from kaas.storage import atomic

__all__ = ["EpochWatch", "read", "write"]

NAME = "manifest.json"


class Manifest(TypedDict):
    """``manifest.json``, format 1."""

    format: int
    epoch: int
    log_start_offset: int
    high_watermark: int


def read(directory: Path) -> Manifest | None:
    """The manifest of the partition directory, None when it has none.

    Raises:
        CorruptState: it exists but does not parse.
    """
    return cast("Manifest | None", atomic.read_json(Path(directory) / NAME))


def write(directory: Path, *, epoch: int, log_start_offset: int, high_watermark: int, fsync: bool) -> None:
    record: Manifest = {"format": 1, "epoch": epoch, "log_start_offset": log_start_offset,
                        "high_watermark": high_watermark}
    atomic.write_json(Path(directory) / NAME, record, fsync=fsync)


class EpochWatch:
    """The manifest's epoch as on the volume now, re-read only when a stat says the file
    changed."""

    __slots__ = ("_directory", "_path", "_stamp", "_epoch")

    def __init__(self, directory: Path) -> None:
        self._directory = Path(directory)
        self._path = str(self._directory / NAME)
        self._stamp: tuple[int, int, int] | None = None
        self._epoch = -1

    def epoch(self) -> int:
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            return -1
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return self._epoch
        m = read(self._directory)
        epoch = int(m["epoch"]) if m else -1
        self._stamp, self._epoch = stamp, epoch
        return epoch
