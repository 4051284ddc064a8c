"""Consumer groups by kind, pure: ``classic``, ``modern`` (what consumer and share
groups share), ``consumer`` (KIP-848) and ``share`` (KIP-932), and the rules every kind
follows (sessions, offset retention, group configs)."""
