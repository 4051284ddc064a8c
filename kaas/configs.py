"""Topic configuration keys kaas understands, their broker defaults and validation.

No silent configs: every key of ``TOPIC_CONFIGS`` is honoured, or ``validate`` refuses the
values kaas would not honour (the handlers answer INVALID_CONFIG with its message).
``HOW`` says which, per key; README's configuration reference prints it and
tests/integration/test_topic_configs.py walks the whole table.
"""

from __future__ import annotations

import re

from kaas.settings import Settings
from kaas.storage.partition_log import LogConfig
from kaas.storage.topics import TopicMeta
from kaas.wire.compress import LEVEL_RANGES

LONG_MAX = 2**63 - 1

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
    "message.timestamp.before.max.ms": ("long", "log_message_timestamp_before_max_ms"),
    "message.timestamp.after.max.ms": ("long", "log_message_timestamp_after_max_ms"),
    "compression.gzip.level": ("int", -1),
    "compression.lz4.level": ("int", 9),
    "compression.zstd.level": ("int", 3),
    "min.insync.replicas": ("int", 1),
    "unclean.leader.election.enable": ("boolean", "false"),
    "index.interval.bytes": ("int", "index_interval_bytes"),
    "file.delete.delay.ms": ("long", "segment_delete_delay_ms"),
    "flush.messages": ("long", 9223372036854775807),
    "flush.ms": ("long", 9223372036854775807),
    # log compaction (cleanup.policy=compact or compact,delete)
    "min.cleanable.dirty.ratio": ("double", "0.5"),
    "min.compaction.lag.ms": ("long", 0),
    "max.compaction.lag.ms": ("long", 9223372036854775807),
    "delete.retention.ms": ("long", 86400000),
}

READ_ONLY: set[str] = set()

# What kaas does with each key: "honoured" means as Apache documents it. README's
# configuration reference prints this table (scripts/config_reference.py).
HOW: dict[str, str] = {
    "cleanup.policy": "delete: retention deletes old segments; compact: the log cleaner keeps the latest "
                      "record per key; compact,delete: both.",
    "compression.type": "producer stores each batch as the producer compressed it; uncompressed, gzip, "
                        "snappy, lz4 or zstd recompresses (or decompresses) a batch in another codec on "
                        "append, as Apache's LogValidator does (docs/validation.rst).",
    "compression.gzip.level": "The gzip level of a batch recompressed to gzip (-1: zlib's default, 6).",
    "compression.lz4.level": "The lz4 level of a batch recompressed to lz4 (9, the default: LZ4's fast "
                             "compressor; any other: its high-compression one at that level, as Apache).",
    "compression.zstd.level": "The zstd level of a batch recompressed to zstd.",
    "retention.ms": "Segments whose newest timestamp is older than this are deleted, the active one too (-1: never).",
    "retention.bytes": "The oldest segments are deleted while the partition is larger (-1: no limit).",
    "segment.bytes": "The active segment rolls once it holds this many bytes.",
    "segment.ms": "The active segment rolls once it is this old: at the next append, and on a compacted "
                  "topic also when idle (the log cleaner rolls it, so its records become cleanable).",
    "max.message.bytes": "Largest record batch (as produced, compressed) a Produce may append to the topic; "
                         "larger ones get MESSAGE_TOO_LARGE.",
    "message.timestamp.type": "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch "
                              "with the broker's clock.",
    "message.timestamp.before.max.ms": "On a CreateTime topic a batch with a record timestamp more than this "
                                       "before the broker's clock is refused (INVALID_TIMESTAMP, KIP-937).",
    "message.timestamp.after.max.ms": "On a CreateTime topic a batch with a record timestamp more than this "
                                      "after the broker's clock is refused (INVALID_TIMESTAMP, KIP-937).",
    "min.insync.replicas": "The in-sync replicas an acks=all produce needs.",
    "unclean.leader.election.enable": "true and false are both honoured: every takeover reads the one log "
                                      "on the shared volume, so no election is unclean (the new leader has "
                                      "every record the old one wrote).",
    "index.interval.bytes": "Bytes between two entries of a segment's sparse offset index.",
    "file.delete.delay.ms": "A segment that retention, DeleteRecords or the log cleaner drops, and a deleted "
                            "topic's directory, is renamed *.deleted (readers no longer see it; kaas inspect "
                            "lists it) and removed from the volume this long after, by the partition's leader "
                            "(the controller for a topic); a new leader removes what a previous one left.",
    "flush.messages": "kaas fsyncs before it answers an acks=all produce (a group commit); acks=0/1 batches "
                      "are fsynced by the partition's next group commit (an acks=all produce or a "
                      "transaction marker), segment roll or hand-over, and, with this set, as soon as this "
                      "many offsets of the partition are not yet durable (the default: never by count).",
    "flush.ms": "As flush.messages, by time: the partition is fsynced once an append has waited this long "
                "for a group commit (the default: never by time).",
    "min.cleanable.dirty.ratio": "The log cleaner cleans a partition once this share of its cleanable bytes "
                                 "was written since its last pass.",
    "min.compaction.lag.ms": "A record stays uncompacted at least this long after it was written.",
    "max.compaction.lag.ms": "A pass runs, whatever the dirty ratio, once the oldest uncleaned segment's "
                             "newest record is this old.",
    "delete.retention.ms": "A tombstone, and a transaction marker none of whose records remain, is kept "
                           "until its batch is this old (by its timestamp); then the log cleaner removes it.",
}

