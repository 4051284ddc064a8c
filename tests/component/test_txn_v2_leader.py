"""transaction.version 2 on the partition leader's and the group coordinator's side
(KIP-890 part 2), over the wire to a real in-process broker: Produce v12/v13 adds its
partitions to the transaction itself, TxnOffsetCommit v5 adds its group, and their errors
are Apache 4.4's. (The coordinator's side of TV2, EndTxn v5 and its epoch bump, is not
used here: these transactions end with EndTxn v4.)"""

from __future__ import annotations

import trio
from kio.schema.errors import ErrorCode as E

from kaas.clock import TrioClock
from kaas.domain.routing import txn_slot
from kaas.domain.txn import TxnState
from kaas.wire import batch as wb
from kaas.wire import codec
from kaas.wire import records as wr
from kaas.wire.build import build
from tests.component.test_connection import open_broker_in, open_client

PRODUCE, FETCH, INIT_PID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_COMMIT, OFFSET_FETCH = 0, 1, 22, 24, 25, 26, 28, 9


async def create(broker, topic: str, n: int) -> None:
    """Create ``topic`` and wait until the broker leads its ``n`` partitions."""
    broker.topics.create(topic, n)
    broker.cluster.wake()
    with trio.fail_after(10):
        while not all((topic, i) in broker.partitions for i in range(n)):
            await trio.sleep(0.01)


def req(api_key: int, version: int, body: dict) -> object:
    return build(codec.request_class(api_key, version), body)


def batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    """A transactional batch; each record's key repeats its value (``read`` reads keys back)."""
    return wb.build_batch(attributes=wb.ATTR_TRANSACTIONAL, base_timestamp=1000, producer_id=pid,
                          producer_epoch=epoch, base_sequence=seq, records=[(v, v) for v in values])


def produce(version: int, txn_id: str | None, parts: dict[tuple[str, int], bytes], topic_ids=None) -> object:
    topics: dict[str, list[dict]] = {}
    for (topic, index), records in parts.items():
        topics.setdefault(topic, []).append({"index": index, "records": records})
    return req(PRODUCE, version, {"transactional_id": txn_id, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": t, "topic_id": (topic_ids or {}).get(t), "partition_data": ps} for t, ps in topics.items()]})


def codes(resp) -> dict[tuple[str, int], E]:
    return {(getattr(t, "name", None) or str(t.topic_id), p.index): p.error_code
            for t in resp.responses for p in t.partition_responses}


async def init(client, txn_id: str) -> tuple[int, int]:
    r = await client.call(req(INIT_PID, 5, {"transactional_id": txn_id, "transaction_timeout": 60_000,
                                            "producer_id": -1, "producer_epoch": -1}))
    assert r.error_code == E.none
    return r.producer_id, r.producer_epoch


async def end(client, txn_id: str, pid: int, epoch: int, commit: bool) -> E:
    r = await client.call(req(END_TXN, 4, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                           "committed": commit}))
    return r.error_code


def entry(broker, txn_id: str):
    slot = txn_slot(txn_id)
    cached = broker.txn.slots.cache.get(slot)
    return (cached if cached is not None else broker.txn.store.load(slot)).get(txn_id)


async def read(client, topic: str, index: int, isolation: int) -> list[bytes]:
    """The values of every data record of the partition that ``isolation`` shows."""
    r = await client.call(req(FETCH, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": topic, "partitions": [{"partition": index, "fetch_offset": 0, "current_leader_epoch": -1,
                                                     "log_start_offset": -1, "last_fetched_epoch": -1,
                                                     "partition_max_bytes": 1 << 20}]}]}))
    [p] = r.responses[0].partitions
    aborted: dict[int, int] = {}  # pid -> the first offset of its first aborted transaction here
    for a in p.aborted_transactions or ():
        aborted[a.producer_id] = min(a.first_offset, aborted.get(a.producer_id, a.first_offset))
    out: list[bytes] = []
    data, pos = bytes(p.records or b""), 0
    while pos + 61 <= len(data):
        h = wb.parse_header(data, pos)
        raw = data[pos:pos + h.size]
        if not h.is_control and not (isolation == 1 and h.base_offset >= aborted.get(h.producer_id, 1 << 62)):
            out.extend(rec.key for rec in wr.records(raw, h))
        pos += h.size
    return out


