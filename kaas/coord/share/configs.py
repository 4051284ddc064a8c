"""What a share group's partitions run with: its delivery-count limit and record lock
duration, ``share.auto.offset.reset`` and ``share.isolation.level``.

``BrokerShareConfigs`` reads the broker's ``group.share.*`` settings and Apache's
defaults for the group configs (``latest``, ``read_uncommitted``). The group configs
themselves (IncrementalAlterConfigs on GROUP resources, ``broker.group_config``) plug in
through ``ShareConfigSource`` once they exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kaas.domain.share_partition import AutoOffsetReset, ShareLimits
from kaas.settings import Settings

__all__ = ["BrokerShareConfigs", "ShareConfigSource", "ShareGroupSettings"]


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    limits: ShareLimits
    auto_offset_reset: AutoOffsetReset = AutoOffsetReset()
    read_committed: bool = False


class ShareConfigSource(Protocol):
    def share_settings(self, group_id: str) -> ShareGroupSettings:
        """The settings of ``group_id`` 's share partitions now."""


class BrokerShareConfigs:
    """Every group runs with the broker's settings (no group configs yet).

    Args:
        settings: the broker's current settings (dynamic broker configs replace them).
    """

    def __init__(self, settings: Callable[[], Settings]) -> None:
        self._settings = settings
        self._cached: tuple[Settings, ShareGroupSettings] | None = None

    def share_settings(self, group_id: str) -> ShareGroupSettings:
        s = self._settings()
        if self._cached is None or self._cached[0] is not s:
            limits = ShareLimits(delivery_count_limit=s.group_share_delivery_count_limit,
                                 record_lock_duration_ms=s.group_share_record_lock_duration_ms,
                                 max_record_locks=s.group_share_partition_max_record_locks)
            self._cached = (s, ShareGroupSettings(limits))
        return self._cached[1]
