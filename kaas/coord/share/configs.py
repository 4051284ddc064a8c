"""What a share group's partitions run with: its delivery-count limit and record lock
duration, ``share.auto.offset.reset`` and ``share.isolation.level`` (its group configs over
the broker's ``group.share.*`` settings: ``domain.group_configs``, ``broker.group_config``),
and the broker's ``group.share.partition.max.record.locks``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kaas.domain.group_configs import READ_COMMITTED, GroupConfig
from kaas.domain.share_partition import AutoOffsetReset, ShareLimits
from kaas.settings import Settings

__all__ = ["GroupShareConfigs", "ShareConfigSource", "ShareGroupSettings"]

_CACHED = 1024


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    limits: ShareLimits
    auto_offset_reset: AutoOffsetReset = AutoOffsetReset()
    read_committed: bool = False


class ShareConfigSource(Protocol):
    def share_settings(self, group_id: str) -> ShareGroupSettings:
        """The settings of ``group_id`` 's share partitions now.

        Raises:
            KaasError: the group configs cannot be read (KAFKA_STORAGE_ERROR).
        """


class GroupShareConfigs:
    """Each group's share settings from its group configs (``broker.group_config``).

    Args:
        group_config: ``broker.group_config``.
        settings: the broker's current settings (dynamic broker configs replace them).
    """

    def __init__(self, group_config: Callable[[str], GroupConfig], settings: Callable[[], Settings]) -> None:
        self._group_config = group_config
        self._settings = settings
        self._cache: dict[tuple[GroupConfig, int], ShareGroupSettings] = {}

    def share_settings(self, group_id: str) -> ShareGroupSettings:
        gc = self._group_config(group_id)
        key = (gc, self._settings().group_share_partition_max_record_locks)
        got = self._cache.get(key)
        if got is None:
            if len(self._cache) >= _CACHED:
                self._cache.clear()
            try:
                reset = AutoOffsetReset.parse(gc.share_auto_offset_reset)
            except ValueError:  # group_configs never stores one (and ``effective`` falls back)
                reset = AutoOffsetReset()
            limits = ShareLimits(delivery_count_limit=gc.share_delivery_count_limit,
                                 record_lock_duration_ms=gc.share_record_lock_duration_ms, max_record_locks=key[1])
            got = self._cache[key] = ShareGroupSettings(limits, reset, gc.share_isolation_level == READ_COMMITTED)
        return got
