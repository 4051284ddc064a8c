"""``cpu`` (issue 35): instructions per transaction and per produce request of one broker,
counted by callgrind, so that a change is judged by a figure that repeats within ~0.2%
where wall-clock runs on a shared machine drift by +-30%.

One ``kaas broker`` on tmpfs runs under ``valgrind --tool=callgrind`` with instrumentation
off, its periodic loops stretched to an hour (``cpu/launch.py --quiet``); a raw client
(``kaas.wire`` frames encoded once, one request at a time, each sent only once the broker
is idle: ``wait_idle``, so every run does the same work) warms it up, then
``callgrind_control`` opens three windows:

- idle: ``--idle-seconds`` of nothing: what the broker does unasked (about nothing once
  quiet; its rate is subtracted from the other two by their length all the same);
- txn: N single-message transactions of one transactional producer as librdkafka sends
  them: AddPartitionsToTxn v0 (one partition), Produce v10 (one 100-byte keyless record,
  acks=-1), EndTxn v1 commit;
- produce: N Produce v10 requests of an idempotent producer, each one batch of
  ``--records`` keyless 1 KiB values, acks=-1.

Each window is dumped (``callgrind.out.<n>``, read with ``callgrind_annotate``). With
``--profile`` (the default where a C compiler exists) a second broker runs with the Python
frames visible (``callgrind``): instructions by layer and the top Python functions, each
window dumped as ``callgrind.profile.out.<n>`` with Python names in it.
"""

from __future__ import annotations

import dataclasses
import shutil
import struct
import tempfile
import time
from pathlib import Path

import click
from kio.schema.errors import ErrorCode

from kaas.client import WireClient, recv_exact
from kaas.testing import free_port, wait_ready
from kaas.wire import batch as wb
from kaas.wire import codec
from kaas.wire.build import build

from ..common import _payloads, _r, connect_nodelay
from ..targets import tmp_base
from . import callgrind as cg

TXN_VALUE = 100
PRODUCE_VALUE = 1024
_CORRELATION_AT = 8
_I32 = struct.Struct(">i")
RETRIABLE = {ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress,
             ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition}


class Retriable(Exception):
    pass


def _errors(obj: object) -> list[ErrorCode]:
    """Every non-zero ``*error_code`` field in a decoded kio response."""
    out: list[ErrorCode] = []
    if isinstance(obj, tuple):
        for item in obj:
            out += _errors(item)
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.name.endswith("error_code") and value != ErrorCode.none:
                out.append(value)
            elif isinstance(value, tuple) or dataclasses.is_dataclass(value):
                out += _errors(value)
    return out


def wait_idle(pids: list[int], polls: int = 3, every_s: float = 0.001, timeout_s: float = 10.0) -> None:
    """Wait until every process of ``pids`` has been asleep (``S`` in /proc/PID/stat: a
    broker's trio loop blocked in epoll) for ``polls`` looks in a row.

    Natively the broker is idle again long before a client's next request arrives; under
    callgrind it runs ~50 times slower than this client, so without the wait a request
    would often find it still busy (EndTxn's background half unfinished, the socket read
    again before blocking), and the count would depend on the machine's load."""
    deadline = time.monotonic() + timeout_s
    asleep = 0
    while pids and asleep < polls and time.monotonic() < deadline:
        states = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    states.append(f.read().rpartition(")")[2].split()[0])
            except OSError:
                return
        asleep = asleep + 1 if all(state == "S" for state in states) else 0
        time.sleep(every_s)


