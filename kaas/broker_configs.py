"""Broker configs as DescribeConfigs shows them and AlterConfigs changes them: the static
ones (the ``kaas broker`` options under Apache's names), the dynamic ones (KIP-226,
``kaas.domain.broker_configs``), their layering into the ``Settings`` a broker runs with,
and their sources and synonyms.

A dynamic value reaches a running broker as a new ``Settings`` (``effective``): SETTING
keys replace their field, TOPIC keys land in ``Settings.topic_defaults``, which
``kaas.configs.default`` reads before the option, so every topic without an override
follows them. The file and its one writer are ``kaas.storage.broker_configs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any, TypedDict

from kaas import configs
from kaas.domain import broker_configs as dyn
from kaas.domain import replicas
from kaas.domain.broker_configs import (
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT,
    SOURCE_STATIC_BROKER,
    SOURCE_TOPIC,
    Refusal,
)
from kaas.domain.groups import configs as gc
from kaas.listeners import SASL_MECHANISMS
from kaas.settings import Settings

__all__ = ["STATIC", "READ_ONLY", "validate", "effective", "broker_entries", "group_entries", "topic_source", "Refusal",
           "SOURCE_DEFAULT", "SOURCE_DYNAMIC_BROKER", "SOURCE_DYNAMIC_DEFAULT", "SOURCE_STATIC_BROKER",
           "SOURCE_TOPIC"]

# Apache's name -> (type, Settings field) of the broker configs kaas has as options.
STATIC: dict[str, tuple[str, str]] = {
    "broker.id": ("int", "broker_id"),
    "node.id": ("int", "broker_id"),
    "auto.create.topics.enable": ("boolean", "auto_create_topics"),
    "num.partitions": ("int", "num_partitions"),
    "log.segment.bytes": ("int", "segment_bytes"),
    "log.roll.ms": ("long", "segment_ms"),
    "log.retention.ms": ("long", "retention_ms"),
    "log.retention.bytes": ("long", "retention_bytes"),
    "log.retention.check.interval.ms": ("long", "retention_check_ms"),
    "log.index.interval.bytes": ("int", "index_interval_bytes"),
    "log.segment.delete.delay.ms": ("long", "segment_delete_delay_ms"),
    "log.cleaner.backoff.ms": ("long", "log_cleaner_backoff_ms"),
    "log.cleaner.io.max.bytes.per.second": ("double", "log_cleaner_io_max_bytes_per_second"),
    "message.max.bytes": ("int", "message_max_bytes"),
    "socket.request.max.bytes": ("int", "max_request_size"),
    "transaction.max.timeout.ms": ("int", "transaction_max_timeout_ms"),
    "producer.id.expiration.ms": ("int", "producer_id_expiration_ms"),
    "group.initial.rebalance.delay.ms": ("int", "group_initial_rebalance_delay_ms"),
    "offsets.retention.minutes": ("int", "offsets_retention_minutes"),  # read-only in Apache 4.4 too
    "offsets.retention.check.interval.ms": ("long", "offsets_retention_check_interval_ms"),
    "group.min.session.timeout.ms": ("int", "group_min_session_timeout_ms"),
    "group.max.session.timeout.ms": ("int", "group_max_session_timeout_ms"),
    # KIP-848 and KIP-932 (read-only in Apache 4.2 too: none is a reconfigurable config)
    **{gc.option_name(f): ("list" if f == "group_consumer_assignors" else
                           "string" if f == "group_consumer_migration_policy" else "int", f)
       for f in gc.BROKER_SETTINGS},
    "inter.broker.listener.name": ("string", "inter_broker_listener"),
    "ssl.client.auth": ("string", "ssl_client_auth"),
    "ssl.principal.mapping.rules": ("string", "ssl_principal_mapping_rules"),
    "sasl.enabled.mechanisms": ("list", "sasl_enabled_mechanisms"),
    "sasl.mechanism.inter.broker.protocol": ("string", "inter_broker_sasl_mechanism"),
    "connections.max.reauth.ms": ("long", "connections_max_reauth_ms"),
    "super.users": ("string", "super_users"),
    "allow.everyone.if.no.acl.found": ("boolean", "allow_everyone_if_no_acl_found"),
}

# Apache broker configs that cannot be updated dynamically (beyond the STATIC ones that are
# not dynamic): AlterConfigs on a BROKER resource answers INVALID_REQUEST "Cannot update
# these configs dynamically" for them, as Apache does.
APACHE_READ_ONLY = frozenset({
    "process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
    "controller.listener.names", "log.dir", "log.dirs", "metadata.log.dir", "advertised.listeners",
    "default.replication.factor", "auto.leader.rebalance.enable", "delete.topic.enable", "log.cleaner.enable",
    "offsets.topic.replication.factor", "offsets.topic.num.partitions",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr", "transaction.state.log.num.partitions", "transactional.id.expiration.ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms", "group.max.size",
    "group.coordinator.rebalance.protocols", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
    "security.inter.broker.protocol", "authorizer.class.name", "connections.max.idle.ms", "queued.max.requests",
    "request.timeout.ms", "replica.lag.time.max.ms", "num.replica.alter.log.dirs.threads",
    "log.flush.offset.checkpoint.interval.ms", "log.flush.start.offset.checkpoint.interval.ms",
    "broker.rack", "cluster.id", "sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.expected.issuer",
    "sasl.oauthbearer.expected.audience", "sasl.oauthbearer.sub.claim.name", "unstable.api.versions.enable",
})
READ_ONLY: frozenset[str] = frozenset({n for n in STATIC if n not in dyn.DYNAMIC} | APACHE_READ_ONLY)

_DEFAULTS = Settings()


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def static_value(settings: Settings, name: str) -> tuple[str, int] | None:
    """(value, STATIC_BROKER_CONFIG or DEFAULT_CONFIG) of a broker config as the broker
    was started, or None when kaas has no such option."""
    entry = STATIC.get(name)
    if entry is None:
        return None
    value = getattr(settings, entry[1])
    source = SOURCE_DEFAULT if value == getattr(_DEFAULTS, entry[1]) else SOURCE_STATIC_BROKER
    return _text(value), source


def validate(layer: dict[str, str], *, per_broker: bool) -> Refusal | None:
    """Apache's checks of a new BROKER layer (``domain.broker_configs.validate_layer``),
    then kaas's: a log config's value as its topic config would be checked, SASL
    mechanisms kaas serves."""
    refusal = dyn.validate_layer(layer, per_broker=per_broker, read_only=READ_ONLY)
    if refusal is not None:
        return refusal
    for name, value in layer.items():
        topic = dyn.TOPIC_OF.get(name)
        key = dyn.DYNAMIC[name] if name in dyn.DYNAMIC else None
        if key is not None and key.route == dyn.TOPIC and topic not in configs.TOPIC_CONFIGS:
            why = configs.NOT_TAKEN.get(topic or "", f"kaas has no topic config {topic}")
            return Refusal("invalid_config", f"{name} is not supported: {why}")
        if topic is not None and topic in configs.TOPIC_CONFIGS:
            as_topic = str(dyn.convert(key, value)) if key is not None and key.scale != 1 else value.strip()
            err = configs.validate(topic, as_topic) or replicas.min_insync_replicas_error(
                as_topic if topic == "min.insync.replicas" else None)
            if err:
                return Refusal("invalid_config", f"Invalid value {value} for configuration {name}: {err}")
        if name == "sasl.enabled.mechanisms":
            unknown = [m for m in dyn.convert_list(value) if m not in SASL_MECHANISMS]
            if unknown:
                return Refusal("invalid_config", f"Invalid value {value} for configuration {name}: kaas serves "
                                                 f"{', '.join(SASL_MECHANISMS)}")
    return None


class ConfigEntry(TypedDict):
    """A broker config as DescribeConfigs lists it (``broker_entries``, ``default_entries``)."""

    name: str
    value: str | None  # (None: a sensitive one)
    source: int
    read_only: bool
    sensitive: bool
    type: str
    synonyms: list[tuple[str, str, int]]  # (name, value, source), highest precedence first


def in_force(default: dict[str, str], mine: dict[str, str]) -> dict[str, tuple[str, int]]:
    """The dynamic values in force on a broker (name -> (value, source))."""
    return dyn.merge(default, mine)


def effective(static: Settings, default: dict[str, str], mine: dict[str, str]) -> Settings:
    """The Settings a broker runs with: its options, with the dynamic layers over them."""
    changed, topic_defaults = dyn.resolve(default, mine)
    names = {f.name for f in fields(Settings)}
    # (each value of its field's type, ``dyn.convert`` by the key's: mypy cannot check it through **)
    overrides: dict[str, Any] = {k: v for k, v in changed.items() if k in names}
    return replace(static, **overrides, topic_defaults=topic_defaults)


def _synonym_rows(static: Settings, values: dict[str, tuple[str, int]], default: dict[str, str],
                  mine: dict[str, str], names: tuple[str, ...]) -> list[tuple[str, str, int]]:
    rows: list[tuple[str, str, int]] = []
    for s in names:
        if s in mine:
            rows.append((s, mine[s], SOURCE_DYNAMIC_BROKER))
        if s in default:
            rows.append((s, default[s], SOURCE_DYNAMIC_DEFAULT))
        sv = static_value(static, s)
        if sv is not None:
            if sv[1] == SOURCE_STATIC_BROKER:
                rows.append((s, sv[0], SOURCE_STATIC_BROKER))
            dv = static_value(_DEFAULTS, s)
            assert dv is not None  # (kaas has the option: sv says so)
            rows.append((s, dv[0], SOURCE_DEFAULT))
    return rows


def broker_entries(static: Settings, default: dict[str, str], mine: dict[str, str]) -> list[ConfigEntry]:
    """Every config DescribeConfigs lists for a broker: name, value, source, read_only,
    sensitive, type and synonyms (highest precedence first)."""
    values = in_force(default, mine)
    out: dict[str, ConfigEntry] = {}
    names = list(STATIC) + [n for n in dyn.DYNAMIC if dyn.DYNAMIC[n].target] + sorted(values)
    for name in names:
        if name in out:
            continue
        key = dyn.key_of(name)
        chosen = dyn.pick(values, name)
        sv = static_value(static, name)
        if chosen is not None:
            value, source = chosen[1], chosen[2]
            if chosen[0] != name:
                k = dyn.key_of(chosen[0])
                value = _text(dyn.convert(k, value)) if k is not None and k.scale != 1 else value
        elif sv is not None:
            value, source = sv
        elif key is not None and key.route == dyn.SETTING:
            value, source = _text(getattr(static, key.target)), SOURCE_DEFAULT
        elif key is not None and key.route == dyn.TOPIC and key.target in configs.TOPIC_CONFIGS:
            value, source = configs.default(replace(static, topic_defaults={}), key.target), SOURCE_DEFAULT
        else:
            continue
        kind = key.type if key is not None else STATIC[name][0]
        sensitive = kind in dyn.SENSITIVE_TYPES
        out[name] = {"name": name, "value": None if sensitive else value, "source": source,
                     "read_only": key is None, "sensitive": sensitive, "type": kind,
                     "synonyms": sorted(_synonym_rows(static, values, default, mine, dyn.synonyms(name)),
                                        key=lambda r: r[2])}
    return list(out.values())


def default_entries(default: dict[str, str]) -> list[ConfigEntry]:
    """DescribeConfigs of the cluster-wide default (resource name ``""``): its dynamic
    values only, as Apache lists them."""
    out: list[ConfigEntry] = []
    for name, value in sorted(default.items()):
        key = dyn.key_of(name)
        kind = key.type if key is not None else "string"
        sensitive = kind in dyn.SENSITIVE_TYPES
        out.append({"name": name, "value": None if sensitive else value, "source": SOURCE_DYNAMIC_DEFAULT,
                    "read_only": False, "sensitive": sensitive, "type": kind,
                    "synonyms": [(name, value, SOURCE_DYNAMIC_DEFAULT)]})
    return out


def topic_source(static: Settings, default: dict[str, str], mine: dict[str, str],
                 topic: str) -> tuple[int, list[tuple[str, str, int]]]:
    """Where a topic config without an override gets its value: (source, broker synonyms
    highest first)."""
    values = in_force(default, mine)
    rows: list[tuple[str, str, int]] = []
    for broker_name in dyn.BROKER_OF.get(topic, ()):
        rows += _synonym_rows(static, values, default, mine, (broker_name,))
    rows.sort(key=lambda r: r[2])  # stable: synonyms keep their precedence within a source
    if rows:
        return rows[0][2], rows
    return SOURCE_DEFAULT, rows


def group_entries(static: Settings, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every config DescribeConfigs lists for a GROUP resource, as Apache 4.2's ConfigHelper
    does: the group's own value (GROUP_CONFIG) when it sets one, else the broker's value of
    its ``group.*`` synonym (STATIC_BROKER_CONFIG when the option was given, DEFAULT_CONFIG
    otherwise) or the key's own default (DEFAULT_CONFIG); synonyms highest first."""
    values = gc.defaults(static)
    out: list[ConfigEntry] = []
    for name, key in gc.GROUP_CONFIG_KEYS.items():
        broker_name = gc.broker_synonym(name)
        rows: list[tuple[str, str, int]] = (_synonym_rows(static, {}, {}, {}, (broker_name,)) if broker_name
                                            else [(name, key.default, SOURCE_DEFAULT)])
        value = values[name]
        if name in overrides:
            value = overrides[name]
            rows = [(name, value, gc.SOURCE_GROUP), *rows]
        out.append({"name": name, "value": value, "source": rows[0][2], "read_only": False, "sensitive": False,
                    "type": key.type, "synonyms": rows})
    return out