# Keys kaas honours for some values only: name -> (the values it takes, why not others).
_ONLY: dict[str, tuple[frozenset[str], str]] = {
}
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
# Apache's lower bounds (LogConfig) for the keys validated here
_MINIMUM: dict[str, int] = {"segment.bytes": 14, "retention.ms": -1, "max.message.bytes": 0,
                            "index.interval.bytes": 0, "flush.messages": 1, "flush.ms": 0}
_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), LONG_MAX)}
_INTEGER = re.compile(r"[+-]?[0-9]+")


def default(settings: Settings, name: str) -> str:
    """The broker default of a topic config: a dynamic broker config's (KIP-226,
    ``Settings.topic_defaults``), else the ``kaas broker`` option's, else Apache's."""
    if name in settings.topic_defaults:
        return str(settings.topic_defaults[name])
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
        if name in NOT_TAKEN:
            return f"{name} is not supported: {NOT_TAKEN[name]}"
        return f"unknown topic config {name}"
    if value is None:
        return None
    kind = TOPIC_CONFIGS[name][0]
    if kind in ("int", "long"):
        if not _INTEGER.fullmatch(value.strip()):
            return f"{name} must be an integer"
        low, high = _RANGE[kind]
        if not low <= int(value) <= high:
            return f"{name} must be between {low} and {high}"
        if name in _MINIMUM and int(value) < _MINIMUM[name]:
            return f"{name} must be at least {_MINIMUM[name]}"
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
    if name == "compression.type" and value not in _COMPRESSION_TYPES:
        return f"compression.type must be one of {', '.join(_COMPRESSION_TYPES)}"
    if name in LEVEL_RANGES:
        _codec, low, high = LEVEL_RANGES[name]
        if not (low <= int(value) <= high or (name == "compression.gzip.level" and int(value) == -1)):
            extra = " or -1" if name == "compression.gzip.level" else ""
            return f"{name} must be between {low} and {high}{extra}"
    if name in _ONLY:
        values, why = _ONLY[name]
        if (str(int(value)) if kind in ("int", "long") else value) not in values:
            return f"{name}={value} is not supported: {why}"
    return None


# The other topic configs Apache Kafka 4 accepts, and why kaas refuses them (as unknown keys,
# INVALID_CONFIG); docs/configs.rst prints them (scripts/config_reference.py). A key added
# to TOPIC_CONFIGS leaves this table.
_NO_TIERED = "kaas has no tiered storage: every byte stays on the shared volume"
NOT_TAKEN: dict[str, str] = {
    "segment.index.bytes": "kaas keeps a segment's sparse index in memory and in its summary file; nothing "
                           "caps its size",
    "segment.jitter.ms": "kaas rolls segments by segment.ms without jitter",
    "preallocate": "kaas never preallocates segment files",
    "follower.replication.throttled.replicas": "kaas has no followers: the shared volume replaces replication",
    "leader.replication.throttled.replicas": "kaas has no followers: the shared volume replaces replication",
    "local.retention.ms": _NO_TIERED,
    "local.retention.bytes": _NO_TIERED,
    "remote.storage.enable": _NO_TIERED,
    "remote.log.copy.disable": _NO_TIERED,
    "remote.log.delete.on.disable": _NO_TIERED,
}


def max_message_bytes(settings: Settings, meta: TopicMeta | None) -> int:
    """The largest record batch a Produce may append to a topic.

    Args:
        settings: the broker's settings (``--message-max-bytes`` is the default).
        meta: the topic, or None when it is unknown.

    Returns:
        the topic's max.message.bytes override, else the broker's message.max.bytes.
    """
    value = meta.configs.get("max.message.bytes") if meta is not None else None
    return settings.message_max_bytes if value is None else int(value)


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
        file_delete_delay_ms=int(eff["file.delete.delay.ms"]),
        flush_messages=int(eff["flush.messages"]),
        flush_ms=int(eff["flush.ms"]),
    )
