"""Dynamic broker configs (KIP-226): the keys Apache Kafka 4 lets AlterConfigs and
IncrementalAlterConfigs change on a BROKER resource, what kaas does with each, their
validation, and how the layers resolve.

A BROKER resource named ``""`` is the cluster-wide default; one named ``"<id>"`` is that
broker. Per key the value in force is, highest first: DYNAMIC_BROKER_CONFIG (the broker's
own layer), DYNAMIC_DEFAULT_BROKER_CONFIG (the default layer), STATIC_BROKER_CONFIG (a
``kaas broker`` option given at start), DEFAULT_CONFIG. Some keys have synonyms
(``log.retention.ms``/``.minutes``/``.hours``): within a layer the first synonym set wins,
and a key set in the broker's layer hides its synonyms of the default layer, as Apache
resolves them.

Each dynamic key is one of:

- ``SETTING``: kaas has the setting; the value replaces a ``Settings`` field (converted);
- ``TOPIC``: the broker default of a topic config (``log.cleanup.policy`` ->
  ``cleanup.policy``); topics without an override follow it, validated as the topic
  config is;
- ``NONE``: accepted and stored, shown by DescribeConfigs, but nothing in kaas reads it
  (the reason says why: kaas has no such machinery, e.g. Kerberos or tiered storage);
- ``REFUSED``: kaas has the setting but reads it only at start; a dynamic value is refused
  (INVALID_CONFIG with the reason) rather than stored and ignored.

Pure: no I/O, no clock; the callers read and write the file (``storage.broker_configs``).

Invariants:
    - every key of ``DYNAMIC`` has a type of ``TYPES`` and exactly one route;
    - ``resolve`` is deterministic, and a broker-layer key always wins over the default
      layer's value of the key and of its synonyms.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

SETTING, TOPIC, NONE, REFUSED = "setting", "topic", "none", "refused"

# DescribeConfigs config sources (ConfigSource in Apache's protocol)
SOURCE_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT = 1, 2, 3
SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 4, 5

TYPES = ("boolean", "string", "int", "short", "long", "double", "list", "password", "class")
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_INTEGER = re.compile(r"[+-]?[0-9]+")
LISTENER_PREFIX = re.compile(r"^listener\.name\.([^.]+)\.(.+)$")


@dataclass(frozen=True, slots=True)
class Key:
    """One dynamic broker config.

    Attributes:
        type: Apache's type of the value (``TYPES``).
        route: SETTING, TOPIC, NONE or REFUSED.
        target: the ``Settings`` field (SETTING) or topic config (TOPIC); else "".
        scale: the factor that turns the value into the target's unit (hours -> ms).
        per_broker: settable only on a broker id, never at the cluster default.
        why: for NONE and REFUSED, the reason kaas gives.
        only: for a key kaas honours for some values only, those values.
    """

    type: str
    route: str
    target: str = ""
    scale: int = 1
    per_broker: bool = False
    why: str = ""
    only: frozenset[str] = frozenset()


_NO_THREADS = "kaas serves each broker from one trio thread; it has no such pool"
_NO_TIERED = "kaas has no tiered storage: every byte is on the shared volume"
_NO_KERBEROS = "kaas has no Kerberos (GSSAPI); its SASL mechanisms are SCRAM, PLAIN and OAUTHBEARER"
_NO_LIMITS = "kaas sets no connection limits"
_TLS_AT_START = ("kaas loads its TLS material and listener settings at start (--ssl-* and --listener "
                 "options): restart the broker with the new option")
_CLEANER = "kaas's log cleaner is one loop per broker with no dedupe buffer or I/O buffer to size"


def _s(t: str, target: str, scale: int = 1) -> Key:
    return Key(t, SETTING, target, scale)


def _t(t: str, target: str, scale: int = 1) -> Key:
    return Key(t, TOPIC, target, scale)


def _n(t: str, why: str, per_broker: bool = False) -> Key:
    return Key(t, NONE, per_broker=per_broker, why=why)


def _r(t: str, why: str, per_broker: bool = False) -> Key:
    return Key(t, REFUSED, per_broker=per_broker, why=why)


HOUR_MS, MINUTE_MS = 3_600_000, 60_000

# Every key Apache Kafka 4.0 updates dynamically (DynamicBrokerConfig.AllDynamicConfigs).
DYNAMIC: dict[str, Key] = {
    # log configs: the broker defaults of topic configs (ServerTopicConfigSynonyms)
    "log.segment.bytes": _s("int", "segment_bytes"),
    "log.roll.ms": _s("long", "segment_ms"),
    "log.roll.hours": _s("int", "segment_ms", HOUR_MS),
    "log.roll.jitter.ms": _n("long", "kaas rolls segments without jitter (no topic segment.jitter.ms either)"),
    "log.roll.jitter.hours": _n("int", "kaas rolls segments without jitter (no topic segment.jitter.ms either)"),
    "log.index.size.max.bytes": _n("int", "kaas keeps a segment's sparse index in memory and in its summary "
                                          "file; nothing caps its size"),
    "log.flush.interval.messages": _t("long", "flush.messages"),
    "log.flush.interval.ms": _t("long", "flush.ms"),
    "log.flush.scheduler.interval.ms": _t("long", "flush.ms"),
    "log.retention.bytes": _s("long", "retention_bytes"),
    "log.retention.ms": _s("long", "retention_ms"),
    "log.retention.minutes": _s("int", "retention_ms", MINUTE_MS),
    "log.retention.hours": _s("int", "retention_ms", HOUR_MS),
    "message.max.bytes": _s("int", "message_max_bytes"),
    "log.index.interval.bytes": _s("int", "index_interval_bytes"),
    "log.cleaner.delete.retention.ms": _t("long", "delete.retention.ms"),
    "log.cleaner.min.compaction.lag.ms": _t("long", "min.compaction.lag.ms"),
    "log.cleaner.max.compaction.lag.ms": _t("long", "max.compaction.lag.ms"),
    "log.segment.delete.delay.ms": _s("long", "segment_delete_delay_ms"),
    "log.cleaner.min.cleanable.ratio": _t("double", "min.cleanable.dirty.ratio"),
    "log.cleanup.policy": _t("list", "cleanup.policy"),
    "unclean.leader.election.enable": _t("boolean", "unclean.leader.election.enable"),
    "min.insync.replicas": _t("int", "min.insync.replicas"),
    "compression.type": _t("string", "compression.type"),
    "compression.gzip.level": _t("int", "compression.gzip.level"),
    "compression.lz4.level": _t("int", "compression.lz4.level"),
    "compression.zstd.level": _t("int", "compression.zstd.level"),
    "log.preallocate": _n("boolean", "kaas never preallocates segment files"),
    "log.message.timestamp.type": _t("string", "message.timestamp.type"),
    "log.message.timestamp.before.max.ms": _t("long", "message.timestamp.before.max.ms"),
    "log.message.timestamp.after.max.ms": _t("long", "message.timestamp.after.max.ms"),
    "log.local.retention.ms": _n("long", _NO_TIERED),
    "log.local.retention.bytes": _n("long", _NO_TIERED),
    # the log cleaner (LogCleaner's reconfigurable configs; message.max.bytes above)
    "log.cleaner.threads": _n("int", _CLEANER),
    "log.cleaner.dedupe.buffer.size": _n("long", _CLEANER),
    "log.cleaner.io.buffer.load.factor": _n("double", _CLEANER),
    "log.cleaner.io.buffer.size": _n("int", _CLEANER),
    "log.cleaner.io.max.bytes.per.second": _s("double", "log_cleaner_io_max_bytes_per_second"),
    "log.cleaner.backoff.ms": _s("long", "log_cleaner_backoff_ms"),
    # thread pools
    "num.io.threads": _n("int", _NO_THREADS),
    "num.replica.fetchers": _n("int", "kaas has no followers: the shared volume replaces replication"),
    "num.recovery.threads.per.data.dir": _n("int", _NO_THREADS),
    "background.threads": _n("int", _NO_THREADS),
    "num.network.threads": _n("int", _NO_THREADS),
    # plugins
    "metric.reporters": _n("list", "kaas has no Java metrics reporters; each broker serves Prometheus /metrics"),
    "config.providers": _n("list", "kaas has no config providers"),
    # connection limits (SocketServer)
    "max.connections": _n("int", _NO_LIMITS),
    "max.connections.per.ip": _n("int", _NO_LIMITS),
    "max.connections.per.ip.overrides": _n("string", _NO_LIMITS),
    "max.connection.creation.rate": _n("int", _NO_LIMITS),
    # producer state
    "producer.id.expiration.ms": _s("int", "producer_id_expiration_ms"),
    "transaction.partition.verification.enable": Key(
        "boolean", SETTING, only=frozenset({"true"}),
        why="kaas always verifies that a transactional batch's partition is in its transaction (KIP-890)"),
    # remote log (tiered storage)
    "remote.log.index.file.cache.total.size.bytes": _n("long", _NO_TIERED),
    "remote.fetch.max.wait.ms": _n("int", _NO_TIERED),
    "remote.log.manager.copy.max.bytes.per.second": _n("long", _NO_TIERED),
    "remote.log.manager.fetch.max.bytes.per.second": _n("long", _NO_TIERED),
    "remote.list.offsets.request.timeout.ms": _n("long", _NO_TIERED),
    "remote.log.manager.copier.thread.pool.size": _n("int", _NO_TIERED),
    "remote.log.manager.expiration.thread.pool.size": _n("int", _NO_TIERED),
    "remote.log.manager.thread.pool.size": _n("int", _NO_TIERED),
    "remote.log.reader.threads": _n("int", _NO_TIERED),
    "follower.fetch.last.tiered.offset.enable": _n("boolean", _NO_TIERED),
    # listener configs (DynamicListenerConfig): per broker
    "listeners": _r("list", _TLS_AT_START, per_broker=True),
    "listener.security.protocol.map": _r("list", _TLS_AT_START, per_broker=True),
    "principal.builder.class": _r("class", "kaas builds principals itself (ssl.principal.mapping.rules, "
                                           "the SASL user); it loads no classes", per_broker=True),
    "sasl.mechanism.inter.broker.protocol": _r("string", "kaas reads --inter-broker-sasl-mechanism at start: "
                                                         "restart the broker with the new option", per_broker=True),
    "sasl.jaas.config": _n("password", "kaas has no JAAS: SCRAM users live in the cluster's credential file "
                                       "(AlterUserScramCredentials)", per_broker=True),
    "sasl.enabled.mechanisms": Key("list", SETTING, "sasl_enabled_mechanisms", per_broker=True),
    "sasl.kerberos.service.name": _n("string", _NO_KERBEROS, per_broker=True),
    "sasl.kerberos.kinit.cmd": _n("string", _NO_KERBEROS, per_broker=True),
    "sasl.kerberos.ticket.renew.window.factor": _n("double", _NO_KERBEROS, per_broker=True),
    "sasl.kerberos.ticket.renew.jitter": _n("double", _NO_KERBEROS, per_broker=True),
    "sasl.kerberos.min.time.before.relogin": _n("long", _NO_KERBEROS, per_broker=True),
    "sasl.kerberos.principal.to.local.rules": _n("list", _NO_KERBEROS, per_broker=True),
    "sasl.login.refresh.window.factor": _n("double", "kaas logs in to nothing (no SASL client login)",
                                           per_broker=True),
    "sasl.login.refresh.window.jitter": _n("double", "kaas logs in to nothing (no SASL client login)",
                                           per_broker=True),
    "sasl.login.refresh.min.period.seconds": _n("short", "kaas logs in to nothing (no SASL client login)",
                                                per_broker=True),
    "sasl.login.refresh.buffer.seconds": _n("short", "kaas logs in to nothing (no SASL client login)",
                                            per_broker=True),
    **{name: _r(t, _TLS_AT_START, per_broker=True) for name, t in (
        ("ssl.protocol", "string"), ("ssl.provider", "string"), ("ssl.cipher.suites", "list"),
        ("ssl.enabled.protocols", "list"), ("ssl.keystore.type", "string"), ("ssl.keystore.location", "string"),
        ("ssl.keystore.password", "password"), ("ssl.key.password", "password"),
        ("ssl.truststore.type", "string"), ("ssl.truststore.location", "string"),
        ("ssl.truststore.password", "password"), ("ssl.keymanager.algorithm", "string"),
        ("ssl.trustmanager.algorithm", "string"), ("ssl.endpoint.identification.algorithm", "string"),
        ("ssl.secure.random.implementation", "string"), ("ssl.client.auth", "string"),
        ("ssl.engine.factory.class", "class"), ("ssl.keystore.certificate.chain", "password"),
        ("ssl.keystore.key", "password"), ("ssl.truststore.certificates", "password"))},
}

# The topic config each broker log config is the default of (for SETTING keys too), so that
# a value is validated as the topic config is and DescribeConfigs lists the synonyms.
TOPIC_OF: dict[str, str] = {
    **{name: key.target for name, key in DYNAMIC.items() if key.route == TOPIC},
    "log.segment.bytes": "segment.bytes", "log.roll.ms": "segment.ms", "log.roll.hours": "segment.ms",
    "log.retention.bytes": "retention.bytes", "log.retention.ms": "retention.ms",
    "log.retention.minutes": "retention.ms", "log.retention.hours": "retention.ms",
    "message.max.bytes": "max.message.bytes", "log.index.interval.bytes": "index.interval.bytes",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
}
BROKER_OF: dict[str, tuple[str, ...]] = {}
for _name, _topic in TOPIC_OF.items():
    BROKER_OF.setdefault(_topic, ())
    BROKER_OF[_topic] = (*BROKER_OF[_topic], _name)

# Apache's connection-limit and thread configs that may be set at the cluster default even
# though they are listener configs.
_CLUSTER_LEVEL = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})
# SslConfigs.RECONFIGURABLE_CONFIGS: only with a listener prefix.
LISTENER_ONLY = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates"})
SENSITIVE_TYPES = frozenset({"password"})

# Synonyms, highest precedence first (DynamicBrokerConfig.brokerConfigSynonyms).
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)
_SYNONYMS_OF = {name: group for group in SYNONYMS for name in group}


def synonyms(name: str) -> tuple[str, ...]:
    """``name`` and its synonyms, highest precedence first (``(name,)`` when it has none)."""
    return _SYNONYMS_OF.get(name, (name,))


def base_name(name: str) -> tuple[str | None, str]:
    """(listener, base) of a ``listener.name.<l>.<base>`` key; (None, name) otherwise."""
    m = LISTENER_PREFIX.match(name)
    return (m.group(1), m.group(2)) if m else (None, name)


def key_of(name: str) -> Key | None:
    """The ``Key`` of a dynamic config, listener-prefixed or not; None when not dynamic."""
    _listener, base = base_name(name)
    return DYNAMIC.get(base)


def check_value(name: str, kind: str, value: str) -> str | None:
    """Apache's type check of one value, as an error message, or None when it parses."""
    v = value.strip()
    if kind in ("int", "long", "short"):
        if not _INTEGER.fullmatch(v):
            return f"Invalid value {value} for configuration {name}: Not a number of type {kind.upper()}"
        low, high = _INT_RANGE.get(kind, (-(2**15), 2**15 - 1))
        if not low <= int(v) <= high:
            return f"Invalid value {value} for configuration {name}: Not a number of type {kind.upper()}"
    elif kind == "double":
        try:
            float(v)
        except ValueError:
            return f"Invalid value {value} for configuration {name}: Not a number of type DOUBLE"
    elif kind == "boolean" and v.lower() not in ("true", "false"):
        return f"Invalid value {value} for configuration {name}: Expected value to be either true or false"
    return None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an alteration of a BROKER resource is refused: the wire error's name
    (``"invalid_request"`` or ``"invalid_config"``) and Apache's message."""

    error: str
    message: str


