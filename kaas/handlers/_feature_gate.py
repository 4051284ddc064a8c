"""The APIs a finalized feature level turns on (KIP-584), refused as Apache 4.4 refuses them
while the feature is off: UNSUPPORTED_VERSION in the API's own error fields, the API still
listed by ApiVersions. ``group.version`` >= 1 serves the consumer groups of KIP-848
(ConsumerGroupHeartbeat, ConsumerGroupDescribe), ``share.version`` >= 1 the share groups
of KIP-932 (ShareGroupHeartbeat/Describe, ShareFetch, ShareAcknowledge and the share-group
offsets APIs). A broker that never read a good ``features.json`` answers
KAFKA_STORAGE_ERROR there instead (it cannot know the level).

The registry (``handlers._load``) wraps each gated module's ``handle`` with ``gated``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.domain.features import GROUP_VERSION, SHARE_VERSION

if TYPE_CHECKING:
    from kio.schema.consumer_group_describe import v0 as cgd0
    from kio.schema.consumer_group_describe import v1 as cgd1
    from kio.schema.describe_share_group_offsets import v0 as dsgo0
    from kio.schema.describe_share_group_offsets import v1 as dsgo1
    from kio.schema.share_group_describe import v1 as sgd1
    from kio.static.protocol import RequestPayload

    from kaas.handlers.context import Answer, Context

CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 77, 78, 79
DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS = 90, 91, 92

GATES: dict[int, str] = {
    CONSUMER_GROUP_HEARTBEAT: GROUP_VERSION, CONSUMER_GROUP_DESCRIBE: GROUP_VERSION,
    SHARE_GROUP_HEARTBEAT: SHARE_VERSION, SHARE_GROUP_DESCRIBE: SHARE_VERSION, SHARE_FETCH: SHARE_VERSION,
    SHARE_ACKNOWLEDGE: SHARE_VERSION, DESCRIBE_SHARE_GROUP_OFFSETS: SHARE_VERSION,
    ALTER_SHARE_GROUP_OFFSETS: SHARE_VERSION, DELETE_SHARE_GROUP_OFFSETS: SHARE_VERSION,
}
"""API key -> the feature whose finalized level must be >= 1."""

_NOT_SUPPORTED = "The version of API is not supported."  # Apache's message on 91 and 92

if TYPE_CHECKING:
    _Describes: TypeAlias = tuple[type[cgd0.ConsumerGroupDescribeRequest], type[cgd1.ConsumerGroupDescribeRequest],
                                  type[sgd1.ShareGroupDescribeRequest]]
    _DescribeOffsets: TypeAlias = tuple[type[dsgo0.DescribeShareGroupOffsetsRequest],
                                        type[dsgo1.DescribeShareGroupOffsetsRequest]]


@cache
def _named() -> tuple[_Describes, _DescribeOffsets]:
    """The requests whose refusal names what they asked for: the groups described, and those
    whose share offsets are. Imported at the first refusal, not with this module (which
    every handler's first request imports: a broker starts without these kio classes)."""
    from kio.schema.consumer_group_describe import v0, v1
    from kio.schema.describe_share_group_offsets import v0 as offsets0
    from kio.schema.describe_share_group_offsets import v1 as offsets1
    from kio.schema.share_group_describe import v1 as share1

    return ((v0.ConsumerGroupDescribeRequest, v1.ConsumerGroupDescribeRequest, share1.ShareGroupDescribeRequest),
            (offsets0.DescribeShareGroupOffsetsRequest, offsets1.DescribeShareGroupOffsetsRequest))


def closed(ctx: Context, feature: str) -> ErrorCode | None:
    """The error a request of a gated API gets now, or None when the feature is on."""
    level = ctx.broker.features.level(feature)
    if level is None:
        return ErrorCode.kafka_storage_error
    return ErrorCode.unsupported_version if level < 1 else None


def refusal(api_key: int, req: RequestPayload, code: ErrorCode) -> dict[str, object]:
    """The gated API's answer carrying ``code``, shaped as Apache shapes it."""
    if api_key in (CONSUMER_GROUP_HEARTBEAT, SHARE_GROUP_HEARTBEAT):
        return {"throttle_time": 0, "error_code": code, "error_message": None, "member_epoch": 0,
                "heartbeat_interval": 0, "assignment": None}
    if api_key in (CONSUMER_GROUP_DESCRIBE, SHARE_GROUP_DESCRIBE):
        assert isinstance(req, _named()[0]), req  # (dispatch decoded it by its key)
        return {"throttle_time": 0, "groups": [{"error_code": code, "error_message": None, "group_id": g,
                                                "authorized_operations": -2147483648} for g in req.group_ids]}
    if api_key == SHARE_FETCH:
        return {"throttle_time": 0, "error_code": code, "error_message": None, "acquisition_lock_timeout": 0,
                "responses": [], "node_endpoints": []}
    if api_key == SHARE_ACKNOWLEDGE:
        return {"throttle_time": 0, "error_code": code, "error_message": None, "responses": [], "node_endpoints": []}
    if api_key == DESCRIBE_SHARE_GROUP_OFFSETS:
        assert isinstance(req, _named()[1]), req
        return {"throttle_time": 0, "groups": [{"group_id": g.group_id, "topics": [], "error_code": code,
                                                "error_message": None} for g in req.groups]}
    assert api_key in (ALTER_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_OFFSETS), api_key
    return {"throttle_time": 0, "error_code": code, "responses": [],
            "error_message": _NOT_SUPPORTED if code == ErrorCode.unsupported_version else "feature levels unknown"}


Handle = Callable[["Context", "RequestPayload"], Awaitable["Answer"]]


def gated(api_key: int, handle: Handle) -> Handle:
    """``handle`` behind the feature gate of ``api_key`` (``handle`` itself when ungated)."""
    feature = GATES.get(api_key)
    if feature is None:
        return handle

    async def gate(ctx: Context, req: RequestPayload) -> Answer:
        code = closed(ctx, feature)
        if code is not None:
            return refusal(api_key, req, code)
        return await handle(ctx, req)

    return gate
