"""``kaas txn list|describe|abort``: transactions over the wire protocol, like Kafka's
kafka-transactions tool. ``abort`` drives the coordinator (InitProducerId for the id, which
aborts an ongoing transaction and fences its producer); it never edits slot files."""

from __future__ import annotations

import json
import time

import click
from kio.schema.errors import ErrorCode

from kaas.client import WireClient
from kaas.tools.output import table


def _brokers(bootstrap: str) -> list[tuple[int, str, int]]:
    last = None
    for hp in bootstrap.split(","):
        host, _, port = hp.strip().rpartition(":")
        try:
            with WireClient(host, int(port)) as wc:
                md = wc.call(3, 12, {"topics": [], "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
            return [(b.node_id, b.host, b.port) for b in md.brokers]
        except OSError as exc:
            last = exc
    raise click.ClickException(f"no bootstrap server answered: {last}")


def _coordinator(bootstrap: str, txn_id: str) -> tuple[str, int]:
    for _bid, host, port in _brokers(bootstrap):
        with WireClient(host, port) as wc:
            r = wc.call(10, 3, {"key": txn_id, "key_type": 1})
        if r.error_code == ErrorCode.none:
            return r.host, r.port
    raise click.ClickException(f"no coordinator found for {txn_id!r}")


@click.group("txn")
def txn() -> None:
    """List, describe and abort transactions (over the wire protocol)."""


@txn.command("list")
@click.option("--bootstrap", required=True, help="HOST:PORT[,HOST:PORT...]")
@click.option("--state", "states", multiple=True, help="Only these states (Ongoing, PrepareCommit, ...).")
@click.option("--json", "as_json", is_flag=True)
def list_(bootstrap: str, states: tuple[str, ...], as_json: bool) -> None:
    """Every transactional id of every broker's coordinator slots."""
    rows = []
    for bid, host, port in _brokers(bootstrap):
        with WireClient(host, port) as wc:
            r = wc.call(66, 1, {"state_filters": list(states)})
        for t in r.transaction_states:
            rows.append({"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                         "state": t.transaction_state, "coordinator": bid})
    rows.sort(key=lambda r: r["transactional_id"])
    click.echo(json.dumps(rows) if as_json else table(rows, ["transactional_id", "producer_id", "state",
                                                            "coordinator"]))


def _parse_describe_v0(buf: bytes) -> list[dict]:
    """DescribeTransactions v0 response body (flexible). Parsed here because kio refuses the
    -1 start time that means "no transaction", which Apache sends too."""
    import struct

    pos = 0

    def uvarint() -> int:
        nonlocal pos
        shift = out = 0
        while True:
            b = buf[pos]
            pos += 1
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def fixed(fmt: str):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string() -> str:
        nonlocal pos
        n = uvarint() - 1
        s = buf[pos:pos + n].decode()
        pos += n
        return s

    def skip_tags() -> None:
        nonlocal pos
        for _ in range(uvarint()):
            uvarint()
            pos += uvarint()

    fixed(">i")  # throttle
    out = []
    for _ in range(uvarint() - 1):
        t = {"error_code": fixed(">h"), "transactional_id": string(), "state": string(),
             "timeout_ms": fixed(">i"), "start_time_ms": fixed(">q"), "producer_id": fixed(">q"),
             "producer_epoch": fixed(">h"), "topics": []}
        for _ in range(uvarint() - 1):
            topic = string()
            parts = [fixed(">i") for _ in range(uvarint() - 1)]
            skip_tags()
            t["topics"].append((topic, parts))
        skip_tags()
        out.append(t)
    return out


@txn.command()
@click.argument("transactional_id")
@click.option("--bootstrap", required=True)
@click.option("--json", "as_json", is_flag=True)
def describe(transactional_id: str, bootstrap: str, as_json: bool) -> None:
    """State, producer, timeout and partitions of one transactional id."""
    host, port = _coordinator(bootstrap, transactional_id)
    with WireClient(host, port) as wc:
        raw = wc.call_raw(65, 0, {"transactional_ids": [transactional_id]})
    t = _parse_describe_v0(raw)[0]
    if t["error_code"] != ErrorCode.none:
        raise click.ClickException(f"{transactional_id}: {ErrorCode(t['error_code']).name}")
    row = {"transactional_id": t["transactional_id"], "state": t["state"], "producer_id": t["producer_id"],
           "producer_epoch": t["producer_epoch"], "timeout_ms": t["timeout_ms"],
           "start_time_ms": t["start_time_ms"],
           "partitions": [f"{topic}-{p}" for topic, parts in t["topics"] for p in parts],
           "coordinator": f"{host}:{port}"}
    if as_json:
        click.echo(json.dumps(row))
    else:
        for k, v in row.items():
            click.echo(f"{k:<16} {', '.join(v) if isinstance(v, list) else v}")


@txn.command()
@click.argument("transactional_id")
@click.option("--bootstrap", required=True)
@click.option("--timeout", type=float, default=30.0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def abort(transactional_id: str, bootstrap: str, timeout: float, as_json: bool) -> None:
    """Abort the id's ongoing transaction through its coordinator and fence its producer
    (the next epoch is taken, as a new producer session with this id would)."""
    deadline = time.monotonic() + timeout
    while True:
        host, port = _coordinator(bootstrap, transactional_id)
        with WireClient(host, port) as wc:
            r = wc.call(22, 4, {"transactional_id": transactional_id, "transaction_timeout": 60000})
        code = ErrorCode(r.error_code)
        if code == ErrorCode.none:
            out = {"transactional_id": transactional_id, "aborted": True, "producer_id": r.producer_id,
                   "producer_epoch": r.producer_epoch}
            click.echo(json.dumps(out) if as_json else
                       f"{transactional_id}: no transaction open any more; producer {r.producer_id} "
                       f"fenced at epoch {r.producer_epoch}")
            return
        if code not in (ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress,
                        ErrorCode.not_coordinator, ErrorCode.coordinator_not_available) or time.monotonic() > deadline:
            raise click.ClickException(f"{transactional_id}: {code.name}")
        time.sleep(0.2)
