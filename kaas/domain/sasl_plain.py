"""SASL/PLAIN (RFC 4616) messages: ``[authzid] NUL authcid NUL passwd``, UTF-8.

Invariants:
    - exactly two NUL separators; user name and password non-empty;
    - an authorisation id, when given, must be the user itself (Apache's
      ``PlainSaslServer`` refuses acting on behalf of another user);
    - ``PlainError`` texts are for the broker's log, never the password.
"""

from __future__ import annotations

from dataclasses import dataclass

MECHANISM = "PLAIN"


class PlainError(Exception):
    """The PLAIN message is malformed or names another authorisation id."""


@dataclass(frozen=True, slots=True)
class PlainCredentials:
    username: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"PlainCredentials(username={self.username!r})"


def parse_plain(message: bytes) -> PlainCredentials:
    """Parse one SASL/PLAIN client message.

    Raises:
        PlainError: not UTF-8, not three NUL-separated fields, an empty user or password,
            or an authorisation id other than the user.
    """
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise PlainError("not UTF-8") from None
    fields = text.split("\0")
    if len(fields) != 3:
        raise PlainError("expected authzid NUL user NUL password")
    authzid, username, password = fields
    if not username or not password:
        raise PlainError("empty user name or password")
    if authzid and authzid != username:
        raise PlainError("authorisation id differs from the user")
    return PlainCredentials(username, password)
