"""The group coordinator (``GroupCoordinator``, ``broker.groups``): JoinGroup/SyncGroup/
Heartbeat/LeaveGroup over the pure ``domain.groups.classic.group`` machine, committed and transactional
offsets on file (``storage.offset_store``), and the admin APIs. Its timer loop is
``kaas.tasks.group_timers.serve_timers``."""

from kaas.coord.group.coordinator import GroupCoordinator as GroupCoordinator

__all__ = ["GroupCoordinator"]
