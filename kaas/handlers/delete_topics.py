"""DeleteTopics (20): by name (or by topic id, v6)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

API_KEY = 20
VERSIONS = (1, 6)


async def handle(ctx, req) -> dict:
    broker = ctx.broker
    broker.topics.refresh()
    names: list[tuple[str | None, object]] = []
    if ctx.api_version >= 6:
        for t in req.topics:
            name = t.name
            if name is None and t.topic_id is not None:
                name = next((m.name for m in broker.topics.topics.values() if m.topic_id == t.topic_id), None)
            names.append((name, t.topic_id))
    else:
        names = [(n, None) for n in req.topic_names]
    out = []
    for name, tid in names:
        if name is None:
            out.append({"name": None, "topic_id": tid, "error_code": ErrorCode.unknown_topic_id})
            continue
        meta = broker.topics.get(name)
        code = await broker.delete_topic(name)
        out.append({"name": name, "topic_id": meta.topic_id if meta else None, "error_code": code,
                    "error_message": None})
    return {"throttle_time": 0, "responses": out}
