"""The response order of one connection, sans-IO.

A client may pipeline requests; Kafka answers them in the order they were sent, whatever
order they finish in. ``Ordering`` holds that rule and nothing else: requests enter as
``Slot``s in arrival order, handlers fill them in any order, and ``take`` hands out what
can be sent now. It knows no socket, no trio and no clock: ``net.connection`` is the loop
around it, and ``tests/unit/test_ordering.py`` drives it with scripts of arrivals and
completions, as h11's tests drive its connection.

Rules:
    - answers leave in arrival order; an answer waits for every earlier one;
    - a request whose handler decided the connection must close (a protocol error, or a
      failed SASL exchange's answer followed by a close) ends the connection: the answers
      before it are sent, its own answer too when it has one (``close_after``), nothing
      after it ever;
    - a pipelined burst goes out in one send while its answers keep coming (the writer's
      ``gather``: ``ready_at_head`` grows pass by pass);
    - a request may be answered in the reader itself (``answer_inline``) only when nothing
      earlier is unanswered and it cannot park: then sending at once keeps the order, and
      costs no task, no slot in the queue and no hand-off to the writer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kaas.wire.codec import Frame

__all__ = ["INLINE_APIS", "INLINE_WHEN_ALONE", "Close", "Ordering", "Slot"]

# Requests that never park (no long poll, no rebalance wait, no group-commit batching with
# their neighbours): answered in the reader when nothing else of the connection is in
# flight. On a transactional producer's coordinator connection (one request at a time)
# that is a third of each request's cost. Produce, Fetch, JoinGroup, SyncGroup and the
# topic admin requests keep the concurrent path.
INLINE_APIS = frozenset({
    2,  # ListOffsets
    3,  # Metadata
    8, 9,  # OffsetCommit, OffsetFetch
    10,  # FindCoordinator
    12, 13,  # Heartbeat, LeaveGroup
    15, 16,  # DescribeGroups, ListGroups
    18,  # ApiVersions
    22,  # InitProducerId
    23,  # OffsetForLeaderEpoch
    17, 36,  # SaslHandshake, SaslAuthenticate: done before the next frame is cut (its size bound)
    24, 25, 26, 28,  # AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit
    27,  # WriteTxnMarkers: parks for the fsync, but a coordinator's link sends one at a time
    32,  # DescribeConfigs
    60, 61, 65, 66,  # DescribeCluster, DescribeProducers, DescribeTransactions, ListTransactions
})

# Produce is answered inline too when it is the only request the client has sent: a
# transactional producer's one-at-a-time Produce. Produce requests that arrive together
# (librdkafka pipelines up to 5 per connection) take the concurrent path, so they still
# share one group-commit fsync.
INLINE_WHEN_ALONE = frozenset({0})


class Slot:
    """One request's answer: the response bytes (None when the API sends none, as acks=0
    Produce), or the reason the connection closes instead (``close``) or right after the
    response (``close_after``). ``ready`` once its handler is done."""

    __slots__ = ("ready", "data", "close", "close_after")

    def __init__(self) -> None:
        self.ready = False
        self.data: Frame | None = None
        self.close: str | None = None
        self.close_after: str | None = None


@dataclass(frozen=True, slots=True)
class Close:
    """The connection ends after the bytes ``take`` returned with it: ``event`` is the log
    event (``connection_closed_protocol_error`` or ``connection_closed_after_response``)."""

    event: str
    reason: str


PROTOCOL_ERROR = "connection_closed_protocol_error"
AFTER_RESPONSE = "connection_closed_after_response"


class Ordering:
    """The unanswered requests of one connection, in arrival order."""

    __slots__ = ("_queue", "closed")

    def __init__(self) -> None:
        self._queue: deque[Slot] = deque()
        self.closed = False  # a Close was handed out: nothing more is ever sent

    @property
    def pending(self) -> int:
        """Requests taken in and not yet handed out by ``take``."""
        return len(self._queue)

    def answer_inline(self, api_key: int, more_buffered: bool) -> bool:
        """Whether the request may be answered by the reader at once: nothing earlier is
        unanswered, and the API never parks (or is Produce with nothing behind it)."""
        return not self._queue and (api_key in INLINE_APIS
                                    or (api_key in INLINE_WHEN_ALONE and not more_buffered))

    def enqueue(self) -> Slot:
        """A slot for the next request, answered later in arrival order."""
        slot = Slot()
        self._queue.append(slot)
        return slot

    def refuse(self, reason: str) -> None:
        """The next frame broke the protocol: the connection closes once every earlier
        request is answered, and reads nothing more."""
        slot = self.enqueue()
        slot.close = reason
        slot.ready = True

    def ready_at_head(self) -> int:
        """How many answers ``take`` would hand out now (the ready run at the head)."""
        n = 0
        for slot in self._queue:
            if not slot.ready:
                break
            n += 1
        return n

    def head_ready(self) -> bool:
        """``take`` would hand out something (bytes or a close)."""
        return bool(self._queue) and self._queue[0].ready

    def take(self) -> tuple[list[Frame], Close | None]:
        """Every ready answer at the head of the queue, in order, as the bytes to send
        now (one send for all: a pipelining client gets them together), and the close that
        follows them, if any."""
        out: list[Frame] = []
        queue = self._queue
        while queue and queue[0].ready:
            slot = queue.popleft()
            close = outcome(slot, out)
            if close is not None:
                self.closed = True
                queue.clear()
                return out, close
        return out, None


def outcome(slot: Slot, out: list[Frame]) -> Close | None:
    """Add the bytes of a finished ``slot`` to ``out``; the close it asks for, if any. (The
    inline path uses it for its one slot, ``take`` for each of the queue's.)"""
    if slot.close is not None:
        return Close(PROTOCOL_ERROR, slot.close)
    if slot.data is not None:
        out.append(slot.data)
    if slot.close_after is not None:
        return Close(AFTER_RESPONSE, slot.close_after)
    return None
