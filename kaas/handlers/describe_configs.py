"""DescribeConfigs (32): topic configs (overrides and defaults) and broker configs."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kaas import configs
from kaas.handlers import _auth
from kaas.handlers._auth import Op, authorize

API_KEY = 32
VERSIONS = (1, 4)

TOPIC, BROKER = 2, 4
SOURCE_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5
_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}

BROKER_CONFIGS = {
    "auto.create.topics.enable": ("boolean", "auto_create_topics"),
    "num.partitions": ("int", "num_partitions"),
    "log.segment.bytes": ("int", "segment_bytes"),
    "log.retention.ms": ("long", "retention_ms"),
    "log.retention.bytes": ("long", "retention_bytes"),
    "message.max.bytes": ("int", "message_max_bytes"),
    "transaction.max.timeout.ms": ("int", "transaction_max_timeout_ms"),
    "group.initial.rebalance.delay.ms": ("int", "group_initial_rebalance_delay_ms"),
    "group.min.session.timeout.ms": ("int", "group_min_session_timeout_ms"),
    "group.max.session.timeout.ms": ("int", "group_max_session_timeout_ms"),
    "broker.id": ("int", "broker_id"),
}


def _entry(name, value, source, kind, read_only=False):
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_default": source == SOURCE_DEFAULT, "is_sensitive": False, "synonyms": [],
            "config_type": _TYPES.get(kind, 0), "documentation": None}


async def handle(ctx, req) -> dict:
    broker = ctx.broker
    results = []
    for r in req.resources:
        res = {"error_code": ErrorCode.none, "error_message": None, "resource_type": r.resource_type,
               "resource_name": r.resource_name, "configs": []}
        results.append(res)
        keys = set(r.configuration_keys) if r.configuration_keys else None
        if r.resource_type == TOPIC and not authorize(ctx, Op.DESCRIBE_CONFIGS, _auth.TOPIC, r.resource_name):
            res["error_code"] = ErrorCode.topic_authorization_failed
            continue
        if r.resource_type == BROKER and not authorize(ctx, Op.DESCRIBE_CONFIGS, _auth.CLUSTER):
            res["error_code"] = ErrorCode.cluster_authorization_failed
            continue
        if r.resource_type == TOPIC:
            broker.topics.refresh()
            meta = broker.topics.get(r.resource_name)
            if meta is None:
                res["error_code"] = ErrorCode.unknown_topic_or_partition
                res["error_message"] = f"topic {r.resource_name} does not exist"
                continue
            for name, (value, is_default) in configs.effective(broker.settings, meta.configs).items():
                if keys is None or name in keys:
                    res["configs"].append(_entry(name, value, SOURCE_DEFAULT if is_default else SOURCE_TOPIC,
                                                 configs.TOPIC_CONFIGS[name][0]))
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(broker.id)):
                res["error_code"] = ErrorCode.invalid_request
                res["error_message"] = f"broker {r.resource_name} is not this broker"
                continue
            for name, (kind, attr) in BROKER_CONFIGS.items():
                if keys is None or name in keys:
                    value = getattr(broker.settings, attr)
                    value = str(value).lower() if isinstance(value, bool) else str(value)
                    res["configs"].append(_entry(name, value, SOURCE_STATIC_BROKER, kind, read_only=True))
        else:
            res["error_code"] = ErrorCode.invalid_request
            res["error_message"] = f"resource type {r.resource_type} is not supported"
    return {"throttle_time": 0, "results": results}
