"""The Produce answer patched into a template (``wire.produce_answer``) is byte for byte
kio's encoding of the same answer, for every version kaas serves, any shape and any
values; shapes it cannot patch are left to kio."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kaas.handlers.registry import REGISTRY
from kaas.wire import codec, produce_answer
from kaas.wire.build import build

VERSIONS = range(REGISTRY[0].min_version, REGISTRY[0].max_version + 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TIME = st.one_of(st.just(-1), st.integers(0, 253402300799000))  # kio's datetime range
CODES = st.sampled_from([ErrorCode.none, ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error,
                         ErrorCode.invalid_producer_epoch, ErrorCode.out_of_order_sequence_number])


def partition(index: int):
    return st.fixed_dictionaries({"index": st.just(index), "error_code": CODES, "base_offset": I64,
                                  "log_append_time": TIME, "log_start_offset": I64, "record_errors": st.just([])})


@st.composite
def answers(draw, by_id: bool = False):
    """Topics by name, or by id (Produce v13)."""
    keys = draw(st.lists(st.uuids() if by_id else st.text(min_size=1, max_size=30), min_size=1, max_size=3,
                         unique=True))
    out = []
    for key in keys:
        indexes = draw(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=4, unique=True))
        parts = [draw(partition(i)) for i in indexes]
        out.append({"name": "", "topic_id": key, "partition_responses": parts} if by_id
                   else {"name": key, "partition_responses": parts})
    return out


def kio_body(version: int, topics: list[dict]) -> bytes:
    return codec.encode_body(0, version, build(codec.response_class(0, version),
                                               {"responses": topics, "throttle_time": 0}))


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60)
@given(data=st.data())
def test_patched_answers_are_kios(version, data):
    topics, again = (data.draw(answers(by_id=version >= 13)) for _ in range(2))
    first = produce_answer.produce_body(version, topics)  # the first sight of a shape: kio
    assert first is None or first == kio_body(version, topics)
    for t in (topics, again, topics):
        got = produce_answer.produce_body(version, t)
        assert got is None or got == kio_body(version, t)


def test_a_shape_seen_twice_is_patched_from_v5():
    parts = [{"index": 0, "error_code": 0, "base_offset": 41, "log_append_time": -1, "log_start_offset": 0,
              "record_errors": []}]
    for version in VERSIONS:
        topics = [{"name": "", "topic_id": uuid.UUID(int=5), "partition_responses": parts} if version >= 13
                  else {"name": "t", "partition_responses": parts}]
        produce_answer.produce_body(version, topics)
        got = produce_answer.produce_body(version, topics)
        if version >= 5:  # log_start_offset is in the answer from v5
            assert got == kio_body(version, topics)
        else:
            assert got is None


def test_error_messages_and_record_errors_go_to_kio():
    base = {"index": 0, "error_code": ErrorCode.invalid_record, "base_offset": -1, "log_append_time": -1,
            "log_start_offset": -1, "record_errors": []}
    for p in ({**base, "error_message": "bad"},
              {**base, "record_errors": [{"batch_index": 0, "batch_index_error_message": "x"}]}):
        topics = [{"name": "t", "partition_responses": [p]}]
        for _ in range(2):
            assert produce_answer.produce_body(10, topics) is None
