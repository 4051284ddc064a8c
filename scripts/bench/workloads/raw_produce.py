"""A raw pipelined idempotent producer: ``ingest``'s client that costs the broker's cores little.

librdkafka's producer takes 1.1-1.2 cores at ~300 MiB/s of 1 KiB records, so on two cores it
caps the ``ingest`` figure before the broker does. This client has no Python per record:
one connection (TCP_NODELAY, blocking, the kernel's send and receive timeouts), InitProducerId
v4 for an idempotent producer id and epoch, then Produce v10 requests (acks=-1, partition 0,
one batch of ``records`` keyless values each) with up to MAX_IN_FLIGHT unanswered, as
librdkafka's ``max.in.flight`` for an idempotent producer. The batch is built once
(``kaas.wire.batch.build_batch``) and the request framed once by kio; each request then
rewrites, in place, only its correlation id and the batch's base sequence (the records sent
before it) and CRC-32C (``kaas.wire.batch.set_base_sequence``). Every answer is decoded in
turn: its correlation id in order, error 0, and a base offset right after the previous
batch's, or the run fails."""

from __future__ import annotations

import struct
import time

import click
from kio.schema.errors import ErrorCode

from kaas.client import WireClient, recv_exact
from kaas.wire import batch as wb
from kaas.wire import codec
from kaas.wire.build import build

from ..common import MIB, _payloads, _r, connect_nodelay
from ..metering import BrokerPids, CpuMeter, cpu_fields

PRODUCE = (0, 10)
INIT_PRODUCER_ID = (22, 4)
MAX_IN_FLIGHT = 5
RECORDS_PER_REQUEST = 1000
CLIENT_ID = "kaas-bench-raw"
PRODUCE_TIMEOUT_MS = 30_000
# A request frame opens with its size, api key and api version, then the correlation id.
_CORRELATION_AT = 8
_I32 = struct.Struct(">i")


def init_producer_id(wc: WireClient) -> tuple[int, int]:
    """An idempotent (non-transactional) producer id and epoch from the broker of ``wc``.

    Raises:
        click.ClickException: the broker answered an error.
    """
    resp = wc.call(*INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": 60_000,
                                       "producer_id": -1, "producer_epoch": -1})
    if resp.error_code != ErrorCode.none:
        raise click.ClickException(f"InitProducerId: error {resp.error_code!r}")
    return resp.producer_id, resp.producer_epoch


def produce_frame(topic: str, producer_id: int, producer_epoch: int, records: int,
                  size: int, compression: int = 0) -> tuple[bytearray, int]:
    """One Produce v10 request frame (size prefix included) carrying a batch of ``records``
    keyless values of ``size`` bytes for partition 0 of ``topic``, compressed with ``compression``
    (``kaas.wire.compress``: 0 none .. 4 zstd), and where in the frame the batch starts:
    (frame, position) for ``set_base_sequence``."""
    values = _payloads(size)
    now = int(time.time() * 1000)
    batch = wb.build_batch(base_timestamp=now, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=0,
                           records=[(None, values[i % len(values)]) for i in range(records)])
    if compression:
        from kaas.wire import validate

        batch, _h = validate.validate(batch, validate.Policy(max_size=1 << 30, codec=compression), now)
    req = build(codec.request_class(*PRODUCE), {
        "transactional_id": None, "acks": -1, "timeout": PRODUCE_TIMEOUT_MS,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    frame = bytearray(codec.encode_request(*PRODUCE, 0, CLIENT_ID, req))
    return frame, frame.index(batch)


def _base_offset(payload: bytes, correlation_id: int, topic: str) -> int:
    """The base offset a Produce v10 answer assigned.

    Raises:
        click.ClickException: another correlation id, or an error for the partition.
    """
    corr, resp = codec.decode_response(*PRODUCE, payload)
    if corr != correlation_id:
        raise click.ClickException(f"Produce {topic}: correlation id {corr}, expected {correlation_id}")
    part = resp.responses[0].partition_responses[0]
    if part.error_code != ErrorCode.none:
        raise click.ClickException(f"Produce {topic} request {corr}: error {part.error_code!r}: {part.error_message}")
    return part.base_offset


def run_raw_produce(bootstrap: str, topic: str, requests: int, records: int = RECORDS_PER_REQUEST,
                    size: int = 1024, pids: BrokerPids | None = None, compression: int = 0) -> dict:
    """Send ``requests`` Produce requests of ``records`` values of ``size`` bytes each to
    partition 0 of ``topic`` (which must exist) on the first broker of ``bootstrap``,
    MAX_IN_FLIGHT deep; the clock runs from the first request to the last answer.

    Returns:
        The run: MiB/s and records/s of the values, requests, the offsets the records took,
        the client's CPU (this thread's: building, CRCs, sends, decoding answers) and the
        brokers' of ``pids`` (``cpu_fields``, per GiB of values).
    Raises:
        click.ClickException: an answer carried an error, another correlation id, or a
            base offset other than right after the previous batch's.
        OSError: the connection failed or timed out.
    """
    with connect_nodelay(bootstrap) as wc:
        producer_id, producer_epoch = init_producer_id(wc)
        frame, at = produce_frame(topic, producer_id, producer_epoch, records, size, compression)
        sock = wc.sock
        meter = CpuMeter(pids or BrokerPids()).start()
        cpu0, t0 = time.thread_time(), time.perf_counter()
        sent = answered = 0
        first_offset = next_offset = -1
        while answered < requests:
            while sent < requests and sent - answered < MAX_IN_FLIGHT:
                _I32.pack_into(frame, _CORRELATION_AT, sent)
                wb.set_base_sequence(frame, at, sent * records % 2**31)
                sock.sendall(frame)
                sent += 1
            payload = recv_exact(sock, _I32.unpack(recv_exact(sock, 4))[0])
            base = _base_offset(payload, answered, topic)
            if answered == 0:
                first_offset = base
            elif base != next_offset:
                raise click.ClickException(f"Produce {topic} request {answered}: base offset {base}, "
                                           f"expected {next_offset}")
            next_offset = base + records
            answered += 1
        elapsed = time.perf_counter() - t0
        client_cpu_s = time.thread_time() - cpu0
        cpu_s = meter.stop()
    value_bytes = requests * records * size
    gib = value_bytes / (1 << 30)
    return {"bench": "raw-produce", "mib_per_s": round(value_bytes / MIB / elapsed, 3),
            "msgs_per_s": round(requests * records / elapsed, 1), "requests": requests, "records": requests * records,
            "records_per_request": records, "size": size, "codec": compression, "request_bytes": len(frame),
            "in_flight": MAX_IN_FLIGHT,
            "seconds": round(elapsed, 3), "first_offset": first_offset, "next_offset": next_offset,
            "client_cpu_s": _r(client_cpu_s), "client_cpu_s_per_gib": _r(client_cpu_s / gib),
            "client_cores": _r(client_cpu_s / elapsed),
            "broker_cores": None if cpu_s is None else _r(cpu_s / elapsed),
            "topic": topic, "bootstrap": bootstrap,
            **cpu_fields(cpu_s, value_bytes, sys_s=meter.system, faults=meter.faults)}
