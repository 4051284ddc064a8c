"""Response encoding: the bodies of the repeating responses (TxnOffsetCommit,
WriteTxnMarkers, AddPartitionsToTxn entities; Heartbeat, EndTxn, AddOffsetsToTxn as
``error_body``) are encoded once and reused; the framed bytes must be exactly what
kio's writers produce for the header and the body, hit or miss."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.handlers.registry import REGISTRY
from kaas.wire import codec
from kaas.wire.build import build

CASES = [(key, v) for key in sorted(codec.REPEATING_BODY_APIS)
         for v in range(REGISTRY[key].min_version, REGISTRY[key].max_version + 1)]


def reference(api_key: int, version: int, corr: int, body) -> bytes:
    """Size prefix + header + body straight from kio's writers, no cache."""
    _cls, hdr_cls, write_header, write_body = codec.response_io(api_key, version)
    buf = io.BytesIO()
    write_header(buf, hdr_cls(correlation_id=corr))
    write_body(buf, body)
    out = buf.getvalue()
    return struct.pack(">i", len(out)) + out


@pytest.mark.parametrize(("api_key", "version"), CASES)
@given(data=st.data(), corrs=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=3))
def test_cached_bodies_encode_like_kio(api_key, version, data, corrs):
    body = data.draw(st.from_type(codec.response_class(api_key, version)))
    for corr in corrs:  # the first may miss, the rest hit
        assert bytes(codec.encode_response(api_key, version, corr, body)) == reference(api_key, version, corr, body)


def test_equal_bodies_share_one_entry_and_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(codec, "_body_cache", {})
    cls = codec.response_class(28, 3)
    a = build(cls, {"throttle_time": 0, "topics": []})
    b = build(cls, {"throttle_time": 0, "topics": []})
    c = build(cls, {"throttle_time": 5, "topics": []})
    codec.encode_response(28, 3, 1, a)
    codec.encode_response(28, 3, 2, b)
    assert len(codec._body_cache) == 1
    codec.encode_response(28, 3, 3, c)
    assert len(codec._body_cache) == 2
    assert bytes(codec.encode_response(28, 3, 4, c)) == reference(28, 3, 4, c)

    monkeypatch.setattr(codec, "_BODY_CACHE_MAX", 3)
    for throttle in range(10):
        codec.encode_response(28, 3, 5, build(cls, {"throttle_time": throttle, "topics": []}))
        assert len(codec._body_cache) <= 3


ERROR_BODY_APIS = [(key, v) for key in (12, 25, 26) for v in range(REGISTRY[key].min_version,
                                                                   REGISTRY[key].max_version + 1)]


@pytest.mark.parametrize(("api_key", "version"), ERROR_BODY_APIS)
@pytest.mark.parametrize("code", [0, 22, 47, 51, 90])
def test_an_error_body_is_kios_encoding_of_that_code(api_key, version, code):
    body = build(codec.response_class(api_key, version), {"throttle_time": 0, "error_code": code})
    assert bytes(codec.encode_response(api_key, version, 3, codec.error_body(api_key, version, code))) == \
        reference(api_key, version, 3, body)


def test_other_apis_are_not_cached(monkeypatch):
    monkeypatch.setattr(codec, "_body_cache", {})
    body = build(codec.response_class(3, 12), {"brokers": [], "topics": []})
    assert bytes(codec.encode_response(3, 12, 9, body)) == reference(3, 12, 9, body)
    assert codec._body_cache == {}


ALL_RESPONSES = [(key, v) for key, h in sorted(REGISTRY.items()) for v in range(h.min_version, h.max_version + 1)]


@pytest.mark.parametrize(("api_key", "version"), ALL_RESPONSES)
def test_a_body_encoded_once_frames_like_kio(api_key, version):
    """A handler may return its body encoded (``encode_body``): framed with the header
    written by hand (v0: the correlation id; v1: and an empty tag section), the bytes are
    kio's, for every key and version."""
    body = build(codec.response_class(api_key, version), {})
    for corr in (0, 7, -(2**31), 2**31 - 1):
        encoded = codec.encode_body(api_key, version, body)
        assert bytes(codec.encode_response(api_key, version, corr, encoded)) == \
            reference(api_key, version, corr, body)


