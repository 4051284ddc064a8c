"""Sans-IO length-prefix framing: split independence, size bounds, buffering, round trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaas.wire.framing import MIN_FRAME, FrameDecoder, FramingError, frame

MAX = 4096

payloads = st.lists(st.binary(min_size=MIN_FRAME, max_size=300), max_size=12)


def _drain(dec: FrameDecoder) -> list[bytes]:
    return list(dec.frames())


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points + [len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


def _SmallLarge(max_frame: int) -> FrameDecoder:
    """A decoder whose "large" frames start at 16 bytes, so short payloads take that path."""
    return FrameDecoder(max_frame, large=16)


@pytest.mark.parametrize("decoder", [FrameDecoder, _SmallLarge], ids=["small-frames", "large-frames"])
@settings(deadline=None)
@given(payloads, st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
def test_frames_do_not_depend_on_split(decoder, frames_in, cuts):
    stream = b"".join(frame(p) for p in frames_in)
    dec = decoder(MAX)
    got: list[bytes] = []
    for piece in _split(stream, cuts):
        dec.feed(piece)
        got += [bytes(f) for f in dec.frames()]
    assert got == frames_in
    assert dec.buffered == 0 and dec.room() is None


@settings(deadline=None)
@given(payloads)
def test_byte_at_a_time_equals_all_at_once(frames_in):
    stream = b"".join(frame(p) for p in frames_in)
    one = FrameDecoder(MAX)
    one.feed(stream)
    whole = _drain(one)
    dec = FrameDecoder(MAX)
    bytewise: list[bytes] = []
    for i in range(len(stream)):
        dec.feed(stream[i : i + 1])
        bytewise += _drain(dec)
    assert whole == bytewise == frames_in


@settings(deadline=None)
@given(st.binary(min_size=MIN_FRAME, max_size=500))
def test_frame_round_trip(payload):
    wire = frame(payload)
    assert wire[:4] == len(payload).to_bytes(4, "big")
    assert wire[4:] == payload
    dec = FrameDecoder(MAX)
    dec.feed(wire)
    assert _drain(dec) == [payload]


@pytest.mark.parametrize("size", [0, 1, MIN_FRAME - 1, MAX + 1, 2**31 - 1, -1, -(2**31)])
def test_out_of_bounds_size_raises(size):
    dec = FrameDecoder(MAX)
    dec.feed(size.to_bytes(4, "big", signed=True) + b"\x00" * 16)
    with pytest.raises(FramingError):
        _drain(dec)


@pytest.mark.parametrize("size", [MIN_FRAME, MAX])
def test_size_bounds_are_inclusive(size):
    dec = FrameDecoder(MAX)
    dec.feed(frame(b"x" * size))
    assert _drain(dec) == [b"x" * size]


def test_min_frame_changes_between_frames():
    """A request, then frames shorter than a request header (the raw SASL tokens after a
    SaslHandshake v0, empty ones included), then the bound again: each frame is cut with
    the bound in force when it is reached, all from one buffer."""
    dec = FrameDecoder(MAX)
    dec.feed(frame(b"r" * 8) + frame(b"tok") + frame(b"") + frame(b"abc"))
    frames = dec.frames()
    assert next(frames) == b"r" * 8
    dec.min_frame = 0
    assert next(frames) == b"tok"
    assert next(frames) == b""
    dec.min_frame = MIN_FRAME
    with pytest.raises(FramingError):
        next(frames)


def test_bad_size_after_good_frames_yields_the_good_ones_first():
    dec = FrameDecoder(MAX)
    dec.feed(frame(b"a" * 8) + frame(b"b" * 9) + (3).to_bytes(4, "big") + b"zzz")
    got = []
    with pytest.raises(FramingError):
        for f in dec.frames():
            got.append(f)
    assert got == [b"a" * 8, b"b" * 9]


def test_oversize_detected_from_prefix_alone():
    dec = FrameDecoder(MAX)
    dec.feed((MAX + 1).to_bytes(4, "big"))  # no body yet: must not wait for it
    with pytest.raises(FramingError):
        _drain(dec)


def test_partial_frames_are_buffered():
    payload = bytes(range(40))
    wire = frame(payload)
    dec = FrameDecoder(MAX)
    dec.feed(wire[:2])  # half a size prefix
    assert _drain(dec) == []
    assert dec.buffered == 2
    dec.feed(wire[2:10])  # prefix plus part of the body
    assert _drain(dec) == []
    assert dec.buffered == 10
    dec.feed(wire[10:] + frame(b"n" * 8)[:5])  # the rest plus the start of the next
    assert _drain(dec) == [payload]
    assert dec.buffered == 5
    dec.feed(frame(b"n" * 8)[5:])
    assert _drain(dec) == [b"n" * 8]
    assert dec.buffered == 0


def test_frames_on_empty_decoder_yields_nothing():
    dec = FrameDecoder(MAX)
    assert _drain(dec) == []
    assert dec.buffered == 0


def test_a_frame_is_consumed_when_yielded_even_if_iteration_stops():
    dec = FrameDecoder(1 << 20)
    dec.feed(frame(b"a" * 8) + frame(b"b" * 8) + frame(b"c" * 8)[:6])
    for f in dec.frames():
        assert f == b"a" * 8
        break  # stop after the first frame, leaving the generator open
    assert dec.buffered == 12 + 6
    assert list(dec.frames()) == [b"b" * 8]
    dec.feed(frame(b"c" * 8)[6:])
    assert list(dec.frames()) == [b"c" * 8] and dec.buffered == 0


def _as_bytes(frames_out) -> list[bytes]:
    return [bytes(f) for f in frames_out]


@settings(deadline=None)
@given(payloads, st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=40))
def test_receiving_into_room_equals_feeding(frames_in, chunks):
    """What a connection does: receive into ``room()`` while a large frame is pending,
    else receive a piece and ``feed`` it. Every chunk size pattern gives the same frames."""
    stream = b"".join(frame(p) for p in frames_in)
    dec = _SmallLarge(MAX)
    got: list[bytes] = []
    pos, i = 0, 0
    while pos < len(stream):
        want = chunks[i % len(chunks)]
        i += 1
        room = dec.room()
        if room is not None:
            n = min(want, len(room), len(stream) - pos)
            room[:n] = stream[pos : pos + n]
            room.release()
            dec.received(n)
        else:
            n = min(want, len(stream) - pos)
            dec.feed(stream[pos : pos + n])
        pos += n
        got += _as_bytes(dec.frames())
        assert dec.buffered == pos - sum(len(p) + 4 for p in got)
    assert got == frames_in
    assert dec.buffered == 0 and dec.room() is None


def test_large_frame_is_received_into_its_own_buffer_and_yielded_read_only():
    payload = bytes(range(256)) * 4
    wire = frame(payload)
    dec = _SmallLarge(MAX)
    dec.feed(wire[:10])  # prefix + 6 bytes: the frame's buffer takes them
    assert list(dec.frames()) == []
    room = dec.room()
    assert room is not None and len(room) == len(payload) - 6
    assert dec.buffered == 10
    room[:] = wire[10:]
    dec.received(len(room))
    assert dec.room() is None
    (got,) = list(dec.frames())
    assert isinstance(got, memoryview) and got.readonly and bytes(got) == payload
    # the next large frame gets a new buffer: the one yielded is never overwritten
    dec.feed(frame(b"z" * 100)[:8])
    list(dec.frames())
    dec.room()[:] = b"z" * 96
    dec.received(96)
    (second,) = list(dec.frames())
    assert bytes(second) == b"z" * 100 and bytes(got) == payload


def test_large_frame_size_is_still_bounded():
    dec = _SmallLarge(MAX)
    dec.feed((MAX + 1).to_bytes(4, "big") + b"\x00" * 20)
    with pytest.raises(FramingError):
        list(dec.frames())
    assert dec.room() is None