def _scala_set(names: list[str]) -> str:
    return "Set(" + ", ".join(sorted(names)) + ")"


def validate_layer(layer: Mapping[str, str], *, per_broker: bool, read_only: frozenset[str]) -> Refusal | None:
    """Validate a whole new layer of a BROKER resource, in Apache's order: read-only keys,
    security configs without their listener prefix, types, per-broker keys at the cluster
    default. Then kaas's own refusals (REFUSED keys, values kaas would not honour).

    Args:
        layer: the layer's configs after the alteration (name -> value).
        per_broker: True for a broker id, False for the cluster default (``""``).
        read_only: Apache's broker configs that are not dynamic (known to the caller).

    Returns:
        None when the layer is acceptable, else the Refusal.
    """
    static = [n for n in layer if n in read_only]
    if static:
        return Refusal("invalid_request", f"Cannot update these configs dynamically: {_scala_set(static)}")
    unknown = [n for n in layer if key_of(n) is None]
    if unknown:
        return Refusal("invalid_config", f"Unknown broker configs {_scala_set(unknown)}: kaas takes the configs "
                                         "Apache Kafka updates dynamically (docs/configs.rst)")
    bare = [n for n in layer if n in LISTENER_ONLY]
    if bare:
        return Refusal("invalid_request", "These security configs can be dynamically updated only per-listener "
                                          f"using the listener prefix: {_scala_set(bare)}")
    for name, value in layer.items():
        key = key_of(name)
        assert key is not None
        err = check_value(name, key.type, value)
        if err:
            return Refusal("invalid_request", err)
    if not per_broker:
        pb = [n for n in layer if _per_broker(n)]
        if pb:
            return Refusal("invalid_request", "Cannot update these configs at default cluster level, broker id "
                                              f"must be specified: {_scala_set(pb)}")
    for name, value in layer.items():
        key = key_of(name)
        assert key is not None
        listener, _base = base_name(name)
        if key.route == REFUSED:
            return Refusal("invalid_config", f"{name} cannot be changed while kaas runs: {key.why}")
        if key.route == SETTING and listener is not None:
            return Refusal("invalid_config", f"{name}: kaas takes this config for the whole broker only, "
                                             f"not per listener; set {_base} instead")
        if key.only and value.strip().lower() not in key.only:
            return Refusal("invalid_config", f"{name}={value} is not supported: {key.why}")
    return None


