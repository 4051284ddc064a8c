"""KIP-848 consumer groups, pure: the machine, its members' reconciliation, the heartbeat,
the server-side assignors, topic regexes, and classic members inside a consumer group."""
