"""What one connection knows of its client's security (issue 21): the listener it came in
on, whether it has authenticated, and as whom. Created by ``net.connection`` per
connection and handed to every handler as ``ctx.session``; the SASL handlers change it,
the authoriser reads ``principal``, ``dispatch`` reads ``awaiting_raw_token``. A PLAINTEXT
connection is authenticated from the start as ``User:ANONYMOUS``, as in Apache Kafka."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kaas.domain.scram import ScramServer

ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class Session:
    listener: str = "PLAINTEXT"  # the listener's name
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    principal: str = ANONYMOUS
    authenticated: bool = True  # False on a SASL listener until SaslAuthenticate succeeds
    peer_host: str = ""
    mechanism: str | None = None  # the SASL mechanism SaslHandshake chose
    # the SASL exchange in progress: SCRAM's pure machine, or the one token PLAIN and
    # OAUTHBEARER await (``_sasl.PLAIN_PENDING``, ``_sasl.OAUTH_PENDING``)
    sasl: ScramServer | str | None = None
    raw_tokens: bool = False  # SaslHandshake v0 chose the mechanism: its tokens come unframed
    reauth_deadline: float | None = None  # KIP-368: trio time the session must re-authenticate by
    close_reason: str | None = None  # set by a handler: close the connection after this response
    conn_id: int = 0  # the connection's number in this process (0: no connection, as in tests)
    # client quotas (KIP-219): the trio time until which the connection reads no request
    # (set when a throttled answer is decided; ``net.connection`` waits it out)
    muted_until: float = 0.0

    @property
    def awaiting_raw_token(self) -> bool:
        """Whether the next frame is a raw SASL token, not a Kafka request: after a
        SaslHandshake v0, until its exchange ends (Apache's pre-KIP-152 framing: each
        token a bare size-prefixed frame, no request header, answered the same way)."""
        return self.raw_tokens and self.sasl is not None
