"""``kaas.client.response_reader``: kio's reader, except that a -1 time (which Apache
sends, and kio refuses) reads as None."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.describe_transactions.v0.response import DescribeTransactionsResponse
from kio.schema.metadata.v12.response import MetadataResponse
from kio.serial import entity_reader

from kaas.client import response_reader
from kaas.wire import codec
from kaas.wire.build import build, ms


def encoded(start_ms: int) -> bytes:
    body = build(DescribeTransactionsResponse, {"throttle_time": 0, "transaction_states": [
        {"error_code": 0, "transactional_id": "a", "transaction_state": "Ongoing", "transaction_timeout": 60000,
         "transaction_start_time": 1_700_000_000_123, "producer_id": 7, "producer_epoch": 2,
         "topics": [{"topic": "t", "partitions": [0, 3]}]},
        {"error_code": 0, "transactional_id": "b", "transaction_state": "Empty", "transaction_timeout": 0,
         "transaction_start_time": start_ms, "producer_id": 8, "producer_epoch": 0, "topics": []},
    ]})
    frame = bytes(codec.encode_response(65, 0, 1, body))[4:]
    _corr, off = codec.response_header(65, 0, frame)
    return frame[off:]


def test_a_minus_one_time_reads_as_none_and_the_rest_as_kio_reads_it():
    data = encoded(-1)
    with pytest.raises(Exception, match="negative timestamp"):
        entity_reader(DescribeTransactionsResponse)(data, 0)
    got, size = response_reader(DescribeTransactionsResponse)(data, 0)
    assert size == len(data)
    a, b = got.transaction_states
    assert b.transaction_start_time is None and ms(b.transaction_start_time) == -1
    assert (b.transactional_id, b.transaction_state, b.producer_id, b.topics) == ("b", "Empty", 8, ())
    assert ms(a.transaction_start_time) == 1_700_000_000_123
    assert a.transaction_timeout == datetime.timedelta(seconds=60)
    assert [(t.topic, tuple(t.partitions)) for t in a.topics] == [("t", (0, 3))]


def test_without_negative_times_it_reads_exactly_what_kio_reads():
    data = encoded(1_000)
    cls = DescribeTransactionsResponse
    assert response_reader(cls)(data, 0) == entity_reader(cls)(data, 0)


def test_a_class_without_times_gets_kio_reader_itself():
    assert response_reader(MetadataResponse) is entity_reader(MetadataResponse)
