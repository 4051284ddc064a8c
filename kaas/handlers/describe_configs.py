"""DescribeConfigs (32): topic configs (overrides and the broker defaults under them), broker
configs (static options and dynamic configs, KIP-226) and group configs (KIP-848/932,
``_group_configs``), each with its source, and with its synonyms when the request asks
(``include_synonyms``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas import broker_configs, configs
from kaas.handlers import _auth, _group_configs
from kaas.handlers._auth import Op, authorize

if TYPE_CHECKING:
    from kio.schema.describe_configs import v1, v2, v3, v4

    from kaas.handlers.context import Context

    DescribeConfigsRequest: TypeAlias = (v1.DescribeConfigsRequest | v2.DescribeConfigsRequest
                                         | v3.DescribeConfigsRequest | v4.DescribeConfigsRequest)

API_KEY = 32
VERSIONS = (1, 4)

TOPIC, BROKER, GROUP = 2, 4, _group_configs.GROUP
_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
          "password": 9}


def _entry(name: str, value: str | None, source: int, kind: str, *, read_only: bool = False,
           sensitive: bool = False, synonyms: Iterable[tuple[str, str | None, int]] = (),
           include_synonyms: bool = False) -> dict[str, object]:
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_default": source == broker_configs.SOURCE_DEFAULT, "is_sensitive": sensitive,
            "synonyms": [{"name": n, "value": v, "source": src} for n, v, src in synonyms] if include_synonyms
            else [], "config_type": _TYPES.get(kind, 0), "documentation": None}


async def handle(ctx: Context, req: DescribeConfigsRequest) -> dict[str, object]:
    broker = ctx.broker
    dyn = broker.dynamic
    with_synonyms = req.include_synonyms
    results: list[dict[str, object]] = []
    for r in req.resources:
        entries_out: list[dict[str, object]] = []
        res: dict[str, object] = {"error_code": ErrorCode.none, "error_message": None,
                                  "resource_type": r.resource_type, "resource_name": r.resource_name,
                                  "configs": entries_out}
        results.append(res)
        keys = set(r.configuration_keys) if r.configuration_keys else None
        if r.resource_type == TOPIC and not authorize(ctx, Op.DESCRIBE_CONFIGS, _auth.TOPIC, r.resource_name):
            res["error_code"] = ErrorCode.topic_authorization_failed
            continue
        if r.resource_type == BROKER and not authorize(ctx, Op.DESCRIBE_CONFIGS, _auth.CLUSTER):
            res["error_code"] = ErrorCode.cluster_authorization_failed
            continue
        if r.resource_type == GROUP and not authorize(ctx, Op.DESCRIBE_CONFIGS, _auth.GROUP, r.resource_name):
            res["error_code"] = ErrorCode.group_authorization_failed
            continue
        if r.resource_type == TOPIC:
            broker.topics.refresh()
            meta = broker.topics.get(r.resource_name)
            if meta is None:
                res["error_code"] = ErrorCode.unknown_topic_or_partition
                res["error_message"] = f"topic {r.resource_name} does not exist"
                continue
            for name, (value, is_default) in configs.effective(broker.settings, meta.configs).items():
                if keys is not None and name not in keys:
                    continue
                source, synonyms = broker_configs.topic_source(dyn.static, dyn.default, dyn.mine, name)
                if not is_default:
                    source = broker_configs.SOURCE_TOPIC
                    synonyms = [(name, value, source), *synonyms]
                entries_out.append(_entry(name, value, source, configs.TOPIC_CONFIGS[name][0],
                                          synonyms=synonyms, include_synonyms=with_synonyms))
        elif r.resource_type in (BROKER, GROUP):
            if r.resource_type == GROUP:
                code, message, entries = _group_configs.describe(ctx, r.resource_name)
                if code != ErrorCode.none:
                    res["error_code"], res["error_message"] = code, message
                    continue
            elif r.resource_name == "":
                entries = broker_configs.default_entries(dyn.default)
            elif r.resource_name == str(broker.id):
                entries = broker_configs.broker_entries(dyn.static, dyn.default, dyn.mine)
            else:
                res["error_code"] = ErrorCode.invalid_request
                res["error_message"] = f"broker {r.resource_name} is not this broker"
                continue
            for e in entries:
                if keys is None or e["name"] in keys:
                    entries_out.append(_entry(e["name"], e["value"], e["source"], e["type"],
                                              read_only=e["read_only"], sensitive=e["sensitive"],
                                              synonyms=e["synonyms"], include_synonyms=with_synonyms))
        else:
            res["error_code"] = ErrorCode.invalid_request
            res["error_message"] = f"resource type {r.resource_type} is not supported"
    return {"throttle_time": 0, "results": results}
