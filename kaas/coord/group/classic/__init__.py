"""The group coordinator's classic groups (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)."""
