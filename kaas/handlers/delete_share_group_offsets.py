"""DeleteShareGroupOffsets (92, v0): remove a share group's state of whole topics while the
group has no members (its next consumers start where ``share.auto.offset.reset`` says),
at the partitions' leaders on the coordinator's request (``coord.group.share.offsets``).
DELETE on the group (GROUP_AUTHORIZATION_FAILED) and READ on each topic
(TOPIC_AUTHORIZATION_FAILED), as Apache; GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP; per topic
UNKNOWN_TOPIC_OR_PARTITION for an unknown topic or one the group has no state of."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize

if TYPE_CHECKING:
    from kio.schema.delete_share_group_offsets.v0 import DeleteShareGroupOffsetsRequest

    from kaas.handlers.context import Context

API_KEY = 92
VERSIONS = (0, 0)


def _failed(code: ErrorCode, message: str | None = None) -> dict[str, object]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "responses": []}


async def handle(ctx: Context, req: DeleteShareGroupOffsetsRequest) -> dict[str, object]:
    gid = req.group_id
    if not authorize(ctx, Op.DELETE, GROUP, gid):
        return _failed(ErrorCode.group_authorization_failed)
    names: list[str] = list(dict.fromkeys(t.topic_name for t in req.topics))
    allowed = [n for n in names if authorize(ctx, Op.READ, TOPIC, n)]
    try:
        done = await ctx.broker.share_offsets.delete(gid, allowed)
    except KaasError as exc:
        return _failed(exc.code, exc.message)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "responses": [
        {"topic_name": name, "topic_id": tid, "error_code": code, "error_message": message}
        for name, tid, (code, message) in done] + [
        {"topic_name": n, "topic_id": None, "error_code": ErrorCode.topic_authorization_failed}
        for n in names if n not in allowed]}


__all__ = ["API_KEY", "VERSIONS", "handle"]
