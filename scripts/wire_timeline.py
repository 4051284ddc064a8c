#!/usr/bin/env python3
"""Where a request's time goes, seen on the wire: the loopback packets between a Kafka
client and the brokers, split into the broker's time and the client's time per request.

    python scripts/wire_timeline.py capture --ports 19950 --seconds 10 --out /tmp/wire.txt
    python scripts/wire_timeline.py connections /tmp/wire.txt --ports 19950
    python scripts/wire_timeline.py txn /tmp/wire.txt --ports 19950 [--json]
    python scripts/wire_timeline.py run --ports 19950 -- python scripts/bench txn --bootstrap 127.0.0.1:19950

``capture`` reads every packet on ``lo`` through an AF_PACKET socket (root or CAP_NET_RAW;
no tcpdump needed) with the kernel's receive time (SO_TIMESTAMPNS), counts each loopback
packet once (its outgoing copy is skipped) and keeps the IPv4/TCP packets with a payload
whose source or destination is one of the broker ports: one line per packet,
``TIME SPORT DPORT BYTES`` (seconds since the epoch, the TCP payload's length).

The analysis needs no privilege. A connection is (client port, broker port); its packets
in one direction in a row are merged (a request or answer in several segments, or
requests pipelined back to back). An exchange is a request followed by an answer:

- the broker's time: the answer's first packet - the request's last packet;
- the client's gap: the next request's first packet - the answer's last packet.

``connections`` prints both per connection; ``txn`` walks the transactions of a
transactional producer committing one message per transaction (``scripts/bench txn``):
on the transaction coordinator's connection (the busiest) AddPartitionsToTxn, then the
Produce on another connection, then EndTxn on the coordinator's again, then the next
AddPartitionsToTxn (``txn_windows``), and prints each phase's p50 and mean and their sums.
A transaction with anything else between its AddPartitionsToTxn request and its EndTxn
answer is skipped; the share of the coordinator's exchanges inside a matched transaction
is printed as the coverage. ``run`` captures while a command runs, then prints both.
"""

from __future__ import annotations

import json
import socket
import statistics
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

import click

# --- the analysis: packet records in, dicts out (no socket, no clock) -------------------

Conn = tuple[int, int]  # (client port, broker port)


class Packet(NamedTuple):
    ns: int  # kernel receive time, nanoseconds since the epoch
    sport: int
    dport: int
    length: int  # TCP payload bytes


class Segment(NamedTuple):
    """Consecutive packets of one connection in one direction."""

    start: int  # first packet, ns
    end: int  # last packet, ns
    request: bool  # client to broker
    conn: Conn
    packets: int
    nbytes: int


# the phases of a one-message transaction, in order: the broker's and the client's in turn
PHASES = ("add_partitions_server", "gap_to_produce", "produce_server", "gap_to_end_txn", "end_txn_server",
          "gap_to_next_add_partitions")
SERVER_PHASES = PHASES[0::2]
CLIENT_PHASES = PHASES[1::2]
LABELS = {
    "add_partitions_server": "AddPartitionsToTxn, broker",
    "gap_to_produce": "client: to Produce",
    "produce_server": "Produce, broker",
    "gap_to_end_txn": "client: to EndTxn",
    "end_txn_server": "EndTxn, broker",
    "gap_to_next_add_partitions": "client: to the next AddPartitionsToTxn",
}
# a matched transaction's first six segments: on the coordinator's connection (True) or another
# (False), and whether each is a request: AddPartitions q r, Produce q r, EndTxn q r
TXN_CONNS = (True, True, False, False, True, True)
TXN_REQUESTS = (True, False, True, False, True, False)

ETH_HEADER = 14
ETH_P_IP = b"\x08\x00"
IPPROTO_TCP = 6


