"""Run a real broker's membership tick by hand (no loops started): one ``Membership`` per
broker, kept across calls, as ``tasks.serve_broker`` keeps one per process."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from kaas.broker import Broker
from kaas.tasks.membership import Membership

_TICKERS: WeakKeyDictionary[Broker, Membership] = WeakKeyDictionary()


def membership(broker: Broker) -> Membership:
    tk = _TICKERS.get(broker)
    if tk is None:
        tk = _TICKERS[broker] = Membership(broker)
    return tk


async def tick(broker: Broker, *, beat: bool = True) -> None:
    await membership(broker)._tick(beat=beat)
