"""Topic configuration keys kaas understands, their broker defaults and validation."""

from __future__ import annotations

from kaas.settings import Settings
from kaas.storage.partition_log import LogConfig

# name -> (type, Settings attribute or literal default)
TOPIC_CONFIGS: dict[str, tuple[str, str | int]] = {
    "cleanup.policy": ("list", "delete"),
    "compression.type": ("string", "producer"),
    "retention.ms": ("long", "retention_ms"),
    "retention.bytes": ("long", "retention_bytes"),
    "segment.bytes": ("int", "segment_bytes"),
    "segment.ms": ("long", "segment_ms"),
    "max.message.bytes": ("int", "message_max_bytes"),
    "message.timestamp.type": ("string", "CreateTime"),
    "min.insync.replicas": ("int", 1),
    "unclean.leader.election.enable": ("boolean", "false"),
    "index.interval.bytes": ("int", "index_interval_bytes"),
    "file.delete.delay.ms": ("long", 60000),
    "flush.messages": ("long", 9223372036854775807),
    "flush.ms": ("long", 9223372036854775807),
    # log compaction (cleanup.policy=compact or compact,delete)
    "min.cleanable.dirty.ratio": ("double", "0.5"),
    "min.compaction.lag.ms": ("long", 0),
    "max.compaction.lag.ms": ("long", 9223372036854775807),
    "delete.retention.ms": ("long", 86400000),
}

READ_ONLY: set[str] = set()


def default(settings: Settings, name: str) -> str:
    _type, src = TOPIC_CONFIGS[name]
    if isinstance(src, str) and hasattr(settings, src):
        return str(getattr(settings, src))
    return str(src)


def effective(settings: Settings, overrides: dict[str, str]) -> dict[str, tuple[str, bool]]:
    """name -> (value, is_default) for every known topic config."""
    out = {}
    for name in TOPIC_CONFIGS:
        if name in overrides:
            out[name] = (overrides[name], False)
        else:
            out[name] = (default(settings, name), True)
    return out


def validate(name: str, value: str | None) -> str | None:
    """An error message when ``name``/``value`` is not acceptable, else None."""
    if name not in TOPIC_CONFIGS:
        return f"unknown topic config {name}"
    if value is None:
        return None
    kind = TOPIC_CONFIGS[name][0]
    if kind in ("int", "long"):
        try:
            int(value)
        except ValueError:
            return f"{name} must be an integer"
    if kind == "double":
        try:
            ratio = float(value)
        except ValueError:
            return f"{name} must be a number"
        if name == "min.cleanable.dirty.ratio" and not 0.0 <= ratio <= 1.0:
            return f"{name} must be between 0 and 1"
    if kind in ("int", "long") and name.endswith(".ms") and name != "retention.ms" and int(value) < 0:
        return f"{name} must not be negative"
    if kind == "boolean" and value.lower() not in ("true", "false"):
        return f"{name} must be true or false"
    if name == "cleanup.policy" and not set(value.split(",")) <= {"delete", "compact"}:
        return "cleanup.policy must be delete and/or compact"
    if name == "message.timestamp.type" and value not in ("CreateTime", "LogAppendTime"):
        return "message.timestamp.type must be CreateTime or LogAppendTime"
    return None


def log_config(settings: Settings, overrides: dict[str, str]) -> LogConfig:
    eff = {k: v for k, (v, _) in effective(settings, overrides).items()}
    return LogConfig(
        segment_bytes=int(eff["segment.bytes"]),
        segment_ms=int(eff["segment.ms"]),
        retention_ms=int(eff["retention.ms"]),
        retention_bytes=int(eff["retention.bytes"]),
        index_interval_bytes=int(eff["index.interval.bytes"]),
        fsync=settings.fsync,
        delete="delete" in eff["cleanup.policy"].split(","),
        compact="compact" in eff["cleanup.policy"].split(","),
        min_cleanable_dirty_ratio=float(eff["min.cleanable.dirty.ratio"]),
        min_compaction_lag_ms=int(eff["min.compaction.lag.ms"]),
        max_compaction_lag_ms=int(eff["max.compaction.lag.ms"]),
        delete_retention_ms=int(eff["delete.retention.ms"]),
    )