def tcp_payload(frame: bytes) -> tuple[int, int, int] | None:
    """The TCP ports and payload length of an Ethernet frame.

    Args:
        frame: the frame from its Ethernet header on, possibly cut after the TCP header.

    Returns:
        (source port, destination port, payload bytes) for IPv4/TCP, else None. The length
        comes from the IP header, so a cut frame gives the full payload's length.
    """
    if len(frame) < ETH_HEADER + 20 or frame[12:14] != ETH_P_IP or frame[ETH_HEADER + 9] != IPPROTO_TCP:
        return None
    ihl = (frame[ETH_HEADER] & 0x0F) * 4
    tcp = ETH_HEADER + ihl
    if len(frame) < tcp + 13:
        return None
    (total,) = struct.unpack_from("!H", frame, ETH_HEADER + 2)
    sport, dport = struct.unpack_from("!HH", frame, tcp)
    return sport, dport, total - ihl - (frame[tcp + 12] >> 4) * 4


def format_packet(p: Packet) -> str:
    """One capture line: ``TIME SPORT DPORT BYTES``, TIME in seconds with nine decimals."""
    return f"{p.ns // 10**9}.{p.ns % 10**9:09d} {p.sport} {p.dport} {p.length}"


def parse_packets(lines: Iterable[str]) -> list[Packet]:
    """The packets of capture lines (blank lines skipped), their times to the nanosecond."""
    out = []
    for line in lines:
        if line.strip():
            ts, sport, dport, length = line.split()
            sec, _, frac = ts.partition(".")
            out.append(Packet(int(sec) * 10**9 + int(frac[:9].ljust(9, "0")), int(sport), int(dport), int(length)))
    return out


def segments(packets: Iterable[Packet], ports: frozenset[int]) -> dict[Conn, list[Segment]]:
    """Each connection's packets in time order, consecutive packets of one direction merged.

    Args:
        packets: any order; those with neither port in ``ports`` are left out.
        ports: the brokers' ports: the side of a connection they are on is the broker's.
    """
    by_conn: dict[Conn, list[Segment]] = {}
    for p in sorted(packets):
        if p.dport in ports:
            conn, request = (p.sport, p.dport), True
        elif p.sport in ports:
            conn, request = (p.dport, p.sport), False
        else:
            continue
        segs = by_conn.setdefault(conn, [])
        if segs and segs[-1].request == request:
            last = segs[-1]
            segs[-1] = last._replace(end=p.ns, packets=last.packets + 1, nbytes=last.nbytes + p.length)
        else:
            segs.append(Segment(p.ns, p.ns, request, conn, 1, p.length))
    return by_conn


def server_times(segs: Sequence[Segment]) -> list[int]:
    """Per exchange of one connection, the answer's first packet - the request's last, in ns."""
    return [b.start - a.end for a, b in pairwise(segs) if a.request and not b.request]


def client_gaps(segs: Sequence[Segment]) -> list[int]:
    """Per answer of one connection followed by a request, the request's first packet - the
    answer's last, in ns."""
    return [b.start - a.end for a, b in pairwise(segs) if not a.request and b.request]


def summary(values: Sequence[int]) -> dict:
    """``{"n", "p50_us", "mean_us"}`` of durations in ns (None for no values)."""
    if not values:
        return {"n": 0, "p50_us": None, "mean_us": None}
    return {"n": len(values), "p50_us": round(statistics.median(values) / 1000, 1),
            "mean_us": round(statistics.mean(values) / 1000, 1)}


def busy_connections(packets: Iterable[Packet], ports: frozenset[int], min_exchanges: int) -> dict[Conn, list[Segment]]:
    """The segments of the connections with at least ``min_exchanges`` exchanges."""
    return {c: s for c, s in segments(packets, ports).items() if len(server_times(s)) >= min_exchanges}


def connection_table(packets: Iterable[Packet], ports: frozenset[int], min_exchanges: int = 50) -> list[dict]:
    """Per connection with at least ``min_exchanges`` exchanges, busiest first: its ports,
    exchange count, and the broker's time and the client's gaps (``summary``)."""
    rows = []
    for (client, broker), segs in busy_connections(packets, ports, min_exchanges).items():
        serv = server_times(segs)
        rows.append({"client_port": client, "broker_port": broker, "exchanges": len(serv),
                     "server": summary(serv), "client_gap": summary(client_gaps(segs))})
    return sorted(rows, key=lambda r: (-r["exchanges"], r["client_port"], r["broker_port"]))