def _per_broker(name: str) -> bool:
    listener, base = base_name(name)
    if listener is not None:
        return base not in _CLUSTER_LEVEL
    key = DYNAMIC.get(name)
    return key is not None and key.per_broker


def merge(default: Mapping[str, str], broker: Mapping[str, str]) -> dict[str, tuple[str, int]]:
    """The dynamic values in force on one broker: name -> (value, source).

    A key of the broker's layer hides the default layer's value of the key and of every
    synonym of it (so ``log.retention.hours`` on the broker beats ``log.retention.ms`` at
    the default, as in Apache).
    """
    out: dict[str, tuple[str, int]] = {k: (v, SOURCE_DYNAMIC_DEFAULT) for k, v in default.items()}
    for k in broker:
        for s in synonyms(k):
            out.pop(s, None)
    out.update({k: (v, SOURCE_DYNAMIC_BROKER) for k, v in broker.items()})
    return out


def pick(values: Mapping[str, tuple[str, int]], name: str) -> tuple[str, str, int] | None:
    """The synonym of ``name`` in force among ``values``: (the key set, value, source), or None."""
    for s in synonyms(name):
        if s in values:
            v, src = values[s]
            return s, v, src
    return None


Value = int | float | bool | tuple[str, ...] | str
"""A dynamic config's value as its Settings field holds it (``convert``)."""


