"""``kaas configs``: describe and alter the configs of topics, brokers, groups, clients and
users, as Apache's kafka-configs (same flags, same output lines, ``--json`` for scripts).

Topics, brokers and groups: DescribeConfigs (with synonyms) and IncrementalAlterConfigs
(deletes, then sets). Clients and users: their quotas (DescribeClientQuotas,
AlterClientQuotas), and for a user its SCRAM credentials (``kaas.tools._quotas``). A
``--delete-config`` of a config not set now fails before anything is changed, as in Apache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_configs.v4.response import DescribeConfigsResponse, DescribeConfigsResult
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.incremental_alter_configs.v1.response import IncrementalAlterConfigsResponse
from kio.static.primitive import i8

from kaas.tools import _quotas
from kaas.tools._quotas import Entity
from kaas.tools._wire import Cluster, code_name, command_config_option, json_option, open_cluster
from kaas.tools.output import emit

RESOURCE = {"topics": 2, "brokers": 4, "groups": 32}
QUOTA_TYPES = ("clients", "users", "ips")
ENTITY_TYPES = (*RESOURCE, *QUOTA_TYPES)
# DescribeConfigs config_source -> Apache's ConfigEntry.ConfigSource name
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG"}
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs' ``--add-config`` syntax: ``k1=v1,k2=[v1,v2,v2],k3=v3`` (a list value
    in brackets keeps its commas, the brackets dropped).

    Raises:
        click.BadParameter: an item that is not ``key=value``.
    """
    items: list[str] = []
    depth, cur = 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += {"[": 1, "]": -1}.get(ch, 0)
        cur += ch
    items.append(cur)
    out: dict[str, str] = {}
    for item in (i.strip() for i in items):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--add-config")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


def _entities(entity_types: tuple[str, ...], entity_names: tuple[str, ...], entity_default: bool,
              shortcuts: dict[str, tuple[str | None, bool]]) -> list[tuple[str, str | None]]:
    """(entity type, name) pairs: ``--entity-type`` paired with ``--entity-name`` in order, the
    unnamed ones the default ("") with ``--entity-default`` (else None: every entity), then
    the shortcuts (``--topic``, ``--user``, ``--client-defaults``...)."""
    pairs: list[tuple[str, str | None]] = []
    if len(entity_names) > len(entity_types):
        raise click.UsageError("more --entity-name than --entity-type")
    for i, kind in enumerate(entity_types):
        pairs.append((kind, entity_names[i] if i < len(entity_names) else ("" if entity_default else None)))
    for kind, (name, default) in shortcuts.items():
        if name is not None or default:
            pairs.append((kind, "" if default else name))
    if not pairs:
        raise click.UsageError("give --entity-type (or --topic, --broker, --group, --client, --user, ...)")
    kinds = [k for k, _ in pairs]
    if len(pairs) > 1 and sorted(kinds) != ["clients", "users"]:
        raise click.UsageError("only one entity type, or users with clients, may be given")
    return pairs


@click.command("configs")
@click.option("--describe", is_flag=True, help="List the configs of the entity.")
@click.option("--alter", is_flag=True, help="Change the configs of the entity.")
@click.option("--entity-type", "entity_types", multiple=True, type=click.Choice(ENTITY_TYPES),
              help="topics, brokers, groups, clients, users (users may be combined with clients) or ips.")
@click.option("--entity-name", "entity_names", multiple=True,
              help="The entity's name: a topic, broker id, group id, client id or user principal name.")
@click.option("--entity-default", is_flag=True,
              help="The default entity (the cluster's broker defaults, the default client id or user).")
@click.option("--add-config", default="", metavar="K=V,K=[V,V],...", help="Configs to set (--alter).")
@click.option("--delete-config", "delete_config", default="", metavar="K,K,...", help="Configs to remove (--alter).")
@click.option("--all", "describe_all", is_flag=True, help="Every config, not only the dynamic ones (--describe).")
@click.option("--topic", default=None, help="Shortcut of --entity-type topics --entity-name TOPIC.")
@click.option("--broker", default=None, help="Shortcut of --entity-type brokers --entity-name ID.")
@click.option("--broker-defaults", is_flag=True, help="Shortcut of --entity-type brokers --entity-default.")
@click.option("--group", default=None, help="Shortcut of --entity-type groups --entity-name GROUP.")
@click.option("--client", default=None, help="Shortcut of --entity-type clients --entity-name CLIENT_ID.")
@click.option("--client-defaults", is_flag=True, help="Shortcut of --entity-type clients --entity-default.")
@click.option("--user", default=None, help="Shortcut of --entity-type users --entity-name USER.")
@click.option("--user-defaults", is_flag=True, help="Shortcut of --entity-type users --entity-default.")
@click.option("--bootstrap-server", "--bootstrap", "bootstrap", required=True, envvar="KAAS_BOOTSTRAP",
              help="HOST:PORT[,HOST:PORT...] of any broker(s).")