def _is_txn(window: Sequence[Segment], coordinator: Conn) -> bool:
    return ([s.conn == coordinator for s in window] == list(TXN_CONNS)
            and [s.request for s in window] == list(TXN_REQUESTS)
            and window[2].conn == window[3].conn)


def txn_windows(by_conn: dict[Conn, list[Segment]], coordinator: Conn) -> list[tuple[int, ...]]:
    """The phase durations (ns, in ``PHASES`` order) of each one-message transaction.

    All connections' segments, in order of their first packet, are matched against
    AddPartitionsToTxn's request and answer on ``coordinator``, then a request and its
    answer on one other connection (the Produce), then EndTxn's request and answer on
    ``coordinator``, with nothing else in between; the last phase runs to the
    coordinator's next request (the next AddPartitionsToTxn), whatever other connections
    carry meanwhile: there the coordinator sends WriteTxnMarkers to a peer leading the
    partition. The same shape, shifted by one request, would take those markers for a
    Produce, so a match must be anchored: its first request follows an answer on
    ``coordinator`` directly, its EndTxn's answer is followed directly by ``coordinator``'s
    next request (a transaction on a partition the coordinator leads: no markers cross the
    wire), or it starts where the previous match ended. A break (a stray segment, a
    transaction of another shape) drops the chain until the next anchor.
    """
    stream = sorted(s for segs in by_conn.values() for s in segs)
    mine = [i for i, s in enumerate(stream) if s.conn == coordinator]
    next_mine = dict(pairwise(mine))  # index in stream -> the coordinator's next segment's
    n = len(TXN_CONNS)
    out = []
    chained = None
    for i in mine:
        window = stream[i:i + n]
        end = next_mine.get(i + n - 1)
        if len(window) < n or end is None or not stream[end].request or not _is_txn(window, coordinator):
            continue
        after_answer = i > 0 and stream[i - 1].conn == coordinator and not stream[i - 1].request
        if i == chained or after_answer or end == i + n:
            out.append(tuple(b.start - a.end for a, b in pairwise([*window, stream[end]])))
            chained = end
    return out


def _total(phases: dict, names: Sequence[str], key: str) -> float | None:
    values = [phases[n][key] for n in names]
    return None if None in values else round(sum(values), 1)


def txn_phases(packets: Iterable[Packet], ports: frozenset[int], min_exchanges: int = 50) -> dict:
    """The phases of a one-message transactional producer's transactions (``txn_windows``).

    Args:
        packets: a capture.
        ports: the brokers' ports.
        min_exchanges: connections with fewer exchanges are left out (set-up, admin clients).

    Returns:
        ``coordinator`` (its ports; the connection with the most exchanges), its
        ``coordinator_exchanges``, the ``transactions`` matched, ``coverage`` (the share of
        the coordinator's exchanges inside one), ``phases`` (a ``summary`` per phase) and
        the sums of their p50s and means: ``server_p50_us``, ``client_p50_us``,
        ``p50_sum_us``, ``mean_sum_us``.
    """
    by_conn = busy_connections(packets, ports, min_exchanges)
    counts = {c: len(server_times(s)) for c, s in by_conn.items()}
    coordinator = max(counts, key=lambda c: counts[c]) if counts else None
    windows = txn_windows(by_conn, coordinator) if coordinator else []
    phases = {name: summary([w[k] for w in windows]) for k, name in enumerate(PHASES)}
    n = counts.get(coordinator, 0)
    return {
        "coordinator": None if coordinator is None else {"client_port": coordinator[0], "broker_port": coordinator[1]},
        "coordinator_exchanges": n, "transactions": len(windows),
        "coverage": round(2 * len(windows) / n, 3) if n else None,
        "phases": phases,
        "server_p50_us": _total(phases, SERVER_PHASES, "p50_us"),
        "client_p50_us": _total(phases, CLIENT_PHASES, "p50_us"),
        "p50_sum_us": _total(phases, PHASES, "p50_us"),
        "mean_sum_us": _total(phases, PHASES, "mean_us"),
    }


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def connections_text(rows: Sequence[dict]) -> str:
    """``connection_table`` as a table."""
    lines = [f"{'client':>6} {'broker':>6} {'exchanges':>9}  {'server p50':>10} {'mean':>6}  "
             f"{'client gap p50':>14} {'mean':>6}   (us)"]
    for r in rows:
        s, g = r["server"], r["client_gap"]
        lines.append(f"{r['client_port']:>6} {r['broker_port']:>6} {r['exchanges']:>9}  {_us(s['p50_us']):>10} "
                     f"{_us(s['mean_us']):>6}  {_us(g['p50_us']):>14} {_us(g['mean_us']):>6}")
    return "\n".join(lines)


