"""Quota arithmetic as Apache Kafka 4.4 does it (KIP-13, KIP-124, KIP-219, KIP-599): sampled
windows, the rate over them, the throttle time that brings a client back to its quota, and
the token bucket of the controller mutation quota. Times are milliseconds handed in by the
caller (``now_ms``); nothing here reads a clock.

- ``Samples`` is Apache's ``SampledStat``: ``samples`` windows of ``window_ms`` each (one
  extra kept), a window starting at the first record past the previous one's end; windows
  whose last record is ``samples * window_ms`` old are reset when measured.
- ``Samples.rate`` is Apache's ``Rate``: the sum over the windows divided by the time since
  the oldest window started, padded to ``samples - 1`` whole windows while fewer have passed
  (a new client is measured over at least 10 s with the defaults).
- ``throttle_ms`` is ``QuotaUtils.throttleTime``: with O the observed rate and T the quota
  over a window W, the delay X with ``O * W / (W + X) = T``, i.e. ``(O - T) / T * W``.
- ``TokenBucket`` holds at most ``samples * window`` seconds of the quota; a strict quota
  refuses while the tokens are below zero and admits the mutation that takes them below.

Invariants:
    - a window's sum is the sum of what was recorded in it (an "unrecord" is a negative
      record, as Apache's);
    - ``rate`` never divides by less than ``(samples - 1) * window_ms``;
    - ``throttle_ms`` is 0 at or under the quota and grows with the excess.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["QUOTA_WINDOW", "THROTTLE_AVG_WINDOW", "Samples", "TokenBucket", "WindowConfig", "max_value_in_window",
           "mutation_throttle_ms", "throttle_ms"]


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """``quota.window.num`` windows of ``quota.window.size.seconds`` (Apache: 11 of 1 s)."""

    samples: int = 11
    window_ms: int = 1000


QUOTA_WINDOW = WindowConfig()
THROTTLE_AVG_WINDOW = WindowConfig(2, 30_000)
"""Apache's default metric config (2 samples of 30 s): the window of the throttle-time average."""


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_ms: int
    value: float = 0.0
    count: int = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_ms = now_ms
        self.value = 0.0
        self.count = 0


@dataclass(slots=True)
class Samples:
    """One sampled statistic (a sum and an event count per window)."""

    config: WindowConfig = QUOTA_WINDOW
    _samples: list[_Sample] = field(default_factory=list)
    _current: int = 0

    def _now_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return self._samples[self._current]

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` at ``now_ms`` (a negative value takes a record back)."""
        sample = self._now_sample(now_ms)
        if now_ms - sample.start_ms >= self.config.window_ms:
            self._current = (self._current + 1) % (self.config.samples + 1)
            if self._current >= len(self._samples):
                sample = _Sample(now_ms, now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.count += 1
        sample.last_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire = self.config.samples * self.config.window_ms
        for sample in self._samples:
            if now_ms - sample.last_ms >= expire:
                sample.reset(now_ms)

    def total(self, now_ms: int) -> float:
        """The sum over the windows still measured."""
        self._purge(now_ms)
        return sum(s.value for s in self._samples)

    def average(self, now_ms: int) -> float:
        """The mean of the values recorded in the windows still measured (0 when none)."""
        self._purge(now_ms)
        count = sum(s.count for s in self._samples)
        return sum(s.value for s in self._samples) / count if count else 0.0

    def window_size_ms(self, now_ms: int) -> int:
        """The time the rate is measured over (Apache's ``Rate.windowSize``)."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full, least = elapsed // self.config.window_ms, self.config.samples - 1
        if full < least:
            elapsed += (least - full) * self.config.window_ms
        return elapsed

    def rate(self, now_ms: int) -> float:
        """The sum per second over the measured windows."""
        size = self.window_size_ms(now_ms)
        return self.total(now_ms) / (size / 1000) if size > 0 else 0.0

    def record_and_throttle(self, value: float, now_ms: int, quota: float | None, cap_ms: int | None = None) -> int:
        """Record ``value``, then the throttle time the rate now asks for (0: within the
        quota or no quota), capped at ``cap_ms`` when given (Apache caps the request quota
        at one window, the byte rates not at all)."""
        self.record(value, now_ms)
        if quota is None:
            return 0
        observed = self.rate(now_ms)
        if observed <= quota:
            return 0
        delay = throttle_ms(observed, quota, self.window_size_ms(now_ms))
        return delay if cap_ms is None else min(delay, cap_ms)

    def idle_since(self) -> int | None:
        """The time of the last record (None: never recorded)."""
        return max((s.last_ms for s in self._samples), default=None)


def throttle_ms(observed: float, quota: float, window_ms: int) -> int:
    """The delay that brings ``observed`` (a rate over ``window_ms``) down to ``quota``:
    ``round((observed - quota) / quota * window_ms)``, 0 when within the quota."""
    if observed <= quota:
        return 0
    return round((observed - quota) / quota * window_ms)


def max_value_in_window(quota: float, config: WindowConfig = QUOTA_WINDOW) -> float:
    """The most one record may hold without being throttled on its own (Apache's
    ``maxValueInQuotaWindow``, which caps a throttled client's fetch size)."""
    return quota * (config.samples - 1) * config.window_ms / 1000


def mutation_throttle_ms(tokens: float, quota: float) -> int:
    """The time a token bucket at ``tokens`` (< 0) takes to refill to zero at ``quota``/s."""
    return max(0, round(-tokens / quota * 1000))


@dataclass(slots=True)
class TokenBucket:
    """Apache's ``TokenBucket`` for ``controller_mutation_rate``: refilled at the quota per
    second up to a burst of ``samples * window`` seconds' worth; starts full."""

    config: WindowConfig = QUOTA_WINDOW
    tokens: float = 0.0
    last_ms: int | None = None

    def _refill(self, now_ms: int, quota: float) -> None:
        burst = self.config.samples * self.config.window_ms / 1000 * quota
        if self.last_ms is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * max(0, now_ms - self.last_ms) / 1000)
        self.last_ms = now_ms

    def level(self, now_ms: int, quota: float) -> float:
        """The tokens now."""
        self._refill(now_ms, quota)
        return self.tokens

    def take(self, permits: float, now_ms: int, quota: float, *, strict: bool) -> tuple[bool, int]:
        """Charge ``permits`` (partitions created or deleted): (admitted, throttle ms).

        Strict (the versions that know THROTTLING_QUOTA_EXCEEDED): refused, nothing taken,
        while the tokens are below zero; else taken, even into the negative. Permissive
        (older versions): always taken; the throttle is the time back to zero.
        """
        self._refill(now_ms, quota)
        burst = self.config.samples * self.config.window_ms / 1000 * quota
        if strict:
            if self.tokens < 0:
                return False, mutation_throttle_ms(self.tokens, quota)
            self.tokens = min(burst, self.tokens - permits)
            return True, 0
        self.tokens = min(burst, self.tokens - permits)
        return True, mutation_throttle_ms(self.tokens, quota) if self.tokens < 0 else 0

    def give_back(self, permits: float, now_ms: int, quota: float) -> None:
        """Return ``permits`` taken for a mutation that then failed."""
        self._refill(now_ms, quota)
        burst = self.config.samples * self.config.window_ms / 1000 * quota
        self.tokens = min(burst, self.tokens + permits)
