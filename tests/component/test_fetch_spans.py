"""The Fetch read path (``PartitionLog.read_span``, ``kaas.spans``, ``aio.send_parts``):
the records a fetch answers are exactly those ``read`` returns, as a span of the segment
file or as bytes, with their count; a span outlives its segment's descriptor and files;
the number of open spans is bounded; spans and buffers go out in order over a socket, and
a span whose file shrank ends the connection instead of a torn frame."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kaas import spans
from kaas.aio import send_parts
from kaas.storage.partition_log import LogConfig, PartitionLog
from kaas.wire import batch as wb

NO_SPANS = 1 << 62


def _open(path: Path, cfg: LogConfig) -> PartitionLog:
    log = PartitionLog(path, cfg)
    log.open(None)
    return log


def _fill(log: PartitionLog, shapes: list[tuple[int, int, bool]]) -> None:
    """Batches of (records, value size), or a transaction's COMMIT marker (control)."""
    for n, vsize, control in shapes:
        if control:
            raw = wb.control_batch(producer_id=7, producer_epoch=0, commit=True, coordinator_epoch=0, timestamp=5)
        else:
            raw = wb.build_batch(base_timestamp=5, records=[(None, b"v" * vsize)] * n)
        log.append(raw, wb.parse_header(raw))


def _bytes(records: bytes | spans.FileSpan) -> bytes:
    return records.read() if isinstance(records, spans.FileSpan) else bytes(records)


def _same_as_read(log: PartitionLog, off: int, max_bytes: int, limit: int, min_one: bool, span_min: int) -> None:
    want = log.read(off, max_bytes, limit, min_one=min_one)
    got = log.read_span(off, max_bytes, limit, min_one=min_one, span_min=span_min)
    data = _bytes(got.records)
    assert data == bytes(want.records)
    assert (got.first_offset, got.next_offset) == (want.first_offset, want.next_offset)
    assert got.records_count == sum(h.records_count for _, h in wb.iter_headers(data))
    assert isinstance(got.records, spans.FileSpan) == (len(data) >= span_min and len(data) > 0)
    if isinstance(got.records, spans.FileSpan):
        got.records.close()


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)
@given(
    shapes=st.lists(st.tuples(st.integers(1, 5), st.sampled_from([0, 40, 900, 5000, 20_000]), st.booleans()),
                    min_size=1, max_size=30),
    picks=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 60_000), st.booleans(),
                             st.sampled_from([0, 1, 10_000, NO_SPANS])), min_size=1, max_size=8),
    reopen=st.booleans(),
    segment_bytes=st.sampled_from([3000, 40_000, 1 << 20]),
)
def test_read_span_answers_what_read_answers(shapes, picks, reopen, segment_bytes):
    """Batches smaller and larger than the 8 KiB header window, markers, several
    segments, the sparse index of a reopened log: the same batches, offsets and count."""
    cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=700, fsync=False)
    before = spans.open_count()
    with tempfile.TemporaryDirectory() as d:
        log = _open(Path(d), cfg)
        _fill(log, shapes)
        if reopen:
            log.close()
            log = _open(Path(d), cfg)
        leo = log.log_end_offset
        for off, max_bytes, min_one, span_min in picks:
            off %= leo + 1
            limit = leo if off % 3 else max(off, leo - 2)
            _same_as_read(log, off, max_bytes, limit, min_one, span_min)
        log.close()
    assert spans.open_count() == before


def test_a_span_outlives_its_segment(tmp_path):
    before = spans.open_count()
    log = _open(tmp_path, LogConfig(fsync=False))
    _fill(log, [(3, 30_000, False), (1, 0, True)])
    got = log.read_span(0, 1 << 20, log.log_end_offset, min_one=True, span_min=1)
    want = bytes(log.read(0, 1 << 20, log.log_end_offset).records)
    assert isinstance(got.records, spans.FileSpan)
    log.close()  # the segment's own descriptor is closed ...
    for f in tmp_path.glob("*.log"):
        f.unlink()  # ... and its file deleted (retention)
    assert got.records.read() == want
    got.records.close()
    assert spans.open_count() == before


def test_spans_past_the_bound_are_read_instead(tmp_path, monkeypatch):
    monkeypatch.setattr(spans, "_open", 0)  # (whatever another test left open)
    monkeypatch.setattr(spans, "MAX_OPEN", 1)
    log = _open(tmp_path, LogConfig(fsync=False))
    _fill(log, [(2, 40_000, False)])
    first = log.read_span(0, 1 << 20, log.log_end_offset, min_one=True, span_min=1)
    second = log.read_span(0, 1 << 20, log.log_end_offset, min_one=True, span_min=1)
    assert isinstance(first.records, spans.FileSpan)
    assert isinstance(second.records, bytes)
    assert first.records.read() == second.records
    del first  # an answer dropped unsent closes its spans
    assert spans.open_count() == 0
    assert isinstance(log.read_span(0, 1 << 20, log.log_end_offset, min_one=True, span_min=1).records,
                      spans.FileSpan)
    log.close()


async def _received(sock: trio.socket.SocketType) -> bytes:
    got = bytearray()
    while chunk := await sock.recv(1 << 16):
        got += chunk
    return bytes(got)


@pytest.mark.parametrize("socket_backed", [True, False])
async def test_spans_and_buffers_go_out_in_order(tmp_path, socket_backed):
    before = spans.open_count()
    data = os.urandom(3 << 20)
    path = tmp_path / "seg"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = [b"head", spans.FileSpan(fd, 10, 2 << 20), bytearray(b"mid"), memoryview(data)[:5],
                 spans.FileSpan(fd, 0, 70_000), b"tail"]
    finally:
        os.close(fd)
    want = b"head" + data[10:10 + (2 << 20)] + b"mid" + data[:5] + data[:70_000] + b"tail"
    if socket_backed:
        a, b = trio.socket.socketpair()
        with a, b:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
            async with trio.open_nursery() as nursery:
                got: list[bytes] = []

                async def reader():
                    got.append(await _received(b))

                nursery.start_soon(reader)
                await send_parts(trio.SocketStream(a), a.fileno(), parts)
                a.shutdown(socket.SHUT_WR)
        assert got == [want]
    else:
        left, right = trio.testing.memory_stream_pair()
        await send_parts(left, None, parts)
        received = bytearray()
        while len(received) < len(want):
            received += await right.receive_some()
        assert bytes(received) == want
    assert spans.open_count() == before


async def test_a_span_whose_file_shrank_breaks_the_stream(tmp_path):
    before = spans.open_count()
    path = tmp_path / "seg"
    path.write_bytes(b"x" * 100_000)
    fd = os.open(path, os.O_RDONLY)
    span = spans.FileSpan(fd, 0, 100_000)
    os.close(fd)
    os.truncate(path, 50_000)  # (a segment cut under an answer in flight)
    a, b = trio.socket.socketpair()
    with a, b:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_received, b)
            with pytest.raises(trio.BrokenResourceError, match="shrank"):
                await send_parts(trio.SocketStream(a), a.fileno(), [b"head", span])
            a.shutdown(socket.SHUT_WR)
    assert spans.open_count() == before