class Frame:
    """One request encoded once; ``call`` patches its correlation id, sends it and checks
    the answer (a retriable error raises ``Retriable``, any other fails the run)."""

    quiesce: list[int] = []  # the brokers' pids: wait until they are idle before each request

    def __init__(self, api: tuple[int, int], body: dict) -> None:
        self.api = api
        self.data = bytearray(codec.encode_request(*api, 0, "kaas-bench-cpu", build(codec.request_class(*api), body)))

    def call(self, wc: WireClient) -> object:
        wait_idle(Frame.quiesce)
        wc.corr += 1
        _I32.pack_into(self.data, _CORRELATION_AT, wc.corr)
        wc.sock.sendall(self.data)
        payload = recv_exact(wc.sock, _I32.unpack(recv_exact(wc.sock, 4))[0])
        corr, resp = codec.decode_response(*self.api, payload)
        if corr != wc.corr:
            raise click.ClickException(f"api {self.api}: correlation id {corr}, expected {wc.corr}")
        errors = _errors(resp)
        if errors:
            if set(errors) <= RETRIABLE:
                raise Retriable(errors)
            raise click.ClickException(f"api {self.api}: {errors}")
        return resp


class Producer:
    """A producer of one partition (0 of ``topic``): idempotent, or transactional with
    ``txn_id`` (then ``one`` is a whole single-message transaction)."""

    def __init__(self, wc: WireClient, topic: str, txn_id: str | None, records: int, size: int) -> None:
        self.wc = wc
        init = Frame((22, 4), {"transactional_id": txn_id, "transaction_timeout": 60_000,
                               "producer_id": -1, "producer_epoch": -1})
        resp = self._retry(lambda: init.call(wc))
        pid, epoch = resp.producer_id, resp.producer_epoch
        values = _payloads(size)
        batch = wb.build_batch(base_timestamp=int(time.time() * 1000), producer_id=pid, producer_epoch=epoch,
                               base_sequence=0, attributes=0x10 if txn_id else 0,
                               records=[(None, values[i % len(values)]) for i in range(records)])
        self.records = records
        self.produce = Frame((0, 10), {"transactional_id": txn_id, "acks": -1, "timeout": 30_000,
                                       "topic_data": [{"name": topic,
                                                       "partition_data": [{"index": 0, "records": batch}]}]})
        self.at = self.produce.data.index(batch)
        self.sent = 0
        self.txn = txn_id is not None
        if self.txn:
            ids = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch}
            self.add = Frame((24, 0), {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                                       "v3_and_below_producer_epoch": epoch,
                                       "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
            self.end = Frame((26, 1), {**ids, "committed": True})
        self.retries = 0

    def _retry(self, step):
        for _ in range(200):
            try:
                return step()
            except Retriable:
                self.retries += 1
                time.sleep(0.05)
        raise click.ClickException("still retriable after 200 tries")

    def one(self) -> None:
        if self.txn:
            self._retry(lambda: self.add.call(self.wc))
        wb.set_base_sequence(self.produce.data, self.at, self.sent * self.records % 2**31)
        self._retry(lambda: self.produce.call(self.wc))
        self.sent += 1
        if self.txn:
            self._retry(lambda: self.end.call(self.wc))


def _create_topic(wc: WireClient, topic: str) -> None:
    Frame((19, 4), {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                "assignments": [], "configs": []}], "timeout": 30_000,
                    "validate_only": False}).call(wc)


def _window(broker: cg.CallgrindBroker, work) -> tuple[Path, float]:
    t0 = broker.start_window()
    work()
    elapsed = time.monotonic() - t0
    return broker.dump(), elapsed


