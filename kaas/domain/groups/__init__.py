"""Consumer groups by kind, pure: ``classic``, ``modern`` (what consumer and share
groups share), ``consumer`` (KIP-848) and ``share`` (KIP-932), and the rules every kind
follows (sessions, state transitions checked against a table, offset retention, group
configs). The kinds import one another only where a rule needs it (import-linter)."""
