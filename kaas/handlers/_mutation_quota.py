"""The controller mutation quota (KIP-599) of one CreateTopics, CreatePartitions or
DeleteTopics request: each topic is charged its partitions (created, added or deleted)
before it is handled, and given them back when it then fails, as Apache's controller
charges a topic once it is validated.

From CreateTopics v6, CreatePartitions v3 and DeleteTopics v5 the quota is *strict*: a
topic that finds the client's token bucket empty is answered THROTTLING_QUOTA_EXCEEDED
with the time to wait; older versions are never refused, only throttled. A peer broker's
forwarded request is not charged again (the broker the client asked charged it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas.broker.quota_sensors import MUTATION
from kaas.wire.build import shallow_dict
from kaas.wire.codec import PEER_CLIENT_PREFIX

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from kaas.handlers.context import Context

__all__ = ["EXCEEDED_MESSAGE", "REFUSED", "STRICT_FROM", "Mutations"]

STRICT_FROM = {19: 6, 37: 3, 20: 5}  # CreateTopics, CreatePartitions, DeleteTopics
EXCEEDED_MESSAGE = "The throttling quota has been exceeded."
REFUSED = {"error_code": ErrorCode.throttling_quota_exceeded, "error_message": EXCEEDED_MESSAGE}
"""The answer fields of a topic the strict quota refused."""


class Mutations:
    """One request's charges."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.strict = ctx.api_version >= STRICT_FROM[ctx.api_key]
        self.exempt = (ctx.client_id or "").startswith(PEER_CLIENT_PREFIX)
        self.charged: dict[str, int] = {}
        self._throttle_ms = 0
        self._decided_ms = 0

    def admit(self, topic: str, permits: int) -> bool:
        """Charge ``topic``'s ``permits``: False when a strict quota refuses it (answer
        THROTTLING_QUOTA_EXCEEDED, ``EXCEEDED_MESSAGE``)."""
        if self.exempt or permits <= 0:
            return True
        ctx = self.ctx
        quotas = ctx.broker.quotas
        admitted, throttle = quotas.take_mutations(ctx.principal, ctx.client_id, permits, strict=self.strict)
        if throttle > 0:
            self._throttle_ms, self._decided_ms = throttle, quotas.now_ms()
        if admitted:
            self.charged[topic] = self.charged.get(topic, 0) + permits
        return admitted

    def failed(self, topic: str) -> None:
        """``topic`` was charged but its mutation failed: give its permits back."""
        permits = self.charged.pop(topic, 0)
        if permits:
            self.ctx.broker.quotas.give_back_mutations(self.ctx.principal, self.ctx.client_id, permits)

    def settle_answer(self, answer: dict[str, object] | ResponsePayload, field: str) -> None:
        """``settle`` from an answer (a dict, or the kio response a controller sent back)
        whose list ``field`` holds each topic's ``name`` and ``error_code``."""
        entries = (answer if isinstance(answer, dict) else shallow_dict(answer))[field]
        assert isinstance(entries, (list, tuple))  # (the answer's list of topics: dicts, or kio entities)
        self.settle([(e["name"], e["error_code"]) if isinstance(e, dict) else (e.name, e.error_code)
                     for e in entries])

    def settle(self, results: list[tuple[str | None, int]]) -> None:
        """Give back what failed (``results``: (topic, error code) as answered) and ask
        for the throttle time left (Apache deducts the time since it was decided)."""
        for topic, code in results:
            if topic is not None and code != ErrorCode.none:
                self.failed(topic)
        if self._throttle_ms > 0:
            left = self._throttle_ms - (self.ctx.broker.quotas.now_ms() - self._decided_ms)
            self.ctx.throttle(MUTATION, max(0, left))