def convert(key: Key, value: str) -> Value:
    """A value as the target's Python type (scaled): int, float, bool, tuple or str."""
    v = value.strip()
    if key.type in ("int", "long", "short"):
        return int(v) * key.scale
    if key.type == "double":
        return float(v)
    if key.type == "boolean":
        return v.lower() == "true"
    if key.type == "list":
        return convert_list(v)
    return v


def convert_list(value: str) -> tuple[str, ...]:
    """A list config's value (``convert`` of a ``list`` key) as its items."""
    return tuple(x.strip() for x in value.split(",") if x.strip())


def resolve(default: Mapping[str, str], broker: Mapping[str, str]) -> tuple[dict[str, Value], dict[str, str]]:
    """What the dynamic layers change on one broker.

    Returns:
        (Settings field -> converted value, topic config -> broker default value) for the
        SETTING and TOPIC keys in force; NONE keys change nothing.
    """
    values = merge(default, broker)
    fields: dict[str, Value] = {}
    topics: dict[str, str] = {}
    seen: set[str] = set()
    for name in values:
        if name in seen or base_name(name)[0] is not None:
            continue
        group = synonyms(name)
        seen.update(group)
        chosen = pick(values, name)
        assert chosen is not None
        set_name, value, _src = chosen
        key = DYNAMIC.get(set_name)
        if key is None or not key.target:
            continue
        if key.route == SETTING:
            fields[key.target] = convert(key, value)
        elif key.route == TOPIC:
            topics[key.target] = str(convert(key, value)) if key.scale != 1 else value.strip()
    return fields, topics
