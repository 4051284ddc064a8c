"""The share-partition runtime (KIP-932, ``ShareRuntime``, ``broker.shares``): the
partition leader's share partitions over the pure ``domain.share_partition`` machine,
their state on the volume (``storage.share_state``), lock timers, and the share sessions
of ShareFetch/ShareAcknowledge (``domain.share_sessions``). Its timer loop is
``kaas.tasks.group_timers.serve_timers``; the share-group membership it asks is the
``ports.ShareMembership`` seam."""

from kaas.coord.share.configs import GroupShareConfigs as GroupShareConfigs
from kaas.coord.share.configs import ShareGroupSettings as ShareGroupSettings
from kaas.coord.share.ports import ShareMembership as ShareMembership
from kaas.coord.share.runtime import Fetched as Fetched
from kaas.coord.share.runtime import ShareRuntime as ShareRuntime

__all__ = ["Fetched", "GroupShareConfigs", "ShareGroupSettings", "ShareMembership",
           "ShareRuntime"]
