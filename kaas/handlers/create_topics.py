"""CreateTopics (19): exclusive create of each topic file."""

from __future__ import annotations

import structlog
from kio.schema.errors import ErrorCode

from kaas import configs

API_KEY = 19
VERSIONS = (2, 7)

log = structlog.get_logger()


async def handle(ctx, req) -> dict:
    broker = ctx.broker
    out = []
    seen: dict[str, int] = {}
    for t in req.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    for t in req.topics:
        res = {"name": t.name, "topic_id": None, "error_code": ErrorCode.none, "error_message": None,
               "num_partitions": -1, "replication_factor": -1, "configs": []}
        out.append(res)
        if seen[t.name] > 1:
            res["error_code"] = ErrorCode.invalid_request
            res["error_message"] = "duplicate topic name in the request"
            continue
        if t.assignments:
            res["error_code"] = ErrorCode.invalid_request
            res["error_message"] = "manual replica assignment is not supported"
            continue
        if t.replication_factor not in (-1, 1):
            res["error_code"] = ErrorCode.invalid_replication_factor
            res["error_message"] = "kaas keeps one copy on the shared volume: replication factor must be 1"
            continue
        topic_configs = {c.name: c.value for c in t.configs if c.value is not None}
        try:
            meta, (code, msg) = await broker.create_topic(t.name, t.num_partitions, topic_configs,
                                                          validate_only=req.validate_only)
        except OSError as exc:  # the topic file could not be written: no topic was created
            log.error("topic_write_failed", topic=t.name, error=str(exc))
            meta, code, msg = None, ErrorCode.kafka_storage_error, f"topic file not written: {exc.strerror}"
        res["error_code"] = code
        res["error_message"] = msg
        if code == ErrorCode.none:
            parts = meta.partitions if meta else (t.num_partitions if t.num_partitions > 0 else broker.settings.num_partitions)
            res["num_partitions"] = parts
            res["replication_factor"] = 1
            if meta is not None:
                res["topic_id"] = meta.topic_id
            res["configs"] = [
                {"name": k, "value": v, "read_only": False, "config_source": 5 if is_default else 1,
                 "is_sensitive": False}
                for k, (v, is_default) in configs.effective(broker.settings, topic_configs).items()
            ]
    return {"throttle_time": 0, "topics": out}
