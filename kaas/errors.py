"""The exceptions the domain, storage and handler layers raise."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class KaasError(Exception):
    """A policy failure that maps to a Kafka protocol error code.

    Args:
        code: the kio ErrorCode the handler puts into the response.
        message: optional human text for logs and error_message fields.
    """

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class NotInTransaction(KaasError):
    """KIP-890 verification: a transactional batch for a partition its transaction does not
    hold (or no transaction is ongoing). INVALID_TXN_STATE as raised; Produce v11+ answers
    TRANSACTION_ABORTABLE instead, as Apache's broker does for clients that know the code."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(ErrorCode.invalid_txn_state, message)


class CorruptState(Exception):
    """A state file on the shared volume failed to parse. Never reset: report and refuse."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"corrupt state file {path}: {reason}")
        self.path = path
        self.reason = reason


class CloseConnection(Exception):
    """The remote broke the protocol (or may not be served on this connection): log once
    and close the connection."""


class PeerUnavailable(Exception):
    """A request to a peer broker failed: it is unknown, unreachable, closed the connection
    or did not answer in time. Its outcome must not be counted on."""
