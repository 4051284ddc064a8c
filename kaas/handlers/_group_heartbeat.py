"""The answer of the KIP-848-style heartbeats, ConsumerGroupHeartbeat (68) and
ShareGroupHeartbeat (76): the same fields, built from either machine's reply."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Protocol

from kio.schema.errors import ErrorCode

__all__ = ["answer", "error"]


class Reply(Protocol):
    """What both ``consumer_group.HeartbeatReply`` and ``share_group.ShareReply`` carry."""

    @property
    def error_code(self) -> ErrorCode: ...
    @property
    def error_message(self) -> str | None: ...
    @property
    def member_id(self) -> str | None: ...
    @property
    def member_epoch(self) -> int: ...
    @property
    def assignment(self) -> Mapping[str, frozenset[int]] | None: ...


def error(code: ErrorCode, message: str | None = None) -> dict[str, object]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}


def answer(reply: Reply, interval_ms: int) -> dict[str, object]:
    """The response body: the error alone, or the member's epoch, the interval and its
    assignment (topic ids) when the reply carries one."""
    if reply.error_code != ErrorCode.none:
        return error(reply.error_code, reply.error_message)
    assignment = None
    if reply.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": uuid.UUID(tid), "partitions": sorted(ps)}
                                           for tid, ps in sorted(reply.assignment.items())]}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "member_id": reply.member_id,
            "member_epoch": reply.member_epoch, "heartbeat_interval": interval_ms, "assignment": assignment}