@command_config_option
@json_option
def configs(describe: bool, alter: bool, entity_types: tuple[str, ...], entity_names: tuple[str, ...],
            entity_default: bool, add_config: str, delete_config: str, describe_all: bool, topic: str | None,
            broker: str | None, broker_defaults: bool, group: str | None, client: str | None, client_defaults: bool,
            user: str | None, user_defaults: bool, bootstrap: str, command_config: Path | None,
            as_json: bool) -> None:
    """Describe or alter the configs of a topic, broker, group, client id or user (as kafka-configs)."""
    if describe == alter:
        raise click.UsageError("give exactly one of --describe and --alter")
    pairs = _entities(entity_types, entity_names, entity_default, {
        "topics": (topic, False), "brokers": (broker, broker_defaults), "groups": (group, False),
        "clients": (client, client_defaults), "users": (user, user_defaults), "ips": (None, False)})
    add = parse_add_config(add_config)
    delete = [k.strip() for k in delete_config.split(",") if k.strip()]
    if alter and not add and not delete:
        raise click.UsageError("--alter needs --add-config or --delete-config")
    if describe and (add or delete):
        raise click.UsageError("--add-config and --delete-config go with --alter")
    kind, name = pairs[0]
    with open_cluster(bootstrap, command_config) as c:
        if kind in QUOTA_TYPES:
            parts = [Entity(_quotas.WIRE_TYPE[k], n) for k, n in pairs]
            if describe:
                _describe_quotas(c, pairs, parts, as_json)
            else:
                _alter_quotas(c, pairs, parts, add, delete, as_json)
        elif describe:
            _describe_resources(c, kind, name, describe_all, as_json)
        else:
            if name is None:
                raise click.UsageError(f"--alter of {kind} needs --entity-name" +
                                       (" or --entity-default" if kind == "brokers" else ""))
            alter_resource(c, kind, name, add, delete)
            _altered(kind, name, add, delete, as_json)


def _altered(kind: str, name: str, add: dict[str, str], delete: list[str], as_json: bool) -> None:
    out = {"entity_type": kind, "entity_name": name or None, "set": sorted(add), "deleted": delete}
    emit(out, as_json, lambda: (f"Completed updating config for {kind[:-1]} {name}." if name else
                                f"Completed updating default config for {kind} in the cluster."))


# --------------------------------------------------------------------------- topics, brokers, groups


def _resource_names(c: Cluster, kind: str) -> list[str]:
    """Every topic, or every broker id and the broker default ("")."""
    if kind == "topics":
        return sorted(t.name for t in c.metadata(None).topics if t.name)
    if kind == "brokers":
        return [str(b) for b in c.broker_ids()] + [""]
    raise click.UsageError("--describe of groups needs --entity-name")


def _fetch(c: Cluster, kind: str, name: str, synonyms: bool) -> DescribeConfigsResult:
    req = DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=i8(RESOURCE[kind]), resource_name=name, configuration_keys=None),),
        include_synonyms=synonyms, include_documentation=False)
    r: DescribeConfigsResponse = (c.call(int(name), req) if kind == "brokers" and name else c.call_any(req))
    res = r.results[0]
    if res.error_code != ErrorCode.none:
        raise click.ClickException(f"DescribeConfigs {kind[:-1]} {name}: {code_name(res.error_code)}"
                                   + (f" ({res.error_message})" if res.error_message else ""))
    return res


def _dynamic_source(kind: str, name: str) -> int:
    return {"topics": 1, "groups": 8}.get(kind, 2 if name else 3)


def _entries(res: DescribeConfigsResult, kind: str, name: str, describe_all: bool) -> list[dict[str, Any]]:
    keep = None if describe_all else _dynamic_source(kind, name)
    return [{"name": e.name, "value": e.value, "sensitive": e.is_sensitive, "read_only": e.read_only,
             "source": SOURCES.get(int(e.config_source), "UNKNOWN"),
             "synonyms": [{"name": s.name, "value": s.value, "source": SOURCES.get(int(s.source), "UNKNOWN")}
                          for s in e.synonyms]}
            for e in sorted(res.configs, key=lambda e: e.name) if keep is None or int(e.config_source) == keep]