def test_api_versions_answers_the_registry_for_each_version():
    from kaas.handlers import api_versions
    from kaas.handlers.registry import API_KEYS, versions_table

    for v in range(REGISTRY[18].min_version, REGISTRY[18].max_version + 1):
        cls = codec.response_class(18, v)
        got = codec.entity_reader(cls)(api_versions._body(v, 0, API_KEYS), 0)[0]
        assert [(k.api_key, k.min_version, k.max_version) for k in got.api_keys] == \
            [(k["api_key"], k["min_version"], k["max_version"]) for k in versions_table()]
        assert got.error_code == 0


@pytest.mark.parametrize("version", range(REGISTRY[24].min_version, REGISTRY[24].max_version + 1))
def test_add_partitions_uniform_answer_is_the_per_partition_one(version):
    """AddPartitionsToTxn's usual answer (one code for every partition, encoded once) is
    byte for byte the answer built per partition."""
    from kaas.handlers.add_partitions_to_txn import _response, _uniform

    topics = (("a", (0, 3)), ("b-topic", (7,)))
    for code in (0, 51):
        body = build(codec.response_class(24, version), _response(topics, lambda _n, _p, code=code: code))
        assert bytes(codec.encode_response(24, version, 11, _uniform(version, code, topics))) == \
            reference(24, version, 11, body)


def test_a_request_framed_around_its_encoded_body_is_the_same_bytes():
    """``encode_request`` of a body encoded once (``encode_request_body``: a peer link's
    WriteTxnMarkers) frames exactly what it frames from the entity, for every request the
    registry serves (and WriteTxnMarkers v1, which the brokers send each other)."""
    apis = {(27, 1)} | {(key, v) for key, h in REGISTRY.items() for v in range(h.min_version, h.max_version + 1)}
    for key, version in sorted(apis):
        body = build(codec.request_class(key, version), {})
        for client_id in (None, "kaas-broker-1", "ü"):
            framed = codec.encode_request(key, version, 2**31 - 1, client_id, body)
            again = codec.encode_request(key, version, 2**31 - 1, client_id,
                                         codec.encode_request_body(key, version, body))
            assert again == framed, (key, version, client_id)


# Fetch and ShareFetch answers in pieces: the records stay the buffers they were read into.
GATHERED_CASES = [(1, 4), (1, 11), (1, 12), (1, 16), (1, 18)]
_records = st.one_of(st.none(), st.binary(max_size=64),
                     st.integers(codec.GATHER_MIN - 2, codec.GATHER_MIN + 3).map(lambda n: bytes([n % 251]) * n))


def _fetch_answer(version: int, records: list[bytes | None]):
    return build(codec.response_class(1, version), {
        "throttle_time": 0, "error_code": 0, "session_id": 0,
        "responses": [{"topic": "t", "topic_id": None, "partitions": [
            {"partition_index": i, "error_code": 0, "high_watermark": 5, "last_stable_offset": 5,
             "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1, "records": r}
            for i, r in enumerate(records)]}],
        "node_endpoints": []})


@pytest.mark.parametrize(("api_key", "version"), GATHERED_CASES)
@given(records=st.lists(_records, max_size=5), corr=st.integers(-(2**31), 2**31 - 1))
def test_gathered_answers_encode_like_kio(api_key, version, records, corr):
    body = _fetch_answer(version, records)
    out = codec.encode_response(api_key, version, corr, body)
    assert bytes(out) == reference(api_key, version, corr, body)
    assert len(out) == len(reference(api_key, version, corr, body))
    big = [r for r in records if r is not None and len(r) >= codec.GATHER_MIN]
    if big:  # each large record set is a piece of its own: the very object, not a copy
        assert isinstance(out, codec.Gathered)
        assert [p for p in out.parts if any(p is r for r in big)] == big
    else:
        assert not isinstance(out, codec.Gathered)


def test_a_gathered_answer_keeps_a_view_uncopied():
    data = bytes(range(256)) * 256
    view = memoryview(data)[3:codec.GATHER_MIN + 3]
    out = codec.encode_response(1, 12, 1, _fetch_answer(12, [view]))
    assert isinstance(out, codec.Gathered)
    assert any(p is view for p in out.parts)
    assert bytes(out) == reference(1, 12, 1, _fetch_answer(12, [bytes(view)]))
