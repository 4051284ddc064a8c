"""``roundtrip`` (issue 22's per-request path): a trivial request's round trip, kaas
against the mock.

One ``kaas broker`` on tmpfs and librdkafka's mock with one broker, A B A B. On one
connection (TCP_NODELAY), one request at a time, after a warm-up of 200: ApiVersions v3
(librdkafka's first request; the mock lacks v3 and answers UNSUPPORTED_VERSION and its
ApiVersions range, 17 bytes), ApiVersions v2 (a full answer from both), then the Heartbeat
v4 of a group member made real first (FindCoordinator v3, JoinGroup v5, SyncGroup v3).
Each request is one frame encoded before the clock starts, sent with ``sendall`` and read
with two ``recv(MSG_WAITALL)`` on a blocking socket, so the client's part of a round trip
is the same three syscalls for both targets. Every answer is decoded after the timed loop:
error 0, or that UNSUPPORTED_VERSION, or the run fails. The target: kaas's p50 at most 2x
the mock's."""

from __future__ import annotations

import os
import socket
import statistics
import struct
import time
import uuid
from typing import NamedTuple

import click
from kio.schema.errors import ErrorCode

from kaas.client import WireClient
from kaas.wire import codec
from kaas.wire.build import build

from ..common import _percentile, _r, connect_nodelay
from ..targets import kaas_and_mock

ROUNDTRIP_TARGET = 2.0  # kaas p50 / mock p50, per API
WARMUP = 200
CORRELATION_ID = 7
CLIENT_ID = "kaas-bench"
API_VERSIONS_KEY, HEARTBEAT = 18, (12, 4)
FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP = (10, 3), (11, 5), (14, 3)
# ApiVersions v3 as librdkafka sends it first, v2 (the mock's highest, v3 answered with
# UNSUPPORTED_VERSION) for a full answer from both, and a member's Heartbeat v4.
APIS = ("api_versions", "api_versions_v2", "heartbeat")
# The ones the target is judged on: the mock's answer to v3 is an error, not a comparable one.
COMPARED = ("api_versions_v2", "heartbeat")
_SIZE = struct.Struct(">i")


class Roundtrips(NamedTuple):
    """One request's timed round trips (seconds, in order) and the error code of its answers."""

    seconds: list[float]
    error_code: int


def _timed(sock: socket.socket, frame: bytes, n: int) -> tuple[list[float], set[bytes]]:
    """Send ``frame`` ``n`` times, one at a time: each round trip in seconds, and the
    distinct answers (payloads after the size prefix).

    Raises:
        ConnectionError: an answer came short (the broker closed, or the kernel timeout).
    """
    seconds: list[float] = []
    answers: set[bytes] = set()
    clock, waitall, unpack = time.perf_counter, socket.MSG_WAITALL, _SIZE.unpack
    try:
        for _ in range(n):
            t0 = clock()
            sock.sendall(frame)
            size = unpack(sock.recv(4, waitall))[0]
            payload = sock.recv(size, waitall)
            seconds.append(clock() - t0)
            if len(payload) != size:
                raise ConnectionError(f"answer of {len(payload)} of {size} bytes")
            answers.add(payload)
    except struct.error:
        raise ConnectionError("short size prefix") from None
    return seconds, answers


def _time_request(sock: socket.socket, api: tuple[int, int], body: dict, requests: int) -> Roundtrips:
    """``requests`` copies of one request after WARMUP: their round trips and error code.

    Raises:
        click.ClickException: an answer has another correlation id, the answers disagree on
            the error code, or it is an error other than an ApiVersions' UNSUPPORTED_VERSION
            (the broker's answer to a version it lacks, with the versions it has).
    """
    key, version = api
    frame = codec.encode_request(key, version, CORRELATION_ID, CLIENT_ID,
                                 build(codec.request_class(key, version), body))
    _, warm = _timed(sock, frame, WARMUP)
    seconds, answers = _timed(sock, frame, requests)
    codes = set()
    for payload in warm | answers:
        corr, resp = codec.decode_response(key, version, payload)
        if corr != CORRELATION_ID:
            raise click.ClickException(f"api {key} v{version}: correlation id {corr}, not {CORRELATION_ID}")
        codes.add(resp.error_code)
    allowed = {ErrorCode.none, ErrorCode.unsupported_version} if key == API_VERSIONS_KEY else {ErrorCode.none}
    if len(codes) != 1 or not codes <= allowed:
        raise click.ClickException(f"api {key} v{version}: errors {sorted(codes)}")
    return Roundtrips(seconds, int(codes.pop()))