def txn_text(result: dict) -> str:
    """``txn_phases`` as a table."""
    c = result["coordinator"]
    if c is None:
        return "no connection with enough exchanges"
    cover = result["coverage"]
    lines = [f"coordinator connection {c['client_port']} -> {c['broker_port']}: "
             f"{result['coordinator_exchanges']} exchanges, {result['transactions']} transactions matched "
             f"(coverage {'-' if cover is None else f'{cover:.0%}'})",
             f"{'phase':<40} {'n':>6} {'p50 us':>8} {'mean us':>8}"]
    for name in PHASES:
        p = result["phases"][name]
        lines.append(f"{LABELS[name]:<40} {p['n']:>6} {_us(p['p50_us']):>8} {_us(p['mean_us']):>8}")
    lines += [f"{'broker (sum of p50)':<47} {_us(result['server_p50_us']):>8}",
              f"{'client (sum of p50)':<47} {_us(result['client_p50_us']):>8}",
              f"{'transaction (sum of p50, of means)':<47} {_us(result['p50_sum_us']):>8} "
              f"{_us(result['mean_sum_us']):>8}"]
    return "\n".join(lines)


# --- the capture: an AF_PACKET socket on lo (Linux, root or CAP_NET_RAW) -----------------

ETH_P_ALL = 0x0003
SO_TIMESTAMPNS = 35  # <asm-generic/socket.h>; Python's socket module does not name it
SO_RCVBUFFORCE = 33  # past net.core.rmem_max (needs CAP_NET_ADMIN)
SOL_PACKET = 263
PACKET_STATISTICS = 6  # struct tpacket_stats: packets, drops (reset by each read)
SNAPLEN = ETH_HEADER + 60 + 60  # the longest IPv4 and TCP headers
RCVBUF = 64 << 20  # a few seconds of packets while the reader is descheduled
POLL_S = 0.2  # how often the reader looks at its stop condition when lo is quiet


def open_capture() -> socket.socket:
    """An AF_PACKET socket on ``lo`` that timestamps each packet.

    Raises:
        click.ClickException: without root or CAP_NET_RAW.
    """
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except PermissionError as e:
        raise click.ClickException(f"capturing needs root or CAP_NET_RAW (an AF_PACKET socket): {e}") from e
    s.bind(("lo", 0))
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
    except PermissionError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.settimeout(POLL_S)
    return s


def _timestamp_ns(ancillary: list[tuple[int, int, bytes]]) -> int:
    data = next(d for level, kind, d in ancillary if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS)
    sec, ns = struct.unpack("qq", data[:16])
    return sec * 10**9 + ns


def capture(sock: socket.socket, ports: frozenset[int], done: Callable[[], bool]) -> tuple[list[Packet], dict]:
    """Read ``sock`` (``open_capture``) until ``done()`` or Ctrl-C, then close it.

    Returns:
        The packets with a TCP payload from or to ``ports``, and counts: ``packets`` seen
        (each once), ``kept``, ``dropped`` by the kernel (the socket's buffer was full).
    """
    kept: list[Packet] = []
    seen = 0
    with sock:
        try:
            while not done():
                try:
                    frame, ancillary, _flags, addr = sock.recvmsg(SNAPLEN, socket.CMSG_SPACE(16))
                except TimeoutError:
                    continue
                if addr[2] == socket.PACKET_OUTGOING:  # lo shows each packet leaving and arriving
                    continue
                seen += 1
                tcp = tcp_payload(frame)
                if tcp and tcp[2] > 0 and (tcp[0] in ports or tcp[1] in ports):
                    kept.append(Packet(_timestamp_ns(ancillary), *tcp))
        except KeyboardInterrupt:
            pass
        _received, dropped = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return kept, {"packets": seen, "kept": len(kept), "dropped": dropped}


