"""What the share-state RPCs (InitializeShareGroupState 83, ReadShareGroupState 84,
DeleteShareGroupState 86, ReadShareGroupStateSummary 87) share. Apache's brokers send
them to their share coordinator; in kaas a share group's state of a partition is kept by
the partition's leader (design section 11), so they go to the leader: a group's
coordinator sends them to each partition leader for the admin APIs
(``coord.group.share.offsets``), and ``kaas groups describe`` asks the leaders for what is
in flight. CLUSTER_ACTION on the cluster, as Apache (brokers, super users or by ACL):
else every partition is answered CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from kaas.errors import KaasError
from kaas.handlers._auth import CLUSTER, Op, authorize

if TYPE_CHECKING:
    from kaas.handlers.context import Context

__all__ = ["Partition", "serve"]


class Partition(Protocol):
    """A request partition: the share-state RPCs each have their own class."""

    @property
    def partition(self) -> int: ...


P = TypeVar("P", bound=Partition)  # a request's partition class
P_co = TypeVar("P_co", bound=Partition, covariant=True)


class _Topic(Protocol[P_co]):
    @property
    def topic_id(self) -> uuid.UUID | None: ...

    @property
    def partitions(self) -> Iterable[P_co]: ...


async def serve(ctx: Context, group_id: str, topics: Iterable[_Topic[P]],
                one: Callable[[str, str, P], Awaitable[Mapping[str, object]]],
                failed: Mapping[str, object], denied: Mapping[str, object] | None = None) -> dict[str, object]:
    """The response: ``one(group, topic name, request partition)`` 's fields for each
    partition (its ``partition`` and error code added), or ``failed`` 's with the error.

    Args:
        one: the leader's call for one partition; raises KaasError (NOT_LEADER_OR_FOLLOWER,
            KAFKA_STORAGE_ERROR, ...), answered for that partition.
        failed: the fields of a partition that failed (besides its error).
        denied: those of a partition the principal may not ask for (CLUSTER_ACTION
            missing; default ``failed``): Apache answers the request's error response,
            with the schema's defaults, rather than the share coordinator's.
    """
    allowed = authorize(ctx, Op.CLUSTER_ACTION, CLUSTER)
    by_id = {m.topic_id: m for m in ctx.broker.topics.topics.values()}
    results = []
    for t in topics:
        meta = by_id.get(t.topic_id) if t.topic_id is not None else None
        parts = []
        for p in t.partitions:
            code, message = ErrorCode.cluster_authorization_failed, None
            if allowed and (meta is None or not 0 <= p.partition < meta.partitions):
                code = ErrorCode.unknown_topic_or_partition
            elif allowed and meta is not None:
                try:
                    parts.append({"partition": p.partition, "error_code": ErrorCode.none,
                                  **await one(group_id, meta.name, p)})
                    continue
                except KaasError as exc:
                    code, message = exc.code, exc.message
            fields = failed if allowed or denied is None else denied
            parts.append({**fields, "partition": p.partition, "error_code": code, "error_message": message})
        results.append({"topic_id": t.topic_id, "partitions": parts})
    return {"results": results}
