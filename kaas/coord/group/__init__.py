"""The group coordinator (``GroupCoordinator``, ``broker.groups``): what every kind of
group shares (ownership, loading, the group's file, committed and transactional offsets,
the admin APIs, the timers: ``coordinator``), and one runtime per kind behind one seam
(``kinds``: what a group is; ``ports``: what a runtime may ask of the coordinator):
``classic`` (JoinGroup/SyncGroup/Heartbeat/LeaveGroup), ``consumer`` (KIP-848, and the
classic members inside a consumer group) and ``share`` (KIP-932). Its timer loop is
``kaas.tasks.group_timers.serve_timers``."""

from kaas.coord.group.coordinator import GroupCoordinator as GroupCoordinator

__all__ = ["GroupCoordinator"]
