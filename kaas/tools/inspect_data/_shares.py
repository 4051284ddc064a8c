"""The share-state view of ``kaas inspect shares``: every share group's state of one
partition (KIP-932; design section 11) as its files hold it: the snapshot, the journals
replayed after it, the window [start, end) with its offsets per state and its ranges, and
any torn journal tail a load would leave out. Acquired records show as ACQUIRED: the files
record acquisitions (a load makes them available again). Read only, through
``storage.share_state`` 's loader, which only reads."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import click

from kaas.domain.share_partition import RecordState, ShareLimits
from kaas.errors import CorruptState
from kaas.storage import share_state
from kaas.storage.paths import Layout
from kaas.tools.inspect_data._files import size_of

__all__ = ["ShareGroupState", "SharesView", "shares_view"]


class ShareRange(TypedDict):
    first: int
    last: int
    state: str
    delivery_count: int


class ShareGroupState(TypedDict):
    group: str
    snapshot: str | None  # its file name; None: there is none
    journal_from: list[int] | None  # (epoch, seq) of the first journal the snapshot names
    journals: list[dict[str, object]]  # file, epoch, seq, size of each replayed journal
    start: int | None
    end: int | None
    counts: dict[str, int]
    ranges: list[ShareRange]
    cuts: list[str]  # torn journal tails a load leaves out
    error: str | None  # the files are corrupt: why (a load refuses the group)


class SharesView(TypedDict):
    topic: str
    partition: int
    directory: str
    groups: list[ShareGroupState]


def _group(directory: Path, group: str) -> ShareGroupState:
    snap = share_state.snapshot_path(directory, group)
    out = ShareGroupState(group=group, snapshot=snap.name if snap.exists() else None, journal_from=None,
                          journals=[], start=None, end=None, counts={}, ranges=[], cuts=[], error=None)
    try:
        loaded = share_state.load(directory, group)
        out["journals"] = [{"file": share_state.journal_path(directory, group, e, s).name, "epoch": e, "seq": s,
                            "size": size_of(share_state.journal_path(directory, group, e, s))}
                           for e, s in loaded.journals]
        out["cuts"] = loaded.cuts
        if loaded.snapshot is not None:
            out["journal_from"] = list(loaded.journal_from)
        window = share_state.replay(directory, group, ShareLimits(), loaded)
    except CorruptState as exc:
        out["error"] = str(exc)
        return out
    if window is None:
        return out
    state = window.snapshot()
    out["start"], out["end"] = state.start, state.end
    out["counts"] = {s.name: n for s, n in window.counts().items()}
    out["ranges"] = [ShareRange(first=f, last=la, state=RecordState(st).name, delivery_count=c)
                     for f, la, st, c in state.ranges]
    return out


def shares_view(data: Path, topic: str, partition: int, group: str | None) -> SharesView:
    """Every share group's state of TOPIC PARTITION (only ``group`` 's when given).

    Raises:
        click.ClickException: there is no such partition directory.
    """
    pdir = Layout(data).partition_dir(topic, partition)
    if not pdir.is_dir():
        raise click.ClickException(f"no partition directory {pdir}")
    directory = pdir / share_state.DIR
    groups = [group] if group is not None else share_state.groups(directory)
    return SharesView(topic=topic, partition=partition, directory=str(directory),
                      groups=[_group(directory, g) for g in groups])