def measure(out_dir: Path, count: int, records: int, idle_s: float, warmup: int,
            profile_dir: Path | None) -> dict:
    """One broker under callgrind: the idle, txn and produce windows (see the module)."""
    data = Path(tempfile.mkdtemp(prefix="kaas-cpu-", dir=tmp_base()))
    port = free_port()
    broker = cg.CallgrindBroker(out_dir, data / "data", f"127.0.0.1:{port}", profile_dir)
    try:
        wait_ready("127.0.0.1", port, timeout=600, proc=broker.proc)
        with connect_nodelay(f"127.0.0.1:{port}") as wc:
            for topic in ("cpu-txn", "cpu-produce"):
                _create_topic(wc, topic)
            txn = Producer(wc, "cpu-txn", "cpu-bench", 1, TXN_VALUE)
            plain = Producer(wc, "cpu-produce", None, records, PRODUCE_VALUE)
            for _ in range(warmup):
                txn.one()
                plain.one()
            warm_retries = txn.retries + plain.retries
            Frame.quiesce = [broker.proc.pid]
            idle, idle_elapsed = _window(broker, lambda: time.sleep(idle_s))
            txns, txn_elapsed = _window(broker, lambda: [txn.one() for _ in range(count)])
            prods, prod_elapsed = _window(broker, lambda: [plain.one() for _ in range(count)])
            retries = txn.retries + plain.retries - warm_retries
    finally:
        Frame.quiesce = []
        broker.close()
        shutil.rmtree(data, ignore_errors=True)
    windows = {"idle": (idle, idle_elapsed), "txn": (txns, txn_elapsed), "produce": (prods, prod_elapsed)}
    costs = {name: (cg.read_costs(path), elapsed) for name, (path, elapsed) in windows.items()}
    (idle_total, idle_fns), _ = costs["idle"]
    idle_rate = idle_total / idle_elapsed
    out: dict = {"idle_ir_per_s": round(idle_rate), "retries": retries,
                 "files": {name: str(path) for name, (path, _) in windows.items()}}
    frames = cg.read_map(broker.map) if profile_dir else {}
    for name in ("txn", "produce"):
        (total, fns), elapsed = costs[name]
        out[f"ir_per_{name}"] = round((total - idle_rate * elapsed) / count)
        out[f"{name}_seconds"] = round(elapsed, 2)
        if profile_dir:
            layers = cg.by_layer(fns, frames)
            idle_layers = cg.by_layer(idle_fns, frames)
            per = {k: round((v - idle_layers.get(k, 0) / idle_elapsed * elapsed) / count)
                   for k, v in sorted(layers.items(), key=lambda kv: -kv[1])}
            out[f"{name}_by_layer"] = per
            top = sorted(cg.by_function(fns, frames).items(), key=lambda kv: -kv[1])[:25]
            out[f"{name}_top"] = [[fn, round(v / count)] for fn, v in top]
    if profile_dir:
        for path, _ in windows.values():
            cg.name_functions(path, frames)
    return out


