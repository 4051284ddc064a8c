"""DeleteTopics (20): by name (or by topic id, v6). Answered once every live broker applied
an assignment without the topic (up to the request's timeout, then REQUEST_TIMED_OUT).
Handled by the controller: another broker forwards it (``_forward``)."""

from __future__ import annotations

import trio
from kio.schema.errors import ErrorCode

from kaas.handlers import _forward
from kaas.handlers._auth import TOPIC, Op, authorize, enabled

API_KEY = 20
VERSIONS = (1, 6)


def _denied(ctx, req) -> dict | None:
    """Apache: DELETE on each topic; the request answers TOPIC_AUTHORIZATION_FAILED for
    the denied ones. Checked before forwarding (the controller checks the forwarder)."""
    if not enabled(ctx):
        return None
    items = [(t.name, t.topic_id) for t in req.topics] if ctx.api_version >= 6 else [(n, None) for n in req.topic_names]
    bad = [(n, tid) for n, tid in items if n is None or not authorize(ctx, Op.DELETE, TOPIC, n)]
    if not bad:
        return None
    return {"throttle_time": 0, "responses": [
        {"name": n, "topic_id": tid, "error_code": ErrorCode.topic_authorization_failed
         if (n, tid) in bad else ErrorCode.operation_not_attempted, "error_message": None} for n, tid in items]}


async def handle(ctx, req):
    # all or nothing: with a topic denied, the others are not attempted (OPERATION_NOT_ATTEMPTED)
    denied = _denied(ctx, req)
    if denied is not None:
        return denied
    try:
        fwd = await _forward.to_controller(ctx, req, req.timeout.total_seconds())
    except _forward.NotForwarded:
        if ctx.api_version >= 6:
            items = [(t.name, t.topic_id) for t in req.topics]
        else:
            items = [(n, None) for n in req.topic_names]
        return {"throttle_time": 0, "responses": [
            {"name": n, "topic_id": tid, "error_code": ErrorCode.not_controller, "error_message": None}
            for n, tid in items]}
    if fwd is not None:
        return fwd
    broker = ctx.broker
    deadline = trio.current_time() + req.timeout.total_seconds()
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
        code = await broker.admin.delete_topic(name, timeout=deadline - trio.current_time())
        out.append({"name": name, "topic_id": meta.topic_id if meta else None, "error_code": code,
                    "error_message": None})
    return {"throttle_time": 0, "responses": out}
