"""kaas: a Kafka-wire-compatible broker cluster on a shared data directory."""

__version__ = "0.1.0"
