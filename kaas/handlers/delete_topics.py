"""DeleteTopics (20): by name (or by topic id, v6). Answered once every live broker applied
an assignment without the topic (up to the request's timeout, then REQUEST_TIMED_OUT).
Handled by the controller: another broker forwards it (``_forward``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import trio
from kio.schema.delete_topics import v6
from kio.schema.errors import ErrorCode

from kaas.handlers import _forward
from kaas.handlers._auth import TOPIC, Op, authorize, enabled, merge, without
from kaas.handlers._mutation_quota import REFUSED, Mutations

if TYPE_CHECKING:
    from uuid import UUID

    from kio.schema.delete_topics import v1, v2, v3, v4, v5
    from kio.static.protocol import ResponsePayload

    from kaas.handlers.context import Context

    DeleteTopicsRequest: TypeAlias = (v1.DeleteTopicsRequest | v2.DeleteTopicsRequest | v3.DeleteTopicsRequest
                                      | v4.DeleteTopicsRequest | v5.DeleteTopicsRequest | v6.DeleteTopicsRequest)

API_KEY = 20
VERSIONS = (1, 6)


def _split(ctx: Context, req: DeleteTopicsRequest) -> tuple[DeleteTopicsRequest | None, list[dict[str, object]]]:
    """Apache: DELETE on each topic. (The request with only the topics the principal may
    delete, None when none is left; the answers for the others.) Checked before forwarding;
    the controller checks the forwarding broker's principal again."""
    if not enabled(ctx):
        return req, []
    denied: list[tuple[str | None, UUID | None]]
    kept: DeleteTopicsRequest | None
    if isinstance(req, v6.DeleteTopicsRequest):  # by name or topic id
        known = ctx.broker.topics.topics.values()
        named = [(t, t.name or next((m.name for m in known if m.topic_id == t.topic_id), None)) for t in req.topics]
        # (an unknown topic id is left to the handler: UNKNOWN_TOPIC_ID)
        keep = tuple(t for t, n in named if n is None or authorize(ctx, Op.DELETE, TOPIC, n))
        # a topic asked by id is refused without its name (Apache: the name is not the
        # principal's to learn)
        denied = [(t.name, t.topic_id) for t, n in named if n is not None and not authorize(ctx, Op.DELETE, TOPIC, n)]
        kept = without(req, "topics", keep) if keep else None
    else:
        names = tuple(n for n in req.topic_names if authorize(ctx, Op.DELETE, TOPIC, n))
        denied = [(n, None) for n in req.topic_names if not authorize(ctx, Op.DELETE, TOPIC, n)]
        kept = without(req, "topic_names", names) if names else None
    return kept, [{"name": n, "topic_id": tid, "error_code": ErrorCode.topic_authorization_failed,
                   "error_message": None} for n, tid in denied]


def _charge(ctx: Context, req: DeleteTopicsRequest,
            mutations: Mutations) -> tuple[DeleteTopicsRequest | None, list[dict[str, object]]]:
    """KIP-599: each topic is charged its partitions; (the request with the topics the
    quota admits, None when none is; the answers for those a strict quota refused)."""
    topics = ctx.broker.topics

    def admitted(name: str | None, topic_id: UUID | None) -> bool:
        if name is None:
            name = next((m.name for m in topics.topics.values() if m.topic_id == topic_id), None)
        meta = topics.get(name) if name is not None else None
        return meta is None or mutations.admit(meta.name, meta.partitions)

    refused: list[dict[str, object]] = []
    if isinstance(req, v6.DeleteTopicsRequest):
        keep = tuple(t for t in req.topics if admitted(t.name, t.topic_id))
        refused = [{"name": t.name, "topic_id": t.topic_id, **REFUSED} for t in req.topics if t not in keep]
        return (without(req, "topics", keep) if keep else None), refused
    names = tuple(n for n in req.topic_names if admitted(n, None))
    refused = [{"name": n, "topic_id": None, **REFUSED} for n in req.topic_names if n not in names]
    return (without(req, "topic_names", names) if names else None), refused


async def handle(ctx: Context, req: DeleteTopicsRequest) -> dict[str, object] | ResponsePayload:
    kept, denied = _split(ctx, req)
    mutations = Mutations(ctx)
    if kept is not None:
        kept, refused = _charge(ctx, kept, mutations)
        denied += refused
    if kept is None:
        mutations.settle([])
        return {"throttle_time": 0, "responses": denied}
    answer = await _delete(ctx, kept)
    mutations.settle_answer(answer, "responses")
    return merge(answer, "responses", denied)


async def _delete(ctx: Context, req: DeleteTopicsRequest) -> dict[str, object] | ResponsePayload:
    try:
        fwd = await _forward.to_controller(ctx, req, req.timeout.total_seconds())
    except _forward.NotForwarded:
        items: list[tuple[str | None, UUID | None]]
        if isinstance(req, v6.DeleteTopicsRequest):
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
    names: list[tuple[str | None, UUID | None]] = []
    if isinstance(req, v6.DeleteTopicsRequest):
        for t in req.topics:
            name: str | None = t.name
            if name is None and t.topic_id is not None:
                name = next((m.name for m in broker.topics.topics.values() if m.topic_id == t.topic_id), None)
            names.append((name, t.topic_id))
    else:
        names = [(n, None) for n in req.topic_names]
    ids = {name: meta.topic_id for name, _tid in names if name is not None
           and (meta := broker.topics.get(name)) is not None}
    codes = await broker.admin.delete_topics(list(dict.fromkeys(n for n, _tid in names if n is not None)),
                                             timeout=deadline - trio.current_time())
    out: list[dict[str, object]] = []
    for name, tid in names:
        if name is None:
            out.append({"name": None, "topic_id": tid, "error_code": ErrorCode.unknown_topic_id})
            continue
        # a name given twice: its second entry finds the topic gone, as Apache's does
        code = codes.pop(name, ErrorCode.unknown_topic_or_partition)
        out.append({"name": name, "topic_id": ids.pop(name, None), "error_code": code, "error_message": None})
    return {"throttle_time": 0, "responses": out}
