"""The share-partition runtime (KIP-932, ``ShareRuntime``, ``broker.shares``): the
partition leader's share partitions over the pure ``domain.share_partition`` machine,
their state on the volume (``storage.share_state``), lock timers, and the share sessions
of ShareFetch/ShareAcknowledge (``domain.share_sessions``). Its timer loop is
``kaas.tasks.group_timers.serve_timers``. Like Apache's share-partition leader it never
asks the share group's coordinator who is a member: sessions end with their final request
or their connection."""

from kaas.coord.share_partitions.configs import GroupShareConfigs as GroupShareConfigs
from kaas.coord.share_partitions.configs import ShareGroupSettings as ShareGroupSettings
from kaas.coord.share_partitions.runtime import Fetched as Fetched
from kaas.coord.share_partitions.runtime import ShareRuntime as ShareRuntime

__all__ = ["Fetched", "GroupShareConfigs", "ShareGroupSettings", "ShareRuntime"]
