"""The classic group protocol's pure machine (JoinGroup/SyncGroup/Heartbeat/LeaveGroup)."""
