"""What a share group's partitions run with: its delivery-count limit and record lock
duration, ``share.auto.offset.reset`` and ``share.isolation.level`` (its group configs over
the broker's ``group.share.*`` settings: ``domain.groups.configs``, ``broker.group_config``),
its record-lock limit and whether RENEW acknowledgements are taken."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kaas.domain.groups.configs import READ_COMMITTED, GroupConfig
from kaas.domain.share_partition import AutoOffsetReset, ShareLimits

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
        group_config: ``broker.group_config`` (the group's configs over the broker's current
            settings, dynamic broker configs included).
    """

    def __init__(self, group_config: Callable[[str], GroupConfig]) -> None:
        self._group_config = group_config
        self._cache: dict[GroupConfig, ShareGroupSettings] = {}

    def share_settings(self, group_id: str) -> ShareGroupSettings:
        gc = self._group_config(group_id)
        got = self._cache.get(gc)
        if got is None:
            if len(self._cache) >= _CACHED:
                self._cache.clear()
            try:
                reset = AutoOffsetReset.parse(gc.share_auto_offset_reset)
            except ValueError:  # group_configs never stores one (and ``effective`` falls back)
                reset = AutoOffsetReset()
            limits = ShareLimits(delivery_count_limit=gc.share_delivery_count_limit,
                                 record_lock_duration_ms=gc.share_record_lock_duration_ms,
                                 max_record_locks=gc.share_partition_max_record_locks,
                                 renew_enabled=gc.share_renew_acknowledge_enable)
            got = self._cache[gc] = ShareGroupSettings(limits, reset, gc.share_isolation_level == READ_COMMITTED)
        return got
