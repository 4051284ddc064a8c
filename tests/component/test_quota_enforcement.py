"""Client quota enforcement in one process on trio's MockClock (the windows run on the
broker's ``TrioClock``): a real Broker, connection, dispatch and handlers. A Produce over
``producer_byte_rate`` answers the throttle Apache's formula gives and the connection
reads nothing until it has passed; a Fetch over ``consumer_byte_rate`` is answered empty
(its bytes not counted) and one Fetch never returns more than a quota window; the request
quota throttles every API, capped at one window; a client id without a quota runs free."""

from __future__ import annotations

import pytest
import trio
from kio.schema.errors import ErrorCode

from kaas.clock import TrioClock
from kaas.wire import batch as wb
from tests.component.test_client_quotas import alter, entry
from tests.component.test_connection import create_topic, fetch, metadata, open_broker_in, open_client, produce


@pytest.fixture(autouse=True)
def stream_kind(monkeypatch):  # (memory streams only: the mock clock drives the mute)
    from tests.component.test_connection import Client

    monkeypatch.setattr(Client, "kind", "memory")


async def set_quota(client, key: str, value: float, client_id: str = "component") -> None:
    r = await client.call(alter(entry([("client-id", client_id)], (key, value, False))))
    assert [e.error_code for e in r.entries] == [ErrorCode.none]


def value_batch(n: int) -> bytes:
    return wb.build_batch(base_timestamp=1_000, records=[(None, b"x" * n)])


async def test_produce_over_the_byte_rate_is_throttled_and_muted(shm_path, autojump_clock):
    async with open_broker_in(shm_path, clock=TrioClock(autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        assert (await client.call(create_topic("pq", 1))).topics[0].error_code == ErrorCode.none
        await set_quota(client, "producer_byte_rate", 1000)
        r = await client.call(produce("pq", 0, value_batch(5_000)))
        assert r.throttle_time.total_seconds() == 0  # ~5.1 KB over the first 10 s: within 1 KB/s
        t0 = trio.current_time()
        r = await client.call(produce("pq", 0, value_batch(15_000)))
        # ~20.3 KB over 10 s: (2.03 - 1) / 1 * 10 s
        throttle = r.throttle_time.total_seconds()
        assert 10.0 < throttle < 10.6, throttle
        assert r.responses[0].partition_responses[0].error_code == ErrorCode.none  # appended all the same
        await client.call(metadata())  # read only once the throttle is over
        assert trio.current_time() - t0 >= throttle - 0.002  # (the answer rounds to a ms)
        # the window's tags: the client id alone (a client-id quota)
        (view,) = [v for v in broker.quotas.views() if v.quota_type == "Produce"]
        assert (view.user, view.client_id, view.quota) == ("", "component", 1000.0)
        assert view.throttle_time_ms == pytest.approx(throttle * 1000, abs=1)


async def test_fetch_over_the_byte_rate_is_answered_empty(shm_path, autojump_clock):
    async with open_broker_in(shm_path, clock=TrioClock(autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        assert (await client.call(create_topic("fq", 1))).topics[0].error_code == ErrorCode.none
        for _ in range(8):
            await client.call(produce("fq", 0, value_batch(3_000)))
        await set_quota(client, "consumer_byte_rate", 1000)
        r = await client.call(fetch("fq", 0, 0))
        (part,) = r.responses[0].partitions
        assert 0 < len(part.records) <= 10_000  # one window of the quota (min one batch)
        assert r.throttle_time.total_seconds() == 0
        r = await client.call(fetch("fq", 0, 3))
        assert r.responses == () and r.throttle_time.total_seconds() > 0
        (view,) = [v for v in broker.quotas.views() if v.quota_type == "Fetch"]
        # the empty answer's bytes were taken back: only the first answer counts
        assert view.rate * 10 < 10_500


async def test_request_quota_throttles_any_api_capped_at_one_window(shm_path, autojump_clock):
    async with open_broker_in(shm_path, clock=TrioClock(autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        await set_quota(client, "request_percentage", 0.0001)  # 1 us of thread time a second
        throttles = []
        for _ in range(3):
            r = await client.call(metadata())
            throttles.append(r.throttle_time.total_seconds())
        assert all(0 < t <= 1.0 for t in throttles[1:]), throttles  # (capped at one window)
        (view,) = [v for v in broker.quotas.views() if v.quota_type == "Request"]
        assert view.rate > 0.0001


async def test_a_client_id_without_a_quota_runs_free(shm_path, autojump_clock):
    async with open_broker_in(shm_path, clock=TrioClock(autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        assert (await client.call(create_topic("free", 1))).topics[0].error_code == ErrorCode.none
        await set_quota(client, "producer_byte_rate", 1000, client_id="someone-else")
        for _ in range(3):
            r = await client.call(produce("free", 0, value_batch(20_000)))
            assert r.throttle_time.total_seconds() == 0
        (view,) = [v for v in broker.quotas.views() if v.quota_type == "Produce"]
        assert (view.client_id, view.quota) == ("component", None)  # counted, unlimited
