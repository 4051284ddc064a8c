"""What the parts of the transaction coordinator share: the clock, failpoints, the
coordinator epoch, the once-only report of an unreadable file, the event counters."""

from __future__ import annotations

from collections.abc import Awaitable, Generator

import structlog
from kio.schema.errors import ErrorCode

from kaas import failpoints
from kaas.coord.ports import TxnBroker
from kaas.errors import KaasError

log = structlog.get_logger()

Stats = dict[str, int]
"""Event counters (``TxnCoordinator.stats``; the metrics endpoint reads them)."""


def new_stats() -> Stats:
    return {"markers_written": 0, "entries_applied": 0, "fences_applied": 0,
            "reaped": 0, "reconciled": 0, "markers_sent": 0, "marker_requests_applied": 0,
            "answered_before_markers": 0, "offset_hooks_sent": 0, "offset_hooks_applied": 0,
            "offset_hooks_beside_markers": 0, "expired_ids": 0, "slot_writes_shared": 0,
            # EndTxn requests by the transaction version their version implies (v5+: TV2)
            "end_txn_tv1": 0, "end_txn_tv2": 0}


def hit(name: str, **context: object) -> Awaitable[None]:
    """Fire a named failpoint (design section 9; ``context`` for its ``match``); an
    ``error`` action becomes the retriable COORDINATOR_NOT_AVAILABLE, like a failing disk
    would. ``await hit(...)``: with nothing armed, an awaitable that is done at once (a
    transaction passes a dozen points; a coroutine per pass cost more than the check)."""
    if not failpoints.ARMED:
        return _NOTHING
    return _hit(name, context)


class _Nothing:
    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        yield from ()


_NOTHING = _Nothing()


async def _hit(name: str, context: dict[str, object]) -> None:
    try:
        await failpoints.hit_async(name, **context)
    except OSError as exc:
        raise KaasError(ErrorCode.coordinator_not_available, str(exc)) from None


def coordinator_epoch(broker: TxnBroker) -> int:
    """The coordinator epoch written into markers: the controller epoch, else 0."""
    value = broker.controller_epoch
    return value if 0 <= value < 2**31 else 0


UnreadableKey = tuple[str, int | str]
"""``("slot", n)`` or ``("marker", path)``."""


class Unreadable:
    """Files found unreadable (a slot file, a marker queue entry), each logged once per
    distinct error."""

    def __init__(self) -> None:
        self._errors: dict[UnreadableKey, str] = {}

    def report(self, key: UnreadableKey, exc: Exception) -> None:
        if self._errors.get(key) != str(exc):
            self._errors[key] = str(exc)
            log.error("txn_state_unreadable", key=str(key), error=str(exc))

    def readable_again(self, key: UnreadableKey) -> bool:
        """Forget ``key``; True when it had been reported."""
        return self._errors.pop(key, None) is not None