def _describe_resources(c: Cluster, kind: str, name: str | None, describe_all: bool, as_json: bool) -> None:
    if kind == "brokers" and name:
        try:
            int(name)
        except ValueError:
            raise click.ClickException(f"The entity name for {kind} must be a valid integer broker id, "
                                       f"found: {name}") from None
    out: list[dict[str, Any]] = []
    lines: list[str] = []
    if name and kind == "topics" and name not in _resource_names(c, kind):
        out.append({"entity_type": kind, "entity_name": name, "exists": False, "configs": []})
        lines.append(f"The {kind[:-1]} '{name}' doesn't exist and doesn't have dynamic config.")
    else:
        for entity in ([name] if name is not None else _resource_names(c, kind)):
            entries = _entries(_fetch(c, kind, entity, True), kind, entity, describe_all)
            out.append({"entity_type": kind, "entity_name": entity or None, "exists": True, "configs": entries})
            lines.append(f"Default configs for {kind} in the cluster are:" if not entity else
                         f"{'All' if describe_all else 'Dynamic'} configs for {kind[:-1]} {entity} are:")
            for e in entries:
                syn = ", ".join(f"{s['source']}:{s['name']}={s['value']}" for s in e["synonyms"])
                value = "null" if e["value"] is None else e["value"]
                lines.append(f"  {e['name']}={value} sensitive={str(e['sensitive']).lower()} synonyms={{{syn}}}")
    emit(out, as_json, lambda: lines)


def alter_resource(c: Cluster, kind: str, name: str, add: dict[str, str], delete: list[str]) -> None:
    """Apache's alter: refuse deleting what is not set now, then deletes and sets in one
    IncrementalAlterConfigs."""
    current = {e["name"] for e in _entries(_fetch(c, kind, name, False), kind, name, False)}
    invalid = [k for k in delete if k not in current]
    if invalid:
        raise click.ClickException(f"Invalid config(s): {','.join(invalid)}")
    ops = tuple([AlterableConfig(name=k, config_operation=i8(DELETE), value=None) for k in delete]
                + [AlterableConfig(name=k, config_operation=i8(SET), value=v) for k, v in add.items()])
    req = IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
        resource_type=i8(RESOURCE[kind]), resource_name=name, configs=ops),), validate_only=False)
    r: IncrementalAlterConfigsResponse = c.call(int(name), req) if kind == "brokers" and name else \
        c.call_controller(req)
    res = r.responses[0]
    if res.error_code != ErrorCode.none:
        raise click.ClickException(f"{code_name(res.error_code)}" + (f": {res.error_message}" if res.error_message
                                                                      else ""))


# --------------------------------------------------------------------------- clients, users


def _describe_quotas(c: Cluster, pairs: list[tuple[str, str | None]], parts: list[Entity], as_json: bool) -> None:
    found = _quotas.describe_quotas(c, parts)
    out: dict[str, Any] = {"quotas": [{"entity": {p.kind: p.name or None for p in ents}, "configs": values}
                                      for ents, values in found], "scram": []}
    lines = [f"Quota configs for {_quotas.quota_text(ents)} are "
             + ", ".join(f"{k}={_quotas.java_double(v)}" for k, v in values.items()) for ents, values in found]
    kinds = [k for k, _ in pairs]
    names = [n for _, n in pairs]
    if kinds == ["users"] and "" not in names:  # Apache: SCRAM only for users alone, named or all
        users = [n for n in names if n is not None] or None
        for user, infos in _quotas.describe_scram(c, users):
            out["scram"].append({"user": user, "credentials": [{"mechanism": m, "iterations": i} for m, i in infos]})
            lines.append(f"SCRAM credential configs for user-principal '{user}' are "
                         + ", ".join(f"{m}=iterations={i}" for m, i in infos))
    emit(out, as_json, lambda: lines)


def _alter_quotas(c: Cluster, pairs: list[tuple[str, str | None]], parts: list[Entity], add: dict[str, str],
                  delete: list[str], as_json: bool) -> None:
    if any(n is None for _, n in pairs):
        raise click.UsageError("--alter of clients or users needs --entity-name or --entity-default for each type")
    scram_add = {k: v for k, v in add.items() if k in _quotas.SCRAM_CODES}
    scram_del = [k for k in delete if k in _quotas.SCRAM_CODES]
    kind, name = pairs[0]
    if scram_add or scram_del:
        if len(pairs) > 1 or kind != "users":
            raise click.ClickException("SCRAM credential configs are for --entity-type users alone")
        if not name:
            raise click.ClickException("The use of --entity-default or --user-defaults is not allowed with "
                                       "User SCRAM Credentials.")
        if len(scram_add) != len(add) or len(scram_del) != len(delete):
            raise click.ClickException("Cannot alter both quota and SCRAM credential configs simultaneously "
                                       "for 'users'.")
        _quotas.alter_scram(c, name or "", scram_add, scram_del)
    else:
        _quotas.alter_quotas(c, parts, add, delete)
    _altered(kind, name or "", add, delete, as_json)
