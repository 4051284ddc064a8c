"""The response-ordering machine of a connection (``kaas.net.ordering``), without a socket:
scripts of arrivals and completions in, the bytes and closes ``take`` hands out checked,
as h11's tests drive its connection."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kaas.net.ordering import AFTER_RESPONSE, PROTOCOL_ERROR, Close, Ordering, Slot


def _done(slot: Slot, data: bytes | None = None, *, close: str | None = None,
          close_after: str | None = None) -> None:
    slot.data, slot.close, slot.close_after, slot.ready = data, close, close_after, True


def test_answers_wait_for_every_earlier_one() -> None:
    o = Ordering()
    a, b, c = o.enqueue(), o.enqueue(), o.enqueue()
    _done(c, b"c")
    _done(b, b"b")
    assert not o.head_ready()
    assert o.take() == ([], None)
    _done(a, b"a")
    assert o.take() == ([b"a", b"b", b"c"], None)
    assert o.pending == 0


def test_take_stops_at_the_first_unfinished() -> None:
    o = Ordering()
    a, b, c = o.enqueue(), o.enqueue(), o.enqueue()
    _done(a, b"a")
    _done(c, b"c")
    assert o.take() == ([b"a"], None)
    assert o.pending == 2
    _done(b, b"b")
    assert o.take() == ([b"b", b"c"], None)


def test_ready_at_head_counts_what_take_would_hand_out() -> None:
    """The writer's gather waits while this grows (a pipelined burst finishing pass by
    pass in reverse order), then sends the run whole."""
    o = Ordering()
    assert o.ready_at_head() == 0
    a, b, c = o.enqueue(), o.enqueue(), o.enqueue()
    _done(c, b"c")
    assert o.ready_at_head() == 0  # the head is not ready: nothing can go yet
    _done(b, b"b")
    _done(a, b"a")
    assert o.ready_at_head() == 3
    out, close = o.take()
    assert (out, close) == ([b"a", b"b", b"c"], None)
    assert o.ready_at_head() == 0


@given(st.lists(st.booleans(), max_size=12))
def test_ready_at_head_is_the_length_of_take(finished: list[bool]) -> None:
    o = Ordering()
    slots = [o.enqueue() for _ in finished]
    for i, (slot, done) in enumerate(zip(slots, finished, strict=True)):
        if done:
            _done(slot, str(i).encode())
    n = o.ready_at_head()
    assert len(o.take()[0]) == n
    assert n == (finished + [False]).index(False)


def test_a_request_without_a_response_sends_nothing() -> None:
    o = Ordering()
    a, b = o.enqueue(), o.enqueue()
    _done(a)  # acks=0 Produce
    _done(b, b"b")
    assert o.take() == ([b"b"], None)


def test_a_protocol_error_sends_the_earlier_answers_then_closes() -> None:
    o = Ordering()
    a = o.enqueue()
    o.refuse("unsupported api key 999")
    later = o.enqueue()
    _done(later, b"never")
    assert o.take() == ([], None)
    _done(a, b"a")
    assert o.take() == ([b"a"], Close(PROTOCOL_ERROR, "unsupported api key 999"))
    assert o.closed and o.pending == 0


def test_close_after_sends_its_own_answer_first() -> None:
    o = Ordering()
    a, b = o.enqueue(), o.enqueue()
    _done(a, b"sasl-failed", close_after="authentication failed")
    _done(b, b"never")
    assert o.take() == ([b"sasl-failed"], Close(AFTER_RESPONSE, "authentication failed"))


def test_inline_only_when_nothing_is_unanswered() -> None:
    o = Ordering()
    assert o.answer_inline(18, more_buffered=True)  # ApiVersions
    assert o.answer_inline(0, more_buffered=False)  # Produce, alone
    assert not o.answer_inline(0, more_buffered=True)  # Produce with more behind it
    assert not o.answer_inline(1, more_buffered=False)  # Fetch may park
    slot = o.enqueue()
    assert not o.answer_inline(18, more_buffered=False)
    _done(slot, b"x")
    o.take()
    assert o.answer_inline(18, more_buffered=False)


@st.composite
def scripts(draw):
    """n requests, some that close, finished in any order, with takes in between."""
    n = draw(st.integers(1, 12))
    kinds = draw(st.lists(st.sampled_from(["ok", "ok", "ok", "none", "close", "close_after"]),
                          min_size=n, max_size=n))
    order = draw(st.permutations(range(n)))
    takes = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return kinds, order, takes


@given(scripts())
def test_any_completion_order_sends_in_arrival_order_up_to_the_first_close(script) -> None:
    kinds, order, takes = script
    o = Ordering()
    slots = [o.enqueue() for _ in kinds]
    sent: list[bytes] = []
    closes: list[Close] = []
    for i, take_now in zip(order, takes):
        kind = kinds[i]
        _done(slots[i], None if kind in ("none", "close") else str(i).encode(),
              close="bad" if kind == "close" else None,
              close_after="bye" if kind == "close_after" else None)
        if take_now and not o.closed:
            out, close = o.take()
            sent += out
            closes += [close] if close else []
    if not o.closed:
        out, close = o.take()
        sent += out
        closes += [close] if close else []
    first_close = next((i for i, k in enumerate(kinds) if k in ("close", "close_after")), None)
    last = len(kinds) if first_close is None else first_close + (kinds[first_close] == "close_after")
    expected = [str(i).encode() for i in range(last) if kinds[i] not in ("none", "close")]
    assert sent == expected
    assert len(closes) == (first_close is not None)
    assert o.pending == 0