async def test_produce_v12_adds_its_partitions(shm_path, thread_safe_autojump_clock):
    """A TV2 producer sends no AddPartitionsToTxn: its first batch for each partition adds
    the partition, several in one request; the next batches append at once; a commit
    shows them and an abort hides them, as for a TV1 producer."""
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        await create(broker, "t", 3)
        pid, epoch = await init(client, "tv2-a")
        r = await client.call(produce(12, "tv2-a", {("t", 0): batch(pid, epoch, 0, [b"a0"]),
                                                    ("t", 1): batch(pid, epoch, 0, [b"a1"])}))
        assert codes(r) == {("t", 0): E.none, ("t", 1): E.none}
        meta = entry(broker, "tv2-a")
        assert meta.state is TxnState.Ongoing and meta.partitions == {("t", 0), ("t", 1)}
        r = await client.call(produce(12, "tv2-a", {("t", 0): batch(pid, epoch, 1, [b"a0b"]),
                                                    ("t", 2): batch(pid, epoch, 0, [b"a2"])}))
        assert codes(r) == {("t", 0): E.none, ("t", 2): E.none}
        assert entry(broker, "tv2-a").partitions == {("t", 0), ("t", 1), ("t", 2)}
        assert await end(client, "tv2-a", pid, epoch, True) == E.none
        # the next transaction: aborted
        r = await client.call(produce(12, "tv2-a", {("t", 1): batch(pid, epoch, 1, [b"x1"])}))
        assert codes(r) == {("t", 1): E.none}
        assert await end(client, "tv2-a", pid, epoch, False) == E.none
        with trio.fail_after(10):
            while entry(broker, "tv2-a").state is not TxnState.CompleteAbort:
                await trio.sleep(0.01)
        assert await read(client, "t", 0, 1) == [b"a0", b"a0b"]
        assert await read(client, "t", 1, 1) == [b"a1"]
        assert await read(client, "t", 1, 0) == [b"a1", b"x1"]
        assert await read(client, "t", 2, 1) == [b"a2"]


async def test_produce_v13_names_topics_by_id(shm_path, thread_safe_autojump_clock):
    import uuid
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        await create(broker, "t", 1)
        tid = broker.topics.get("t").topic_id
        pid, epoch = await init(client, "tv2-id")
        unknown = uuid.UUID(int=7)
        r = await client.call(produce(13, "tv2-id", {("t", 0): batch(pid, epoch, 0, [b"v"]),
                                                     ("u", 0): batch(pid, epoch, 0, [b"w"])},
                                      topic_ids={"t": tid, "u": unknown}))
        assert codes(r) == {(str(tid), 0): E.none, (str(unknown), 0): E.unknown_topic_id}
        assert entry(broker, "tv2-id").partitions == {("t", 0)}
        assert await end(client, "tv2-id", pid, epoch, True) == E.none
        assert await read(client, "t", 0, 1) == [b"v"]


async def test_produce_v12_errors(shm_path, thread_safe_autojump_clock):
    """As Apache's leader answers a TV2 add: a stale epoch INVALID_PRODUCER_EPOCH (the
    coordinator's PRODUCER_FENCED), a producer id not the id's INVALID_PRODUCER_ID_MAPPING,
    two producers in one request INVALID_PRODUCER_ID_MAPPING everywhere; below v12 a
    partition never added is still TRANSACTION_ABORTABLE (v11)."""
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        await create(broker, "t", 2)
        pid, epoch = await init(client, "tv2-e")
        pid2, epoch2 = await init(client, "tv2-e")  # a new session: epoch + 1 fences the first
        assert (pid2, epoch2) == (pid, epoch + 1)
        r = await client.call(produce(12, "tv2-e", {("t", 0): batch(pid, epoch, 0, [b"z"])}))
        assert codes(r) == {("t", 0): E.invalid_producer_epoch}
        r = await client.call(produce(12, "tv2-e", {("t", 0): batch(pid + 99, 0, 0, [b"z"])}))
        assert codes(r) == {("t", 0): E.invalid_producer_id_mapping}
        r = await client.call(produce(12, "tv2-e", {("t", 0): batch(pid2, epoch2, 0, [b"z"]),
                                                    ("t", 1): batch(pid2 + 1, epoch2, 0, [b"z"])}))
        assert codes(r) == {("t", 0): E.invalid_producer_id_mapping, ("t", 1): E.invalid_producer_id_mapping}
        r = await client.call(produce(11, "tv2-e", {("t", 0): batch(pid2, epoch2, 0, [b"z"])}))
        assert codes(r) == {("t", 0): E.transaction_abortable}
        assert entry(broker, "tv2-e").state is TxnState.Empty
        assert await read(client, "t", 0, 0) == []


