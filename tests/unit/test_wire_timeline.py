"""scripts/wire_timeline.py's analysis: synthetic packets in, broker times, client gaps and
transaction phases out (no capture socket)."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import wire_timeline as wt  # noqa: E402
from wire_timeline import Packet  # noqa: E402

BROKER = 9092
PORTS = frozenset({BROKER})
COORD = (50001, BROKER)  # the transaction coordinator's connection
PRODUCE = (50002, BROKER)
PEER_LINK = (50009, BROKER)  # the coordinator's to the leader of a partition
T0 = 1_700_000_000 * 10**9  # ns
US = 1000  # ns
# one transaction's phases, us: AddPartitions broker, gap, Produce broker, gap, EndTxn broker, gap
PHASE_US = (400, 90, 350, 85, 360, 1240)


def q(t: int, conn: tuple[int, int], n: int = 100) -> Packet:
    """A request packet (client to broker) at ``t``."""
    return Packet(t, conn[0], conn[1], n)


def r(t: int, conn: tuple[int, int], n: int = 50) -> Packet:
    """An answer packet (broker to client) at ``t``."""
    return Packet(t, conn[1], conn[0], n)


def transactions(n: int, t: int = T0, phases_us=PHASE_US, markers: bool = False) -> tuple[list[Packet], int]:
    """``n`` one-message transactions from ``t``, one packet per request and answer, and the
    next AddPartitionsToTxn's request after the last; with ``markers`` the coordinator sends
    WriteTxnMarkers to a peer 30 us after each EndTxn answer (a partition the peer leads),
    answered 100 us later. Returns the packets and when that request went out."""
    out = []
    for _ in range(n):
        steps = [t]
        for d in phases_us:
            steps.append(steps[-1] + d * US)
        aq, ar, pq, pr, eq, er, t = steps
        out += [q(aq, COORD), r(ar, COORD), q(pq, PRODUCE), r(pr, PRODUCE), q(eq, COORD), r(er, COORD)]
        if markers:
            out += [q(er + 30 * US, PEER_LINK), r(er + 130 * US, PEER_LINK)]
    out.append(q(t, COORD))
    return out, t


def test_server_time_and_gap_from_merged_packets():
    # a request in two packets, an answer in three, then the next request in two
    packets = [q(T0, COORD), q(T0 + 10 * US, COORD),
               r(T0 + 110 * US, COORD), r(T0 + 120 * US, COORD), r(T0 + 125 * US, COORD),
               q(T0 + 300 * US, COORD), q(T0 + 305 * US, COORD), r(T0 + 505 * US, COORD)]
    segs = wt.segments(reversed(packets), PORTS)[COORD]
    assert [(s.request, s.packets, s.nbytes) for s in segs] == [(True, 2, 200), (False, 3, 150), (True, 2, 200),
                                                               (False, 1, 50)]
    assert wt.server_times(segs) == [100 * US, 200 * US]  # last request -> first answer
    assert wt.client_gaps(segs) == [175 * US]  # last answer -> first request


def test_direction_is_the_broker_port_and_other_ports_are_left_out():
    packets = [q(T0, COORD), r(T0 + 1 * US, COORD), Packet(T0, 40000, 40001, 10)]
    by_conn = wt.segments(packets, PORTS)
    assert list(by_conn) == [COORD]
    assert [s.request for s in by_conn[COORD]] == [True, False]


def test_connection_table():
    packets, _ = transactions(60)
    admin = (50003, BROKER)
    packets += [q(T0 + 500_000 * US, admin), r(T0 + 500_020 * US, admin)]  # one exchange: left out
    rows = wt.connection_table(packets, PORTS, min_exchanges=50)
    assert [(row["client_port"], row["exchanges"]) for row in rows] == [(COORD[0], 120), (PRODUCE[0], 60)]
    coord, produce = rows
    assert coord["server"]["n"] == 120 and coord["client_gap"]["n"] == 120
    # the coordinator answers 60 AddPartitions in 400 us and 60 EndTxn in 360 us
    assert coord["server"]["p50_us"] == 380
    assert coord["client_gap"]["mean_us"] == (90 + 350 + 85 + 1240) / 2
    assert produce["server"] == {"n": 60, "p50_us": 350, "mean_us": 350}
    assert produce["client_gap"]["p50_us"] == 90 + 400 + 1240 + 360 + 85


def test_txn_phases():
    packets, _ = transactions(20)
    result = wt.txn_phases(packets, PORTS, min_exchanges=1)
    assert result["coordinator"] == {"client_port": COORD[0], "broker_port": BROKER}
    assert result["transactions"] == 20 and result["coordinator_exchanges"] == 40
    assert result["coverage"] == 1.0
    for name, us in zip(wt.PHASES, PHASE_US):
        assert result["phases"][name] == {"n": 20, "p50_us": us, "mean_us": us}
    assert result["server_p50_us"] == 400 + 350 + 360
    assert result["client_p50_us"] == 90 + 85 + 1240
    assert result["p50_sum_us"] == sum(PHASE_US)


def test_a_stray_packet_skips_its_transaction_and_the_walk_realigns():
    first, t = transactions(5)
    # a 6th transaction (phases unlike the others) with a stray answer on a third
    # connection 50 us after its AddPartitions answer
    broken, t = transactions(1, t, (500, 100, 500, 100, 500, 2000))
    broken.insert(2, r(broken[1].ns + 50 * US, (50003, BROKER)))
    rest, _ = transactions(5, t)
    result = wt.txn_phases(first[:-1] + broken[:-1] + rest, PORTS, min_exchanges=0)
    assert result["transactions"] == 10 and all(p["n"] == 10 for p in result["phases"].values())
    assert result["coverage"] == 0.909  # 20 of 22 coordinator exchanges
    assert all(p["p50_us"] == us and p["mean_us"] == us for p, us in zip(result["phases"].values(), PHASE_US))


def test_markers_to_a_peer_count_in_the_gap_and_are_never_a_produce():
    # one transaction on a partition the coordinator leads (no markers on the wire), then
    # five on a peer's: each chained to the one before
    first, t = transactions(1)
    rest, _ = transactions(5, t, markers=True)
    result = wt.txn_phases(first[:-1] + rest, PORTS, min_exchanges=0)
    assert result["transactions"] == 6 and result["coverage"] == 1.0
    assert all(p["p50_us"] == us and p["mean_us"] == us for p, us in zip(result["phases"].values(), PHASE_US))


def test_peer_led_transactions_without_an_anchor_are_not_guessed():
    # every transaction's markers cross the wire: shifted by one coordinator request, the
    # markers would pass for a Produce; with no transaction to anchor the walk, none match
    packets, _ = transactions(5, markers=True)
    assert wt.txn_phases(packets, PORTS, min_exchanges=0)["transactions"] == 0
    # the same after an InitProducerId exchange: each follows its predecessor
    init = [q(T0 - 300 * US, COORD), r(T0 - 200 * US, COORD)]
    assert wt.txn_phases(init + packets, PORTS, min_exchanges=0)["transactions"] == 5


def test_produce_request_and_answer_on_two_connections_is_no_transaction():
    packets, _ = transactions(1)
    packets[3] = r(packets[3].ns, (50003, BROKER))  # the "Produce" answer on another connection
    assert wt.txn_phases(packets, PORTS, min_exchanges=0)["transactions"] == 0


def test_no_busy_connection():
    result = wt.txn_phases([q(T0, COORD), r(T0 + US, COORD)], PORTS, min_exchanges=50)
    assert result["coordinator"] is None and result["transactions"] == 0 and result["p50_sum_us"] is None
    assert wt.txn_text(result) == "no connection with enough exchanges"


def test_capture_lines_round_trip():
    packets = [Packet(T0 + 123_456, 50001, 9092, 120), Packet(T0 + 1_500_000_000, 9092, 50001, 7)]
    lines = [wt.format_packet(p) for p in packets]
    assert lines == ["1700000000.000123456 50001 9092 120", "1700000001.500000000 9092 50001 7"]
    assert wt.parse_packets([*lines, ""]) == packets
    assert wt.parse_packets(["1700000000.5 1 2 3"]) == [Packet(T0 + 500_000_000, 1, 2, 3)]


def _frame(payload: int, *, ethertype: bytes = b"\x08\x00", proto: int = 6, tcp_words: int = 8) -> bytes:
    """An Ethernet/IPv4 frame cut after a TCP header of ``tcp_words`` 32-bit words (options
    zeroed) whose IP total length says ``payload`` bytes follow."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + tcp_words * 4 + payload, 0, 0, 64, proto, 0,
                     bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]))
    tcp = struct.pack("!HHIIBBHHH", 50001, 9092, 0, 0, tcp_words << 4, 0x18, 0, 0, 0) + bytes(tcp_words * 4 - 20)
    return bytes(12) + ethertype + ip + tcp