def run_cpu(count: int, records: int, idle_s: float, warmup: int, runs: int, profile: bool | None,
            out_dir: Path | None, brokers: int = 1, partitions: int = 8, txn_records: int = 10,
            tv2: bool = False) -> dict:
    """``runs`` plain measurements (the figures; their spread) and, with ``profile``, one
    with the Python frames visible (the split by layer). ``brokers`` > 1: the cluster
    measure of ``cpu_cluster`` (transactions of ``txn_records`` over ``partitions``)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise click.ClickException("valgrind is not installed (Debian: apt-get install valgrind)")
    out_dir = out_dir or Path(tempfile.mkdtemp(prefix="kaas-callgrind-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    hook = None
    if profile is not False:
        hook = cg.build_hook(Path(tempfile.gettempdir()) / "kaas-bench-pyframes")
        if hook is None and profile:
            raise click.ClickException("--profile needs a C compiler and Python's headers")
    started = time.monotonic()
    if brokers > 1:
        return _run_cluster(out_dir, brokers, count, partitions, txn_records, idle_s, warmup, runs, hook, started,
                            tv2)
    plain = []
    for i in range(runs):
        run_dir = out_dir / f"run-{i}" if runs > 1 else out_dir
        run_dir.mkdir(exist_ok=True)
        plain.append(measure(run_dir, count, records, idle_s, warmup, None))
    res: dict = {"bench": "cpu", "transactions": count, "produce_requests": count, "records_per_request": records,
                 "txn_value_bytes": TXN_VALUE, "produce_value_bytes": PRODUCE_VALUE}
    for key in ("ir_per_txn", "ir_per_produce"):
        values = [p[key] for p in plain]
        res[key] = sorted(values)[len(values) // 2]
        if runs > 1:
            res[f"{key}_runs"] = values
            res[f"{key}_spread"] = _r((max(values) - min(values)) / min(values), 4)
    res["idle_ir_per_s"] = plain[0]["idle_ir_per_s"]
    res["plain"] = plain
    if hook is not None:
        res["profile"] = measure(out_dir, count, records, idle_s, warmup, hook)
    res["out_dir"] = str(out_dir)
    res["seconds"] = round(time.monotonic() - started, 1)
    return res


def _run_cluster(out_dir: Path, brokers: int, count: int, partitions: int, txn_records: int, idle_s: float,
                 warmup: int, runs: int, hook: Path | None, started: float, tv2: bool = False) -> dict:
    from .cpu_cluster import measure_cluster

    plain = []
    for i in range(runs):
        run_dir = out_dir / f"run-{i}"
        plain.append(measure_cluster(run_dir, brokers, count, partitions, txn_records, idle_s, warmup, None, tv2))
    values = [p["ir_per_txn"] for p in plain]
    res: dict = {"bench": "cpu", "brokers": brokers, "partitions": partitions, "txn_records": txn_records,
                 "transaction_version": 2 if tv2 else 1,
                 "transactions": count, "ir_per_txn": sorted(values)[len(values) // 2], "ir_per_txn_runs": values,
                 "ir_per_txn_spread": _r((max(values) - min(values)) / min(values), 4), "plain": plain}
    if hook is not None:
        res["profile"] = measure_cluster(out_dir / "profile", brokers, count, partitions, txn_records, idle_s,
                                         warmup, hook, tv2)
    res["out_dir"] = str(out_dir)
    res["seconds"] = round(time.monotonic() - started, 1)
    return res


@click.command()
@click.option("--count", type=click.IntRange(min=1), default=200, show_default=True,
              help="Transactions, and produce requests, per window.")
@click.option("--records", type=click.IntRange(min=1), default=10, show_default=True,
              help="1 KiB keyless values per produce request.")
@click.option("--idle-seconds", type=float, default=2.0, show_default=True,
              help="The idle window (the background loops' rate, subtracted).")
@click.option("--warmup", type=int, default=20, show_default=True, help="Transactions and requests first.")
@click.option("--runs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Plain measurements (fresh broker each): median and spread.")
@click.option("--profile/--no-profile", default=None,
              help="Also a run with the Python frames visible: the split by layer (default: where cc exists).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Where the callgrind.out files go (default: a new temporary directory).")
@click.option("--brokers", type=click.IntRange(min=1), default=1, show_default=True,
              help="More than 1: a cluster, transactions of --txn-records over --partitions (no produce window).")
@click.option("--partitions", type=click.IntRange(min=1), default=8, show_default=True, help="With --brokers.")
@click.option("--txn-records", type=click.IntRange(min=1), default=10, show_default=True, help="With --brokers.")
@click.option("--tv2", is_flag=True, help="With --brokers: transactions as a transaction.version 2 client sends "
                                          "them (Produce v12, no AddPartitionsToTxn, EndTxn v5).")
def cpu(count, records, idle_seconds, warmup, runs, profile, out_dir, brokers, partitions, txn_records,
        tv2) -> None:
    """Issue 35: instructions per single-message transaction and per keyless produce
    request of one broker under callgrind, split by layer (with --brokers N: per
    transaction of txn-many's shape, summed over a cluster); one JSON line."""
    from ..common import _emit

    if tv2 and brokers < 2:
        raise click.UsageError("--tv2 goes with --brokers 2 or more")
    _emit(run_cpu(count, records, idle_seconds, warmup, runs, profile, out_dir, brokers, partitions, txn_records,
                  tv2))
