"""Group configs (KIP-848, KIP-932): the keys Apache Kafka 4.4 takes on a GROUP config
resource, their validation against the broker's ``group.consumer.*`` / ``group.share.*``
settings, and the values a group runs with (``effective``); plus Apache's checks of those
broker settings themselves (``settings_problem``).

A group's configs are overrides: a key it does not set takes the broker's value
(``consumer.session.timeout.ms`` <- ``group.consumer.session.timeout.ms`` ...) or the key's
own default (``share.auto.offset.reset`` = ``latest``, ``share.isolation.level`` =
``read_uncommitted``). ``effective`` clamps a stored value into the broker's current
min/max (a value validated against older bounds), as Apache's GroupConfig.evaluate does.

Pure: no I/O, no clock. The settings are seen through ``GroupSettings`` (``kaas.settings.
Settings`` satisfies it), the file is ``storage.group_configs``.

Invariants:
    - ``validate`` refuses with Apache's error class and message, in Apache's order: null
      values, unknown names, each value's type and range (in the order Apache defines the
      keys), then the broker bounds, then session timeout > heartbeat interval;
    - ``effective`` never fails on a stored override: its int values end within the
      broker's bounds, a value that does not parse is left at the default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kaas.domain.broker_configs import Refusal, check_value
from kaas.domain.groups.consumer.assignors import ASSIGNORS

__all__ = ["GROUP_CONFIG_KEYS", "NOT_TAKEN", "GroupConfig", "GroupSettings", "Refusal", "defaults",
           "effective", "reset_duration_ms", "settings_problem", "validate"]

# DescribeConfigs' ConfigSource of a group's own value (Apache's GROUP_CONFIG)
SOURCE_GROUP = 8

LATEST, EARLIEST, BY_DURATION = "latest", "earliest", "by_duration:"
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)
ASSIGNOR_CLASSES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The values one group runs with: its overrides, else the broker's settings."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    share_delivery_count_limit: int
    share_partition_max_record_locks: int
    share_auto_offset_reset: str  # "latest" | "earliest" | "by_duration:PT..." (reset_duration_ms)
    share_isolation_level: str  # "read_uncommitted" | "read_committed"
    share_renew_acknowledge_enable: bool


class GroupSettings(Protocol):
    """The broker settings group configs depend on (``kaas.settings.Settings`` has them)."""

    @property
    def group_consumer_session_timeout_ms(self) -> int: ...
    @property
    def group_consumer_min_session_timeout_ms(self) -> int: ...
    @property
    def group_consumer_max_session_timeout_ms(self) -> int: ...
    @property
    def group_consumer_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_consumer_min_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_consumer_max_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_consumer_assignors(self) -> tuple[str, ...]: ...
    @property
    def group_consumer_migration_policy(self) -> str: ...
    @property
    def group_consumer_max_size(self) -> int: ...
    @property
    def group_share_session_timeout_ms(self) -> int: ...
    @property
    def group_share_min_session_timeout_ms(self) -> int: ...
    @property
    def group_share_max_session_timeout_ms(self) -> int: ...
    @property
    def group_share_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_share_min_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_share_max_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_share_record_lock_duration_ms(self) -> int: ...
    @property
    def group_share_min_record_lock_duration_ms(self) -> int: ...
    @property
    def group_share_max_record_lock_duration_ms(self) -> int: ...
    @property
    def group_share_delivery_count_limit(self) -> int: ...
    @property
    def group_share_partition_max_record_locks(self) -> int: ...
    @property
    def group_share_max_size(self) -> int: ...
    @property
    def group_share_min_delivery_count_limit(self) -> int: ...
    @property
    def group_share_max_delivery_count_limit(self) -> int: ...
    @property
    def group_share_min_partition_max_record_locks(self) -> int: ...
    @property
    def group_share_max_partition_max_record_locks(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Key:
    """One group config.

    Attributes:
        type: Apache's type (``int``, ``string`` or ``boolean``).
        field: the ``GroupConfig`` attribute it sets.
        setting: the broker setting (a ``GroupSettings`` attribute) that is its default,
            whose ``min``/``max`` siblings bound it; "" for a key with a fixed default.
        default: the fixed default (keys without a broker setting).
        at_least: the smallest value Apache's ConfigDef accepts (int keys).
        doc: what it does (docs/configs.rst).
    """

    type: str
    field: str
    setting: str = ""
    default: str = ""
    at_least: int = 1
    doc: str = ""


# Apache 4.4's GroupConfig, in its definition order (the order ConfigDef checks the values in).
GROUP_CONFIG_KEYS: dict[str, Key] = {
    "consumer.session.timeout.ms": Key("int", "consumer_session_timeout_ms", "group_consumer_session_timeout_ms",
                                       doc="a consumer-protocol member that sends no heartbeat for this long is "
                                           "removed from the group"),
    "consumer.heartbeat.interval.ms": Key("int", "consumer_heartbeat_interval_ms",
                                          "group_consumer_heartbeat_interval_ms",
                                          doc="the heartbeat interval given to the consumer-protocol members"),
    "share.session.timeout.ms": Key("int", "share_session_timeout_ms", "group_share_session_timeout_ms",
                                    doc="a share-group member that sends no heartbeat for this long is removed"),
    "share.heartbeat.interval.ms": Key("int", "share_heartbeat_interval_ms", "group_share_heartbeat_interval_ms",
                                       doc="the heartbeat interval given to the share-group members"),
    "share.record.lock.duration.ms": Key("int", "share_record_lock_duration_ms", "group_share_record_lock_duration_ms",
                                         at_least=1000,
                                         doc="how long a share consumer holds a record it acquired before it is "
                                             "released to be delivered again"),
    "share.delivery.count.limit": Key("int", "share_delivery_count_limit", "group_share_delivery_count_limit",
                                      at_least=2,
                                      doc="deliveries of a record to the group before it is archived"),
    "share.partition.max.record.locks": Key("int", "share_partition_max_record_locks",
                                            "group_share_partition_max_record_locks", at_least=100,
                                            doc="records one share-partition of the group may have acquired at once"),
    "share.auto.offset.reset": Key("string", "share_auto_offset_reset", default=LATEST,
                                   doc="where a share-partition starts when the group first reads it: latest, "
                                       "earliest, or by_duration:<ISO-8601 duration> back from now"),
    "share.isolation.level": Key("string", "share_isolation_level", default=READ_UNCOMMITTED,
                                 doc="read_committed: a share group gets no record of an aborted transaction and "
                                     "none past the last stable offset"),
    "share.renew.acknowledge.enable": Key("boolean", "share_renew_acknowledge_enable", default="true",
                                          doc="false: a RENEW acknowledgement (KIP-1222) is refused with "
                                              "INVALID_RECORD_STATE"),
}

_NO_STREAMS = "kaas has no streams groups (KIP-1071): nothing would read it"
_NO_INTERVAL = ("kaas computes a group's target assignment at the heartbeat that changes it; it has no "
                "assignment interval")
_NO_OFFLOAD = "kaas has no assignor threads to offload to"
_NO_DLQ = "kaas has no share-group dead-letter queues (KIP-1191, share.version 2)"
# Apache 4.4 group configs kaas refuses (INVALID_CONFIG with the reason) rather than store unread.
NOT_TAKEN: dict[str, str] = {
    "consumer.assignment.interval.ms": _NO_INTERVAL,
    "consumer.assignor.offload.enable": _NO_OFFLOAD,
    "share.assignment.interval.ms": _NO_INTERVAL,
    "share.assignor.offload.enable": _NO_OFFLOAD,
    **{f"streams.{k}": _NO_STREAMS for k in (
        "session.timeout.ms", "heartbeat.interval.ms", "num.standby.replicas", "initial.rebalance.delay.ms",
        "assignment.interval.ms", "rack.aware.assignment.tags", "assignor.offload.enable",
        "task.offset.interval.ms", "num.warmup.replicas", "acceptable.recovery.lag", "assignor.name")},
    "errors.deadletterqueue.topic.name": _NO_DLQ,
    "errors.deadletterqueue.copy.record.enable": _NO_DLQ,
}

# (value key, broker min setting, broker max setting) in the order Apache checks the bounds
_BOUNDS: tuple[tuple[str, str, str], ...] = (
    ("consumer.heartbeat.interval.ms", "group_consumer_min_heartbeat_interval_ms",
     "group_consumer_max_heartbeat_interval_ms"),
    ("consumer.session.timeout.ms", "group_consumer_min_session_timeout_ms", "group_consumer_max_session_timeout_ms"),
    ("share.heartbeat.interval.ms", "group_share_min_heartbeat_interval_ms", "group_share_max_heartbeat_interval_ms"),
    ("share.session.timeout.ms", "group_share_min_session_timeout_ms", "group_share_max_session_timeout_ms"),
    ("share.record.lock.duration.ms", "group_share_min_record_lock_duration_ms",
     "group_share_max_record_lock_duration_ms"),
    ("share.delivery.count.limit", "group_share_min_delivery_count_limit", "group_share_max_delivery_count_limit"),
    ("share.partition.max.record.locks", "group_share_min_partition_max_record_locks",
     "group_share_max_partition_max_record_locks"),
)
_SESSION_OVER_HEARTBEAT = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
                           ("share.session.timeout.ms", "share.heartbeat.interval.ms"))


def option_name(setting: str) -> str:
    """Apache's broker config of a ``Settings`` field (``group_share_max_size`` ->
    ``group.share.max.size``)."""
    return setting.replace("_", ".")


def broker_synonym(name: str) -> str | None:
    """The broker config a group config defaults to (Apache's ``group.`` + name), if any."""
    key = GROUP_CONFIG_KEYS.get(name)
    return option_name(key.setting) if key is not None and key.setting else None


def defaults(settings: GroupSettings) -> dict[str, str]:
    """Every group config's value for a group that sets none (the broker's settings)."""
    return {name: str(getattr(settings, key.setting)) if key.setting else key.default
            for name, key in GROUP_CONFIG_KEYS.items()}


# Java's Duration.parse (ISO-8601 PnDTnHnMn.nS, case-insensitive, signs allowed per part)
_DURATION = re.compile(r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?"
                       r"(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?", re.IGNORECASE)


def reset_duration_ms(value: str) -> int | None:
    """The look-back of a ``share.auto.offset.reset`` value in milliseconds:
    ``by_duration:PT1H`` -> 3600000; None for ``latest`` and ``earliest``.

    Raises:
        ValueError: not a valid strategy (Apache accepts exactly ``latest``, ``earliest``
            and ``by_duration:`` with a non-negative ISO-8601 duration).
    """
    if value in (LATEST, EARLIEST):
        return None
    if not value.startswith(BY_DURATION):
        raise ValueError(f"unknown strategy {value!r}")
    m = _DURATION.fullmatch(value[len(BY_DURATION):])
    if m is None or (m.group(2) is None and m.group(3) is None) or m.group(3) in ("T", "t"):
        raise ValueError(f"not an ISO-8601 duration: {value[len(BY_DURATION):]!r}")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in (m.group(2), m.group(4), m.group(5), m.group(6)))
    nanos = int((m.group(7) or "").ljust(9, "0"))
    sign_s = -1 if (m.group(6) or "").startswith("-") else 1
    total_ns = (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 10**9 + sign_s * nanos
    if m.group(1) == "-":
        total_ns = -total_ns
    if total_ns < 0:
        raise ValueError("Negative duration is not supported in by_duration offset reset strategy.")
    return total_ns // 10**6


def _invalid(name: str, value: str, why: str) -> Refusal:
    """Apache's ConfigException: ``Invalid value <v> for configuration <name>: <why>``."""
    return Refusal("invalid_config", f"Invalid value {value} for configuration {name}: {why}")


def _check(name: str, raw: str) -> Refusal | None:
    """ConfigDef's parse and validator of one group config value."""
    key = GROUP_CONFIG_KEYS[name]
    value = raw.strip()
    if key.type == "int":
        err = check_value(name, "int", raw)
        if err is not None:
            return Refusal("invalid_config", err)
        if int(value) < key.at_least:
            return _invalid(name, value, f"Value must be at least {key.at_least}")
    elif name == "share.auto.offset.reset":
        try:
            reset_duration_ms(value)
        except ValueError:
            return _invalid(name, value, f"Invalid value `{value}` for configuration {name}. The value must be "
                                         "either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")
    elif name == "share.isolation.level" and value not in ISOLATION_LEVELS:
        return _invalid(name, value, f"String must be one of: {', '.join(ISOLATION_LEVELS)}")
    elif key.type == "boolean":
        return _refused(check_value(name, "boolean", raw))
    return None


def _refused(err: str | None) -> Refusal | None:
    return Refusal("invalid_config", err) if err is not None else None


def check_stored(name: str, value: str) -> str | None:
    """Why a stored group config could not have been written by ``validate`` (an unknown
    name, a value that does not parse), or None: what ``storage.group_configs`` checks."""
    if name not in GROUP_CONFIG_KEYS:
        return f"unknown group config {name}"
    refusal = _check(name, value)
    return refusal.message if refusal is not None else None


def normalized(name: str, value: str) -> str:
    """A valid value as kaas stores and shows it (ints without sign or blanks; trimmed)."""
    v = value.strip()
    kind = GROUP_CONFIG_KEYS[name].type
    return str(int(v)) if kind == "int" else v.lower() if kind == "boolean" else v


def validate(configs: Mapping[str, str | None], settings: GroupSettings) -> Refusal | None:
    """Apache's checks of a group's whole new set of configs (ControllerConfigurationValidator
    and GroupConfig.validate), with the broker's settings in place of the keys it leaves out.

    Args:
        configs: the group's configs after the alteration (name -> value; None: a null value).
        settings: the broker's ``group.*`` settings (defaults and bounds).

    Returns:
        None when acceptable, else the Refusal (INVALID_CONFIG and Apache's message).
    """
    nulls = [n for n, v in configs.items() if v is None]
    if nulls:
        return Refusal("invalid_config", f"Null value not supported for group configs: {','.join(nulls)}")
    for name in configs:
        if name in NOT_TAKEN:
            return Refusal("invalid_config", f"{name} is not supported: {NOT_TAKEN[name]}")
        if name not in GROUP_CONFIG_KEYS:
            return Refusal("invalid_config", f"Unknown group config name: {name}")
    values = defaults(settings)
    for name in GROUP_CONFIG_KEYS:
        raw = configs.get(name)
        if raw is None:
            continue
        refusal = _check(name, raw)
        if refusal is not None:
            return refusal
        values[name] = raw.strip()
    for name, low, high in _BOUNDS:
        v = int(values[name])
        if v < getattr(settings, low):
            return Refusal("invalid_config", f"{name} must be greater than or equal to {option_name(low)}")
        if v > getattr(settings, high):
            return Refusal("invalid_config", f"{name} must be less than or equal to {option_name(high)}")
    for session, heartbeat in _SESSION_OVER_HEARTBEAT:
        if int(values[session]) <= int(values[heartbeat]):
            return Refusal("invalid_config", f"{session} must be greater than {heartbeat}")
    return None


def effective(settings: GroupSettings, overrides: Mapping[str, str]) -> GroupConfig:
    """The values a group runs with: its ``overrides`` (as stored), the broker's settings for
    the rest; an int override outside the broker's current bounds is clamped into them."""
    bounds = {name: (getattr(settings, low), getattr(settings, high)) for name, low, high in _BOUNDS}
    values: dict[str, int | str | bool] = {}
    for name, key in GROUP_CONFIG_KEYS.items():
        default = getattr(settings, key.setting) if key.setting else key.default
        raw = overrides.get(name)
        value: int | str | bool = default
        if raw is not None and _check(name, raw) is None:
            value = int(raw) if key.type == "int" else raw.strip()
            if isinstance(value, int) and name in bounds:
                low, high = bounds[name]
                value = min(max(value, low), high)
        if key.type == "boolean":
            value = str(value).strip().lower() == "true"
        values[key.field] = value
    return GroupConfig(**values)  # type: ignore[arg-type]  # (each field gets its key's type)


# ------------------------------------------------------------------ the broker's own settings

# the broker's group.* settings of KIP-848 and KIP-932 (``kaas broker`` options, read-only configs)
BROKER_SETTINGS: tuple[str, ...] = (
    "group_consumer_session_timeout_ms", "group_consumer_min_session_timeout_ms",
    "group_consumer_max_session_timeout_ms", "group_consumer_heartbeat_interval_ms",
    "group_consumer_min_heartbeat_interval_ms", "group_consumer_max_heartbeat_interval_ms",
    "group_consumer_assignors", "group_consumer_migration_policy", "group_consumer_max_size",
    "group_share_session_timeout_ms", "group_share_min_session_timeout_ms", "group_share_max_session_timeout_ms",
    "group_share_heartbeat_interval_ms", "group_share_min_heartbeat_interval_ms",
    "group_share_max_heartbeat_interval_ms", "group_share_record_lock_duration_ms",
    "group_share_min_record_lock_duration_ms", "group_share_max_record_lock_duration_ms",
    "group_share_delivery_count_limit", "group_share_min_delivery_count_limit",
    "group_share_max_delivery_count_limit", "group_share_partition_max_record_locks",
    "group_share_min_partition_max_record_locks", "group_share_max_partition_max_record_locks",
    "group_share_max_size",
)

# (setting, smallest, largest) Apache's ConfigDef ranges of the group.* broker configs
_RANGES: tuple[tuple[str, int, int | None], ...] = (
    ("group_consumer_session_timeout_ms", 1, None), ("group_consumer_min_session_timeout_ms", 1, None),
    ("group_consumer_max_session_timeout_ms", 1, None), ("group_consumer_heartbeat_interval_ms", 1, None),
    ("group_consumer_min_heartbeat_interval_ms", 1, None), ("group_consumer_max_heartbeat_interval_ms", 1, None),
    ("group_consumer_max_size", 1, None),
    ("group_share_session_timeout_ms", 1, None), ("group_share_min_session_timeout_ms", 1, None),
    ("group_share_max_session_timeout_ms", 1, None), ("group_share_heartbeat_interval_ms", 1, None),
    ("group_share_min_heartbeat_interval_ms", 1, None), ("group_share_max_heartbeat_interval_ms", 1, None),
    ("group_share_max_size", 1, 1000),
    ("group_share_delivery_count_limit", 2, 10), ("group_share_max_delivery_count_limit", 5, 25),
    ("group_share_min_delivery_count_limit", 2, 5),
    ("group_share_record_lock_duration_ms", 1000, 3_600_000),
    ("group_share_min_record_lock_duration_ms", 1000, 30_000),
    ("group_share_max_record_lock_duration_ms", 30_000, 3_600_000),
    ("group_share_partition_max_record_locks", 100, 10_000),
    ("group_share_max_partition_max_record_locks", 2000, 10_000),
    ("group_share_min_partition_max_record_locks", 100, 2000),
)
# ShareGroupConfig's require() checks, in its order: (setting, at least this setting)
_SHARE_ORDER: tuple[tuple[str, str], ...] = (
    ("group_share_max_delivery_count_limit", "group_share_delivery_count_limit"),
    ("group_share_delivery_count_limit", "group_share_min_delivery_count_limit"),
    ("group_share_max_partition_max_record_locks", "group_share_partition_max_record_locks"),
    ("group_share_partition_max_record_locks", "group_share_min_partition_max_record_locks"),
    ("group_share_record_lock_duration_ms", "group_share_min_record_lock_duration_ms"),
    ("group_share_max_record_lock_duration_ms", "group_share_record_lock_duration_ms"),
)


_WORDS = {">=": "greater than or equal to", "<=": "less than or equal to", "<": "less than"}


def _relations(kind: str) -> tuple[tuple[str, str, str], ...]:
    """Apache's require() checks of one group type's session and heartbeat settings, in
    its order: (setting, relation, other setting)."""
    p = f"group_{kind}_"
    hb, s = f"{p}heartbeat_interval_ms", f"{p}session_timeout_ms"
    return ((f"{p}max_heartbeat_interval_ms", ">=", f"{p}min_heartbeat_interval_ms"),
            (hb, ">=", f"{p}min_heartbeat_interval_ms"), (hb, "<=", f"{p}max_heartbeat_interval_ms"),
            (f"{p}max_session_timeout_ms", ">=", f"{p}min_session_timeout_ms"),
            (s, ">=", f"{p}min_session_timeout_ms"), (s, "<=", f"{p}max_session_timeout_ms"),
            (hb, "<", s))


def parse_assignors(value: str) -> tuple[str, ...]:
    """``group.consumer.assignors``: builtin names or Apache's class names, comma separated,
    as kaas's names (``uniform``, ``range``); the first is the default.

    Raises:
        ValueError: empty, a duplicate, or an assignor kaas does not have.
    """
    names = [x.strip() for x in value.split(",") if x.strip()]
    if not names:
        raise ValueError("at least one assignor is needed")
    out: list[str] = []
    for n in names:
        short = ASSIGNOR_CLASSES.get(n, n)
        if short not in ASSIGNORS:
            raise ValueError(f"unknown assignor {n}: kaas has {', '.join(ASSIGNORS)} "
                             f"({', '.join(ASSIGNOR_CLASSES)})")
        if short in out:
            raise ValueError(f"duplicate assignor {n}")
        out.append(short)
    return tuple(out)


def settings_problem(settings: GroupSettings) -> tuple[str, str] | None:
    """What Apache's GroupCoordinatorConfig and ShareGroupConfig refuse in the broker's
    ``group.consumer.*`` / ``group.share.*`` settings: (Apache's config name, message), or
    None when they are consistent."""
    for setting, low, high in _RANGES:
        v = getattr(settings, setting)
        name = option_name(setting)
        if v < low:
            return name, f"Invalid value {v} for configuration {name}: Value must be at least {low}"
        if high is not None and v > high:
            return name, f"Invalid value {v} for configuration {name}: Value must be no more than {high}"
    for kind in ("consumer", "share"):
        for left, op, right in _relations(kind):
            a, b = getattr(settings, left), getattr(settings, right)
            if not (a >= b if op == ">=" else a <= b if op == "<=" else a < b):
                return option_name(left), f"{option_name(left)} must be {_WORDS[op]} {option_name(right)}"
    for larger, smaller in _SHARE_ORDER:
        if getattr(settings, larger) < getattr(settings, smaller):
            return (option_name(larger),
                    f"{option_name(larger)} must be greater than or equal to {option_name(smaller)}")
    try:
        parse_assignors(",".join(settings.group_consumer_assignors))
    except ValueError as exc:
        return "group.consumer.assignors", str(exc)
    if settings.group_consumer_migration_policy not in MIGRATION_POLICIES:
        return ("group.consumer.migration.policy", f"Invalid value {settings.group_consumer_migration_policy} for "
                f"configuration group.consumer.migration.policy: String must be one of: "
                f"{', '.join(MIGRATION_POLICIES)}")
    return None
