"""Process-wide request, fsync and takeover counters: a leaf module the hot path adds to.

Everything runs on the trio thread, so plain integers and bucket lists need no locks. The
metrics endpoint (``kaas.net.metrics_http``) turns these into Prometheus families at scrape
time; nothing here imports prometheus_client, the handlers or the broker.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sized

LATENCY_BOUNDS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                  1.0, 2.5, 5.0, 10.0, 30.0)
FSYNC_BOUNDS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                0.5, 1.0, 2.5, 5.0)
TAKEOVER_BOUNDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Histogram:
    """A fixed-bucket histogram: ``observe`` is one bisect and two additions."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus buckets: (le, cumulative count), ending with +Inf."""
        out = []
        acc = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            acc += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), acc))
        return out


class ApiStats:
    """One Kafka API's counts (named by the metrics endpoint, which knows the handlers)."""

    __slots__ = ("api_key", "requests", "errors", "bytes_in", "bytes_out", "latency")

    def __init__(self, api_key: int) -> None:
        self.api_key = api_key
        self.requests = 0
        self.errors = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.latency = Histogram(LATENCY_BOUNDS)


class ShareStats:
    """Share-group records (KIP-932) over the share partitions this broker led: acquired
    (deliveries), acknowledged per type (gap, accept, release, reject, renew), released by
    an expired lock, and archived (rejected, gaps, past the delivery-count limit)."""

    __slots__ = ("acquired", "acknowledged", "expired", "archived")

    def __init__(self) -> None:
        self.acquired = 0
        self.acknowledged: dict[str, int] = {}
        self.expired = 0
        self.archived = 0


class TopicStats:
    """One topic's traffic through this broker, as Apache's per-topic BrokerTopicMetrics:
    bytes and records appended by Produce (in), and bytes and records handed to consumers
    by Fetch and ShareFetch (out: whole batches, their header's record count)."""

    __slots__ = ("bytes_in", "records_in", "bytes_out", "records_out")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.records_in = 0
        self.bytes_out = 0
        self.records_out = 0


# Process-wide (one broker per process). Keys: Kafka api keys.
API: dict[int, ApiStats] = {}
TOPIC: dict[str, TopicStats] = {}
FSYNC = Histogram(FSYNC_BOUNDS)
TAKEOVER = Histogram(TAKEOVER_BOUNDS)
SHARE = ShareStats()


def _api(api_key: int) -> ApiStats:
    s = API[api_key] = ApiStats(api_key)
    return s


def record_request(api_key: int, size_in: int, response: Sized | None, seconds: float) -> None:
    """One request answered (called by ``dispatch.execute``)."""
    s = API.get(api_key) or _api(api_key)
    s.requests += 1
    s.bytes_in += size_in
    if response is not None:
        s.bytes_out += len(response)
    s.latency.observe(seconds)


def record_produced(topic: str, size: int, records: int) -> None:
    """A batch of ``records`` records, ``size`` bytes, appended to ``topic`` (not a duplicate)."""
    t = TOPIC.get(topic) or TOPIC.setdefault(topic, TopicStats())
    t.bytes_in += size
    t.records_in += records


def record_fetched(topic: str, size: int, records: int) -> None:
    """``size`` bytes holding ``records`` records of ``topic`` put into a fetch response."""
    t = TOPIC.get(topic) or TOPIC.setdefault(topic, TopicStats())
    t.bytes_out += size
    t.records_out += records


def forget_topic(topic: str) -> None:
    """A deleted topic's counts (its series end with it)."""
    TOPIC.pop(topic, None)


def record_error(api_key: int) -> None:
    s = API.get(api_key) or _api(api_key)
    s.errors += 1


def reset() -> None:
    """Forget every count (tests)."""
    global FSYNC, TAKEOVER, SHARE
    API.clear()
    TOPIC.clear()
    FSYNC = Histogram(FSYNC_BOUNDS)
    TAKEOVER = Histogram(TAKEOVER_BOUNDS)
    SHARE = ShareStats()


def observe_fsync(seconds: float) -> None:
    FSYNC.observe(seconds)


def observe_takeover(seconds: float) -> None:
    TAKEOVER.observe(seconds)
