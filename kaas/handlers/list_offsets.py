"""ListOffsets (2): earliest (-2), latest (-1, the LSO under read_committed), max timestamp
(-3, v7+) and by timestamp.

The tiered-storage specs answer as Apache's broker does with remote storage off, which is
kaas's case (every byte of a partition is on the shared volume, none tiered): earliest
local (-4, v8+) is the log start offset; latest tiered (-5, v9+) and earliest pending
upload (-6, v11+) find nothing (offset -1, timestamp -1, leader epoch -1). v10's
``timeout`` bounds Apache's wait on remote storage; kaas never reads remote storage, so
every answer is immediate and it is not used."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets import v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11

from kaas.errors import KaasError
from kaas.handlers._auth import TOPIC, Op, authorize

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    ListOffsetsRequest: TypeAlias = (v1.ListOffsetsRequest | v2.ListOffsetsRequest | v3.ListOffsetsRequest
                                     | v4.ListOffsetsRequest | v5.ListOffsetsRequest | v6.ListOffsetsRequest
                                     | v7.ListOffsetsRequest | v8.ListOffsetsRequest | v9.ListOffsetsRequest
                                     | v10.ListOffsetsRequest | v11.ListOffsetsRequest)

API_KEY = 2
VERSIONS = (1, 11)

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -4, -5, -6
NOTHING_TIERED = (LATEST_TIERED, EARLIEST_PENDING_UPLOAD)  # no remote storage: nothing to find
_NO_LEADER_EPOCH = (v1.ListOffsetsRequest, v2.ListOffsetsRequest, v3.ListOffsetsRequest)  # current_leader_epoch: v4+


def _asked(req: ListOffsetsRequest) -> list[tuple[str, list[tuple[int, int, int]]]]:
    """Each topic's partitions: (index, the leader epoch the client knows (-1 before v4),
    the timestamp or spec asked for)."""
    if isinstance(req, _NO_LEADER_EPOCH):
        return [(t.name, [(p.partition_index, -1, p.timestamp) for p in t.partitions]) for t in req.topics]
    return [(t.name, [(p.partition_index, p.current_leader_epoch, p.timestamp) for p in t.partitions])
            for t in req.topics]


async def handle(ctx: Context, req: ListOffsetsRequest) -> dict[str, object]:
    broker = ctx.broker
    read_committed = not isinstance(req, v1.ListOffsetsRequest) and req.isolation_level == 1
    topics: list[dict[str, object]] = []
    for name, asked in _asked(req):
        parts: list[dict[str, object]] = []
        topics.append({"name": name, "partitions": parts})
        allowed = authorize(ctx, Op.DESCRIBE, TOPIC, name)
        for index, want, ts in asked:
            out = {"partition_index": index, "error_code": ErrorCode.none,
                   "timestamp": -1, "offset": -1, "leader_epoch": -1, "old_style_offsets": []}
            parts.append(out)
            if not allowed:
                out["error_code"] = ErrorCode.topic_authorization_failed
                continue
            try:
                part = broker.get_partition(name, index)
            except KaasError as exc:
                out["error_code"] = exc.code
                continue
            if want >= 0 and want != part.epoch:
                out["error_code"] = (ErrorCode.fenced_leader_epoch if want < part.epoch
                                     else ErrorCode.unknown_leader_epoch)
                continue
            if ts in NOTHING_TIERED:
                continue  # (offset, timestamp and leader epoch stay -1)
            out["leader_epoch"] = part.epoch
            if ts in (EARLIEST, EARLIEST_LOCAL):
                out["offset"] = part.log_start_offset
            elif ts == LATEST:
                out["offset"] = part.last_stable_offset if read_committed else part.high_watermark
            elif ts == MAX_TIMESTAMP:
                found = part.log.max_timestamp_offset()
                if found is not None:
                    out["offset"], out["timestamp"] = found
            else:
                found = part.log.offset_for_timestamp(ts)
                if found is not None:
                    off, found_ts = found
                    limit = part.last_stable_offset if read_committed else part.high_watermark
                    if off < limit:
                        out["offset"], out["timestamp"] = off, found_ts
    return {"throttle_time": 0, "topics": topics}
