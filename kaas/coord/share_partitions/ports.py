"""What the share-partition runtime needs from the broker, as ``typing.Protocol`` classes
(the runtime never imports ``kaas.broker``).

``kaas.broker.Broker`` satisfies ``ShareHost`` structurally, its ``Partition`` satisfies
``SharedLog``; mypy checks it where the broker hands itself over (``ShareRuntime(self)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kaas.clock import Clock
from kaas.domain.groups.configs import GroupConfig
from kaas.settings import Settings
from kaas.storage.segment import ReadResult

__all__ = ["LogView", "ShareHost", "SharedLog"]

T = TypeVar("T")


class LogView(Protocol):
    """The parts of a partition's log the runtime reads (``PartitionLog``)."""

    @property
    def path(self) -> Path:
        """The partition's directory (its ``share`` directory holds the share state)."""

    @property
    def aborted(self) -> list[tuple[int, int, int]]:
        """Aborted transactions: (marker offset, producer id, first offset), by marker."""

    def manifest_epoch(self) -> int:
        """The leader epoch in the partition's manifest as on the volume now."""

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``ts``."""


class SharedLog(Protocol):
    """A partition this broker leads (``broker.partitions`` ' values)."""

    @property
    def topic(self) -> str: ...

    @property
    def index(self) -> int: ...

    @property
    def epoch(self) -> int:
        """Its leader epoch: the share state's writer is named with it."""

    @property
    def closed(self) -> bool:
        """True once relinquished, deposed or taken offline."""

    @property
    def log(self) -> LogView: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    def check_open(self) -> None:
        """Raise KaasError unless this broker may still write for the partition (not
        closed, not offline, holding its lease)."""

    def read(self, offset: int, max_bytes: int, limit: int, min_one: bool = True) -> ReadResult:
        """Whole batches from the one holding ``offset``, bases below ``limit``."""


class ShareHost(Protocol):
    """The broker as the share-partition runtime sees it."""

    @property
    def clock(self) -> Clock: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def memory_backed(self) -> bool:
        """The data directory is on tmpfs (fsyncs run inline, not in a worker thread)."""

    @property
    def partitions(self) -> Mapping[tuple[str, int], SharedLog]:
        """The partitions this broker leads."""

    def group_config(self, group_id: str) -> GroupConfig:
        """What the group runs with (its group configs over the broker's settings).

        Raises:
            KaasError: KAFKA_STORAGE_ERROR, the group config file was never readable.
        """

    async def refresh_group_configs(self) -> None:
        """Read the group config file afresh (what ``group_config`` answers from may lag
        the file by a poll period)."""

    def check_before_ack(self, part: Any) -> None:
        """``part`` (a ``SharedLog`` of this broker) is still open and its manifest still
        carries its epoch; else KaasError (NOT_LEADER_OR_FOLLOWER, the partition given up).
        (``Any``: the broker's own partition class, which satisfies ``SharedLog``.)"""

    def get_partition(self, topic: str, index: int) -> SharedLog:
        """The led partition, or KaasError (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
        KAFKA_STORAGE_ERROR)."""

    async def run_io(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking file work (a worker thread, or inline on tmpfs)."""

    async def wait_for_data(self) -> None:
        """Return after the next append to any led partition."""