# --- the command line ----------------------------------------------------------------------

def _ports(_ctx, _param, value: str) -> frozenset[int]:
    try:
        ports = frozenset(int(p) for p in value.split(",") if p.strip())
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of ports: {value!r}") from None
    if not ports:
        raise click.BadParameter("no port given")
    return ports


def ports_option(f):
    return click.option("--ports", required=True, callback=_ports,
                        help="The brokers' listener ports, comma-separated (e.g. 19950,19951,19952).")(f)


def min_exchanges_option(f):
    return click.option("--min-exchanges", type=int, default=50, show_default=True,
                        help="Leave out connections with fewer exchanges (set-up, admin clients).")(f)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="One JSON line instead of a table.")(f)


def _read(path: Path) -> list[Packet]:
    return parse_packets(path.read_text().splitlines())


def _write(path: Path, packets: Sequence[Packet]) -> None:
    path.write_text("".join(format_packet(p) + "\n" for p in packets))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Split a Kafka client's requests into the broker's time and the client's, from
    loopback packets."""


@cli.command("capture")
@ports_option
@click.option("--seconds", type=float, default=10.0, show_default=True, help="How long (Ctrl-C ends it sooner).")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="Where to write the packets, one per line: TIME SPORT DPORT BYTES.")
def capture_cmd(ports: frozenset[int], seconds: float, out: Path) -> None:
    """Capture the TCP packets with a payload from or to PORTS on lo (root or CAP_NET_RAW)."""
    sock = open_capture()
    t0 = time.monotonic()
    packets, counts = capture(sock, ports, lambda: time.monotonic() - t0 >= seconds)
    _write(out, packets)
    click.echo(json.dumps({"out": str(out), "seconds": round(time.monotonic() - t0, 3), **counts}))


@cli.command()
@click.argument("path", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@ports_option
@min_exchanges_option
@json_option
def connections(path: Path, ports: frozenset[int], min_exchanges: int, as_json: bool) -> None:
    """Per connection of a capture: exchanges, the broker's time, the client's gaps."""
    rows = connection_table(_read(path), ports, min_exchanges)
    click.echo(json.dumps({"connections": rows}) if as_json else connections_text(rows))


@cli.command()
@click.argument("path", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@ports_option
@min_exchanges_option
@json_option
def txn(path: Path, ports: frozenset[int], min_exchanges: int, as_json: bool) -> None:
    """The phases of a one-message transactional producer's transactions in a capture."""
    result = txn_phases(_read(path), ports, min_exchanges)
    click.echo(json.dumps(result) if as_json else txn_text(result))


@cli.command()
@ports_option
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Also write the packets here.")
@min_exchanges_option
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(ctx: click.Context, ports: frozenset[int], out: Path | None, min_exchanges: int, as_json: bool,
        command: tuple[str, ...]) -> None:
    """Capture while COMMAND runs (after --), then print ``connections`` and ``txn``; exit
    with COMMAND's status."""
    sock = open_capture()
    stop = threading.Event()
    result: list[tuple[list[Packet], dict]] = []
    reader = threading.Thread(target=lambda: result.append(capture(sock, ports, stop.is_set)), daemon=True)
    reader.start()
    try:
        rc = subprocess.run(command).returncode
    finally:
        stop.set()
        reader.join()
    packets, counts = result[0]
    if out is not None:
        _write(out, packets)
    rows, phases = connection_table(packets, ports, min_exchanges), txn_phases(packets, ports, min_exchanges)
    if as_json:
        click.echo(json.dumps({"capture": counts, "connections": rows, "txn": phases}))
    else:
        click.echo(f"{counts['kept']} packets kept of {counts['packets']}, {counts['dropped']} dropped by the kernel")
        click.echo(connections_text(rows))
        click.echo(txn_text(phases))
    ctx.exit(rc)


if __name__ == "__main__":
    cli()