def _join_group(wc: WireClient) -> dict:
    """Make a member of a fresh group, coordinated by the broker of ``wc``: the Heartbeat
    v4 request's fields.

    Raises:
        click.ClickException: a step answered an error, or another broker coordinates the group.
    """
    group = f"bench-roundtrip-{uuid.uuid4().hex[:8]}"
    fc = wc.call(*FIND_COORDINATOR, {"key": group, "key_type": 0})
    if fc.error_code != ErrorCode.none or fc.port != wc.sock.getpeername()[1]:
        raise click.ClickException(f"FindCoordinator {group}: error {fc.error_code!r}, port {fc.port}")
    join = {"group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}
    joined = wc.call(*JOIN_GROUP, join)
    if joined.error_code == ErrorCode.member_id_required:
        joined = wc.call(*JOIN_GROUP, {**join, "member_id": joined.member_id})
    if joined.error_code != ErrorCode.none:
        raise click.ClickException(f"JoinGroup {group}: error {joined.error_code!r}")
    member = {"group_id": group, "generation_id": joined.generation_id, "member_id": joined.member_id,
              "group_instance_id": None}
    synced = wc.call(*SYNC_GROUP, {**member, "assignments": [{"member_id": joined.member_id, "assignment": b""}]})
    if synced.error_code != ErrorCode.none:
        raise click.ClickException(f"SyncGroup {group}: error {synced.error_code!r}")
    return member


def measure_roundtrips(bootstrap: str, requests: int) -> dict[str, Roundtrips]:
    """On one connection to the first broker of ``bootstrap``, one request at a time,
    ``requests`` of each after a warm-up of WARMUP: ApiVersions v3, ApiVersions v2, then the
    Heartbeat v4 of a member of a fresh group.

    Returns:
        api (APIS) -> its round trips and error code (0, or 35 where a broker lacks
        ApiVersions v3: librdkafka's mock).
    Raises:
        click.ClickException: an answer carried another error (any Heartbeat error included).
        OSError: the connection failed or timed out.
    """
    hello = {"client_software_name": CLIENT_ID, "client_software_version": "1"}
    with connect_nodelay(bootstrap) as wc:
        out = {"api_versions": _time_request(wc.sock, (API_VERSIONS_KEY, 3), hello, requests),
               "api_versions_v2": _time_request(wc.sock, (API_VERSIONS_KEY, 2), hello, requests)}
        out["heartbeat"] = _time_request(wc.sock, HEARTBEAT, _join_group(wc), requests)
    return out


def _us_pcts(seconds: list[float]) -> dict:
    v = sorted(seconds)
    return {f"p{q}_us": _r(_percentile(v, q / 100) * 1e6, 1) for q in (50, 90, 99)}


def run_roundtrip(rounds: int, requests: int, emit) -> dict:
    """``rounds`` rounds of kaas then the mock: one line per (target, round, api) through
    ``emit``; returns the summary: medians over the rounds per target and api, kaas/mock of
    the p50 medians and the target for the apis both answer in full (``COMPARED``).

    Raises:
        click.ClickException: a broker did not start, or an answer carried an error
            (``measure_roundtrips``).
    """
    started = time.monotonic()
    runs: dict[str, dict[str, list[dict]]] = {t: {api: [] for api in APIS} for t in ("kaas", "mock")}
    with kaas_and_mock() as (kaas, mock):
        for rnd in range(rounds):
            for name, target in (("kaas", kaas), ("mock", mock)):
                for api, rt in measure_roundtrips(target.bootstrap, requests).items():
                    res = {"bench": "roundtrip", "target": name, "round": rnd, "api": api, "requests": requests,
                           "error_code": rt.error_code, **_us_pcts(rt.seconds)}
                    runs[name][api].append(res)
                    emit(res)
    medians = {name: {api: {**{k: _r(statistics.median(r[k] for r in by_api[api]), 1)
                               for k in ("p50_us", "p90_us", "p99_us")},
                            "error_codes": sorted({r["error_code"] for r in by_api[api]})} for api in APIS}
               for name, by_api in runs.items()}
    ratios = {api: _r(medians["kaas"][api]["p50_us"] / medians["mock"][api]["p50_us"]) for api in COMPARED}
    return {"bench": "roundtrip", "rounds": rounds, "requests": requests, "warmup": WARMUP, "cpus": os.cpu_count(),
            "seconds": round(time.monotonic() - started, 1), **medians, "kaas_over_mock": ratios,
            "target": {"kaas_over_mock": f"<= {ROUNDTRIP_TARGET:g}",
                       "met": {api: ratios[api] <= ROUNDTRIP_TARGET for api in COMPARED}}}
