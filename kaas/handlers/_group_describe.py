"""What the KIP-848-style describes share, ConsumerGroupDescribe (69) and
ShareGroupDescribe (77): per group id, DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED),
the coordinator's view or its error, and DESCRIBE on every topic the group's assignments
name (else TOPIC_AUTHORIZATION_FAILED without the group's details, as Apache,
KAFKA-18813); the group's fields when all that passed."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, OPS_NOT_ASKED, TOPIC, Op, authorize, authorized_operations

if TYPE_CHECKING:
    from kaas.handlers.context import Context

__all__ = ["assignment", "describe_each"]

Described = dict[str, Any]  # a coordinator's ``describe`` view of one group


def _failed(group_id: str, code: ErrorCode, message: str | None = None, epoch: int = -1) -> dict[str, object]:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": epoch, "assignment_epoch": epoch, "assignor_name": "", "members": [],
            "authorized_operations": OPS_NOT_ASKED}


def assignment(parts: dict[str, tuple[str, list[int]]]) -> dict[str, object]:
    """An assignment field from the view's ``{topic name: (topic id, partitions)}``."""
    return {"topic_partitions": [{"topic_id": uuid.UUID(tid), "topic_name": name, "partitions": ps}
                                 for name, (tid, ps) in sorted(parts.items())]}


def describe_each(ctx: Context, group_ids: Sequence[str], include_ops: bool, describe: Callable[[str], Described],
                  topics: Callable[[Described], Iterable[str]],
                  fields: Callable[[Described], dict[str, object]]) -> dict[str, object]:
    """The response: each group ``describe`` d (raises KaasError: answered as the group's
    error), checked against ``topics`` (the topic names its assignments name), and
    answered with the common fields and the API's own ``fields``."""
    out = []
    for gid in group_ids:
        if not authorize(ctx, Op.DESCRIBE, GROUP, gid):
            # refused before the coordinator: Apache's schema defaults (epochs 0)
            out.append(_failed(gid, ErrorCode.group_authorization_failed, epoch=0))
            continue
        try:
            d = describe(gid)
        except KaasError as exc:
            out.append(_failed(gid, exc.code, exc.message))
            continue
        if any(not authorize(ctx, Op.DESCRIBE, TOPIC, t) for t in topics(d)):
            out.append(_failed(gid, ErrorCode.topic_authorization_failed))
            continue
        out.append({"error_code": ErrorCode.none, "error_message": None, "group_id": gid,
                    "authorized_operations": authorized_operations(ctx, GROUP, gid) if include_ops else OPS_NOT_ASKED,
                    **fields(d)})
    return {"throttle_time": 0, "groups": out}
