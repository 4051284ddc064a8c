"""The group coordinator's KIP-932 share groups: membership and the offsets admin."""
