"""What a handler is given besides its request (``Context``: the broker, the request's
header, the connection's session and quotas) and what it returns (``Answer``).

Every handler module imports this module; it imports no handler (the registry,
``handlers.registry``, imports them, each at its API's first request), so the package has
no import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from kaas.handlers.session import Session

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from kaas.aio import Turn
    from kaas.broker import Broker

Answer: TypeAlias = "dict[str, object] | ResponsePayload | bytes | None"
"""What a handler returns: a dict (``wire.build`` makes it the response class of the
request's version), a kio response (a controller's, forwarded as decoded), a body
encoded once (``codec.encode_body``), or None (no response: Produce acks=0)."""

ApiRange: TypeAlias = tuple[int, int, int]
"""An API the broker serves: (api_key, min_version, max_version)."""


@dataclass(slots=True)
class Context:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    lapses: int = 0  # the broker's lease lapses when the connection was accepted
    session: Session = field(default_factory=Session)  # the connection's security state
    # a pipelined Produce's place among its connection's Produce requests: its appends wait
    # for the earlier ones' (net.connection gives it; None: answered alone, in order)
    turn: Turn | None = None
    # client quotas: the throttle time a handler's own quota (a byte rate, the mutation
    # rate) asks for, and that quota's type (``broker.quota_sensors``); dispatch adds the
    # request quota, sets the answer's throttle_time_ms and mutes the connection
    throttle_ms: int = 0
    throttle_type: str | None = None
    request_size: int = 0  # the request's bytes on the wire (the producer byte rate counts them)
    # the APIs the registry serves, which ApiVersions advertises (dispatch gives them: the
    # handler cannot import the registry, which imports it)
    api_keys: tuple[ApiRange, ...] = ()

    @property
    def principal(self) -> str:
        return self.session.principal

    def throttle(self, quota_type: str, throttle_ms: int) -> None:
        """Ask for ``throttle_ms`` on behalf of ``quota_type`` (the longest ask wins)."""
        if throttle_ms > self.throttle_ms:
            self.throttle_ms, self.throttle_type = throttle_ms, quota_type