async def test_produce_v12_waits_out_a_finishing_transaction(shm_path, thread_safe_autojump_clock, monkeypatch):
    """The last transaction's EndTxn still being finished: the leader asks again every
    20 ms for up to 100 ms, then answers CONCURRENT_TRANSACTIONS (a TV2 client retries
    it); once finished, the next add begins the next transaction."""
    from kaas.coord.txn import coordinator as coord_mod
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        await create(broker, "t", 1)
        pid, epoch = await init(client, "tv2-c")
        r = await client.call(produce(12, "tv2-c", {("t", 0): batch(pid, epoch, 0, [b"1"])}))
        assert codes(r) == {("t", 0): E.none}
        monkeypatch.setattr(coord_mod, "BEGIN_WAIT_S", 0)
        release = trio.Event()
        settled = broker.txn.finisher.settled

        async def held(txn_id, timeout):
            return release.is_set() and await settled(txn_id, timeout)

        monkeypatch.setattr(broker.txn.finisher, "settled", held)
        assert await end(client, "tv2-c", pid, epoch, True) == E.concurrent_transactions
        monkeypatch.setattr(broker.txn.finisher, "settled", settled)
        assert await end(client, "tv2-c", pid, epoch, True) == E.none
        monkeypatch.setattr(broker.txn.finisher, "settled", held)
        adds = broker.txn_adder.stats["retries"]
        r = await client.call(produce(12, "tv2-c", {("t", 0): batch(pid, epoch, 1, [b"2"])}))
        assert codes(r) == {("t", 0): E.concurrent_transactions}
        assert broker.txn_adder.stats["retries"] - adds == 5  # at 0, 20, 40, 60, 80 ms: then 100 ms are up
        release.set()
        monkeypatch.setattr(broker.txn.finisher, "settled", settled)
        r = await client.call(produce(12, "tv2-c", {("t", 0): batch(pid, epoch, 1, [b"2"])}))
        assert codes(r) == {("t", 0): E.none}


async def test_txn_offset_commit_v5_adds_its_group(shm_path, thread_safe_autojump_clock):
    """TxnOffsetCommit v5 without AddOffsetsToTxn: the group joins the transaction, the
    offsets are staged, and the commit makes them visible; v4 without AddOffsetsToTxn is
    still TRANSACTION_ABORTABLE; a fenced epoch is INVALID_PRODUCER_EPOCH."""
    async with open_broker_in(shm_path, clock=TrioClock(thread_safe_autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery) as client:
        await create(broker, "in", 1)
        pid, epoch = await init(client, "tv2-g")

        def commit(version: int, p: int, e: int, offset: int) -> object:
            return req(TXN_COMMIT, version, {
                "transactional_id": "tv2-g", "group_id": "g", "producer_id": p, "producer_epoch": e,
                "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": "in", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                          "committed_leader_epoch": -1,
                                                          "committed_metadata": None}]}]})

        r = await client.call(commit(4, pid, epoch, 5))
        assert r.topics[0].partitions[0].error_code == E.transaction_abortable
        assert entry(broker, "tv2-g").state is TxnState.Empty
        r = await client.call(commit(5, pid, epoch, 5))
        assert r.topics[0].partitions[0].error_code == E.none
        meta = entry(broker, "tv2-g")
        assert meta.state is TxnState.Ongoing and meta.groups == {"g"}
        r = await client.call(commit(5, pid, epoch + 5, 6))  # not the id's epoch: the coordinator's PRODUCER_FENCED
        assert r.topics[0].partitions[0].error_code == E.invalid_producer_epoch
        assert await end(client, "tv2-g", pid, epoch, True) == E.none
        with trio.fail_after(10):
            while True:
                f = await client.call(req(OFFSET_FETCH, 8, {"groups": [{"group_id": "g", "topics": [
                    {"name": "in", "partition_indexes": [0]}]}], "require_stable": True}))
                part = f.groups[0].topics[0].partitions[0]
                if part.error_code == E.none and part.committed_offset == 5:
                    break
                await trio.sleep(0.01)
