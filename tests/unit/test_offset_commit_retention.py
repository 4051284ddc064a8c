"""OffsetCommit v2-v4's ``retention_time_ms``: -1 (the default) leaves an offset to
``offsets.retention.minutes``; any other value gives it an expiry time of its own from the
commit, as Apache does; it survives the group file's round trip."""

from __future__ import annotations

import datetime

from kio.schema.offset_commit.v2.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.static.primitive import i32, i64, i64Timedelta

from kaas.handlers.offset_commit import partition_offsets
from kaas.storage.offset_store import Committed


def request(retention_ms: int) -> OffsetCommitRequest:
    part = OffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(9), committed_metadata="")
    return OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=i32(-1), member_id="",
                               retention_time=i64Timedelta.parse(datetime.timedelta(milliseconds=retention_ms)),
                               topics=(OffsetCommitRequestTopic(name="t", partitions=(part,)),))


def test_retention_time_gives_an_expiry_time_of_its_own():
    (default,) = partition_offsets(request(-1), ["t"], 1_000).values()
    assert default.timestamp == 1_000 and default.expire_timestamp == -1
    (own,) = partition_offsets(request(60_000), ["t"], 1_000).values()
    assert own.expire_timestamp == 61_000
    assert Committed.from_json(own.to_json()) == own and Committed.from_json(default.to_json()) == default
    assert len(default.to_json()) == 4  # files without an expiry read as before
