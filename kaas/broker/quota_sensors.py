"""Client quota enforcement on one broker, as Apache's ClientQuotaManager (Produce, Fetch),
ClientRequestQuotaManager (Request) and ControllerMutationQuotaManager: a window of usage
per quota type and quota tags, the quota read from this broker's copy of
``__cluster/client_quotas.json`` (``ClientQuotaStore``, polled), and the throttle time a
request asks for. Quotas are per broker: each broker counts what it served.

A quota type is *enabled* while some entity sets its key (Apache's ``quotasEnabled``):
until then nothing is recorded. The tags of a connection (``domain.client_quotas.
metric_tags``) say whose window it shares; a window idle for an hour is dropped (Apache's
sensor expiry). The arithmetic is ``domain.quota_rates``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kaas.domain import client_quotas as cq
from kaas.domain.quota_rates import QUOTA_WINDOW, THROTTLE_AVG_WINDOW, Samples, TokenBucket, max_value_in_window

if TYPE_CHECKING:
    from kaas.broker.client_quotas import ClientQuotaStore
    from kaas.clock import Clock

__all__ = ["FETCH", "KEYS", "MUTATION", "PRODUCE", "REQUEST", "ClientQuotaEnforcer", "SensorView"]

PRODUCE, FETCH, REQUEST, MUTATION = "Produce", "Fetch", "Request", "ControllerMutation"
KEYS = {PRODUCE: "producer_byte_rate", FETCH: "consumer_byte_rate", REQUEST: "request_percentage",
        MUTATION: "controller_mutation_rate"}
SENSOR_EXPIRY_MS = 3_600_000  # Apache: a client's sensors go after an hour without use
REQUEST_THROTTLE_CAP_MS = QUOTA_WINDOW.window_ms  # Apache caps the request quota's throttle at one window
_PURGE_EVERY_MS = 60_000

Tags = tuple[str, str]


@dataclass(slots=True)
class _Sensor:
    rate: Samples = field(default_factory=Samples)  # bytes, request-time percentage, or mutations
    throttle: Samples = field(default_factory=lambda: Samples(THROTTLE_AVG_WINDOW))
    bucket: TokenBucket = field(default_factory=TokenBucket)  # ControllerMutation only
    used_ms: int = 0


@dataclass(frozen=True, slots=True)
class SensorView:
    """One window as ``/metrics`` shows it."""

    quota_type: str
    user: str
    client_id: str
    rate: float  # per second: bytes, request-time percentage, or partition mutations
    throttle_time_ms: float  # the average throttle time over the last ~minute
    quota: float | None  # None: unlimited
    tokens: float | None  # ControllerMutation: the token bucket's level


class ClientQuotaEnforcer:
    """The windows and throttle decisions of one broker.

    Args:
        store: this broker's copy of the client quotas.
        clock: the broker's clock (``monotonic`` times the windows).
    """

    def __init__(self, store: ClientQuotaStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._sensors: dict[tuple[str, str, str], _Sensor] = {}
        self._seen: object = None  # the ClientQuotas whose enabled keys are cached
        self._enabled: frozenset[str] = frozenset()
        self._purged_ms = 0

    def now_ms(self) -> int:
        return int(self.clock.monotonic() * 1000)

    def _entries(self) -> cq.Quotas:
        current = self.store.current
        return current.entries if current is not None else {}

    def enabled(self, quota_type: str) -> bool:
        """Whether some entity sets this type's key (else nothing is recorded)."""
        current = self.store.current
        if current is not self._seen:
            self._seen = current
            entries = current.entries if current is not None else {}
            self._enabled = frozenset(k for q in entries.values() for k in q)
        return KEYS[quota_type] in self._enabled

    def _resolve(self, quota_type: str, principal: str, client_id: str | None) -> tuple[Tags, float | None]:
        entries, key = self._entries(), KEYS[quota_type]
        tags = cq.metric_tags(entries, key, user=cq.user_name(principal), client_id=client_id or "")
        return tags, cq.quota_for_tags(entries, key, *tags)

    def _sensor(self, quota_type: str, tags: Tags, now_ms: int) -> _Sensor:
        k = (quota_type, *tags)
        s = self._sensors.get(k)
        if s is None:
            if now_ms - self._purged_ms >= _PURGE_EVERY_MS:
                self._purge(now_ms)
            s = self._sensors[k] = _Sensor()
        s.used_ms = now_ms
        return s

    def _purge(self, now_ms: int) -> None:
        self._purged_ms = now_ms
        for k in [k for k, s in self._sensors.items() if now_ms - s.used_ms >= SENSOR_EXPIRY_MS]:
            del self._sensors[k]

    def record(self, quota_type: str, principal: str, client_id: str | None, value: float) -> int:
        """Record ``value`` (bytes, or a request-time percentage) for the connection's
        window: the throttle time in ms it now asks for (0: within its quota)."""
        if not self.enabled(quota_type):
            return 0
        now = self.now_ms()
        tags, quota = self._resolve(quota_type, principal, client_id)
        cap = REQUEST_THROTTLE_CAP_MS if quota_type == REQUEST else None
        return self._sensor(quota_type, tags, now).rate.record_and_throttle(value, now, quota, cap)

    def unrecord(self, quota_type: str, principal: str, client_id: str | None, value: float) -> None:
        """Take back a record (a throttled Fetch is answered empty: its bytes do not count)."""
        if self.enabled(quota_type):
            now = self.now_ms()
            tags, _quota = self._resolve(quota_type, principal, client_id)
            self._sensor(quota_type, tags, now).rate.record(-value, now)

    def fetch_cap(self, principal: str, client_id: str | None) -> int | None:
        """The most bytes one Fetch may return without being throttled on its own (None:
        no consumer quota applies)."""
        if not self.enabled(FETCH):
            return None
        _tags, quota = self._resolve(FETCH, principal, client_id)
        return None if quota is None else int(max_value_in_window(quota))

    def throttled(self, quota_type: str, principal: str, client_id: str | None, throttle_ms: int) -> None:
        """A response was throttled ``throttle_ms`` for this quota type (the throttle-time metric)."""
        if throttle_ms > 0 and self.enabled(quota_type):
            now = self.now_ms()
            tags, _quota = self._resolve(quota_type, principal, client_id)
            self._sensor(quota_type, tags, now).throttle.record(throttle_ms, now)

    def take_mutations(self, principal: str, client_id: str | None, permits: int, *,
                       strict: bool) -> tuple[bool, int]:
        """Charge ``permits`` partition mutations: (admitted, throttle ms); see
        ``TokenBucket.take``. Always admitted when no mutation quota applies."""
        if not self.enabled(MUTATION):
            return True, 0
        now = self.now_ms()
        tags, quota = self._resolve(MUTATION, principal, client_id)
        sensor = self._sensor(MUTATION, tags, now)
        if quota is None:
            sensor.rate.record(permits, now)
            return True, 0
        admitted, throttle = sensor.bucket.take(permits, now, quota, strict=strict)
        if admitted:
            sensor.rate.record(permits, now)
        return admitted, throttle

    def give_back_mutations(self, principal: str, client_id: str | None, permits: int) -> None:
        """Return the permits of a mutation that failed after it was charged."""
        if permits <= 0 or not self.enabled(MUTATION):
            return
        now = self.now_ms()
        tags, quota = self._resolve(MUTATION, principal, client_id)
        sensor = self._sensor(MUTATION, tags, now)
        sensor.rate.record(-permits, now)
        if quota is not None:
            sensor.bucket.give_back(permits, now, quota)

    def views(self) -> list[SensorView]:
        """Every live window, for ``/metrics``."""
        now = self.now_ms()
        entries = self._entries()
        out = []
        for (qt, user, client), s in sorted(self._sensors.items()):
            quota = cq.quota_for_tags(entries, KEYS[qt], user, client)
            tokens = s.bucket.level(now, quota) if qt == MUTATION and quota is not None else None
            out.append(SensorView(qt, user, client, s.rate.rate(now), s.throttle.average(now), quota, tokens))
        return out