def test_tcp_payload_of_a_frame():
    assert wt.tcp_payload(_frame(1234)) == (50001, 9092, 1234)
    assert wt.tcp_payload(_frame(0, tcp_words=5)) == (50001, 9092, 0)  # a bare ACK
    assert wt.tcp_payload(_frame(10, proto=17)) is None  # UDP
    assert wt.tcp_payload(_frame(10, ethertype=b"\x86\xdd")) is None  # IPv6
    assert wt.tcp_payload(_frame(10)[:30]) is None


def test_txn_command_json(tmp_path):
    packets, _ = transactions(3)
    path = tmp_path / "wire.txt"
    path.write_text("".join(wt.format_packet(p) + "\n" for p in packets))
    result = CliRunner().invoke(wt.cli, ["txn", str(path), "--ports", str(BROKER), "--min-exchanges", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert '"transactions": 3' in result.output
    table = CliRunner().invoke(wt.cli, ["connections", str(path), "--ports", str(BROKER), "--min-exchanges", "1"])
    assert table.exit_code == 0 and f"{COORD[0]:>6} {BROKER:>6} {6:>9}" in table.output
    bad = CliRunner().invoke(wt.cli, ["txn", str(path), "--ports", "x"])
    assert bad.exit_code == 2 and "not a comma-separated list of ports" in bad.output
