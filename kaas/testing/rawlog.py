"""A topic's log as the brokers hold it: every batch from offset 0 to the high watermark,
transaction markers included, through raw Fetch requests (read_uncommitted) to each
partition's leader (``kaas.client.WireClient``; TLS and SASL from a confluent-kafka style
config). What ``kaas.testing.anomalies`` judges a client's reads against.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Mapping
from typing import Any

from kaas.testing.anomalies import Batch, Record

FETCH_MAX_BYTES = 8 << 20


def _client(config: Mapping[str, Any], host: str, port: int) -> Any:
    from kaas.client import SaslConfig, WireClient

    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config.get("ssl.ca.location") or None)
        if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() in ("", "none"):
            ctx.check_hostname = False
        if config.get("ssl.certificate.location"):
            ctx.load_cert_chain(config["ssl.certificate.location"], config.get("ssl.key.location") or None)
    sasl = None
    if protocol.startswith("SASL_"):
        sasl = SaslConfig(str(config.get("sasl.mechanism", config.get("sasl.mechanisms", ""))).upper(),
                          str(config["sasl.username"]), str(config["sasl.password"]))
    return WireClient(host, port, timeout=30.0, sasl=sasl, ssl_context=ctx)


def _leaders(config: Mapping[str, Any], topic: str) -> dict[int, tuple[str, int]]:
    boot = [b.strip() for b in str(config["bootstrap.servers"]).split(",") if b.strip()]
    last: Exception | None = None
    for hp in boot:
        host, _, port = hp.rpartition(":")
        try:
            with _client(config, host.strip("[]"), int(port)) as wc:
                md = wc.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
        except OSError as exc:
            last = exc
            continue
        addr = {b.node_id: (b.host, b.port) for b in md.brokers}
        return {p.partition_index: addr[p.leader_id] for p in md.topics[0].partitions if p.leader_id in addr}
    raise OSError(f"no broker of {boot} answered Metadata: {last}")


def value_of(raw: bytes) -> bytes | None:
    """The value of one record (``kaas.wire.records.Record.raw``, length prefix included)."""
    from kaas.wire.batch import read_varint

    view = memoryview(raw)
    _length, p = read_varint(view, 0)
    p += 1  # attributes
    _ts, p = read_varint(view, p)
    _delta, p = read_varint(view, p)
    klen, p = read_varint(view, p)
    p += max(klen, 0)
    vlen, p = read_varint(view, p)
    return None if vlen < 0 else bytes(view[p:p + vlen])


def _fetch(wc: Any, topic: str, partition: int, offset: int) -> tuple[int, bytes]:
    r = wc.call(1, 11, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": FETCH_MAX_BYTES,
                        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                        "forgotten_topics_data": [], "topics": [{"topic": topic, "partitions": [
                            {"partition": partition, "fetch_offset": offset, "partition_max_bytes": FETCH_MAX_BYTES,
                             "current_leader_epoch": -1, "log_start_offset": -1}]}]})
    p = r.responses[0].partitions[0]
    if p.error_code:
        raise OSError(f"Fetch {topic}/{partition}@{offset}: error {p.error_code}")
    return int(p.high_watermark), bytes(p.records or b"")


def read_log(config: Mapping[str, Any], topic: str, ends: Mapping[int, int], timeout: float = 60.0) -> list[Batch]:
    """Every batch of ``topic``'s partitions up to ``ends`` (partition: offset; e.g. the high
    watermarks), data and control; a leader that moved is asked again until ``timeout``.

    Raises:
        OSError: a partition could not be read within ``timeout`` s.
    """
    from kaas.wire import batch as wb
    from kaas.wire.records import records

    out: list[Batch] = []
    deadline = time.monotonic() + timeout
    for partition, end in sorted(ends.items()):
        offset = 0
        while offset < end:
            try:
                host, port = _leaders(config, topic)[partition]
                with _client(config, host, port) as wc:
                    while offset < end:
                        _hw, data = _fetch(wc, topic, partition, offset)
                        pos, moved = 0, False
                        while len(data) - pos >= wb.HEADER_SIZE:
                            h = wb.parse_header(data, pos)
                            if pos + h.size > len(data):
                                break  # a batch cut at max_bytes: fetched again from its start
                            one = data[pos:pos + h.size]
                            if h.next_offset <= offset:  # read already
                                pos += h.size
                                continue
                            if h.is_control:
                                out.append(Batch(partition, h.base_offset, h.producer_id, h.is_transactional,
                                                 control=wb.control_type(one, 0, h)))
                            else:
                                out.append(Batch(partition, h.base_offset, h.producer_id, h.is_transactional,
                                                 records=tuple(
                                    Record(partition, h.base_offset + r.offset_delta, r.key, value_of(r.raw),
                                           h.producer_id, h.is_transactional)
                                    for r in records(one, h) if h.base_offset + r.offset_delta >= offset)))
                            offset = max(offset, h.next_offset)
                            pos += h.size
                            moved = True
                        if not moved:
                            raise OSError(f"Fetch {topic}/{partition}@{offset}: nothing below the end {end}")
            except (OSError, KeyError) as exc:
                if time.monotonic() > deadline:
                    raise OSError(f"cannot read {topic}/{partition}: {exc}") from None
                time.sleep(0.2)
    return out
