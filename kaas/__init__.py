"""kaas: a Kafka-wire-compatible broker cluster on a shared data directory."""

from kaas import _native

__version__ = "0.1.0"

_native.use_source()  # KAAS_PURE=1, or a stale build in a checkout: the compiled modules' sources
