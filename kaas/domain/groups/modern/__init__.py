"""What the modern group kinds (KIP-848 consumer groups, KIP-932 share groups) share, pure."""
