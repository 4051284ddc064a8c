"""The ``rolling-restart`` scenario: every broker in turn is stopped gracefully (SIGTERM,
as Kubernetes rolls a StatefulSet), restarted by the supervisor, and waited for until it
leads partitions again, then the next one. The EOS copy runs throughout (0 anomalies);
beside it a probe producer (idempotent, acks=all, one record every 5 ms round-robin over
``PROBE_PARTITIONS`` partitions of a topic of its own) measures the longest produce gap of
each restart:

- ``gap_any_s``: the longest time without any acknowledged probe record;
- ``gap_partition_s``: the longest time between two acknowledgements of one partition
  (a partition of the stopped broker waits for its new leader, and again when it moves
  back);
- ``gap_partition_away_s``, ``gap_partition_back_s``: the same, split at the restart (while
  it drains and is down; while partitions move back to it);
- ``moved_s``: SIGTERM until the assignment names another leader for each of its partitions;
- ``back_s``: SIGTERM until it leads partitions again (the supervisor's restart delay and
  the rejoin hold included).

The figures go into the report as ``rolling``: one row per restart, and the worst of each.
"""

from __future__ import annotations

import json
import signal
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

PROBE_TOPIC = "chaos-rolling-probe"
PROBE_PARTITIONS = 6
PROBE_EVERY_S = 0.005
BACK_TIMEOUT_S = 40.0  # a broker not leading again this long after its SIGTERM fails the run
SETTLE_S = 4.0  # after a broker is back, before the next one is stopped
TARGET_GAP_S = 1.0  # issue 37's target for the longest produce gap of one restart
ROLLING_DURATION_S = 60.0  # the copy's default pace: it must outlast the three restarts


class Probe:
    """The probe producer: a thread acknowledging records, their times per partition."""

    def __init__(self, config: dict[str, str]) -> None:
        self.config = config
        self.acks: list[tuple[float, int]] = []  # (monotonic time, partition)
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="rolling-probe", daemon=True)

    def start(self) -> None:
        admin = AdminClient(self.config)
        fut = admin.create_topics([NewTopic(PROBE_TOPIC, PROBE_PARTITIONS, 1)], operation_timeout=10)[PROBE_TOPIC]
        fut.result()
        self.thread.start()

    def _run(self) -> None:
        p = Producer({**self.config, "acks": "all", "enable.idempotence": True, "linger.ms": 0,
                      "message.timeout.ms": 60000})

        def done(err, msg) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acks.append((time.monotonic(), msg.partition()))

        i = 0
        while not self.stop.is_set():
            p.produce(PROBE_TOPIC, b"p", partition=i % PROBE_PARTITIONS, on_delivery=done)
            i += 1
            p.poll(PROBE_EVERY_S)
        p.flush(60)

    def gaps(self, t0: float, t1: float) -> tuple[float, float]:
        """(longest time without any acknowledgement, longest between two of one partition)
        over the acknowledgements in [t0, t1], counting from the last one before t0."""
        acks = list(self.acks)
        last_any: float | None = None
        last: dict[int, float] = {}
        worst_any = worst_one = 0.0
        for t, part in acks:
            if t > t1:
                break
            if t >= t0:
                if last_any is not None:
                    worst_any = max(worst_any, t - last_any)
                if part in last:
                    worst_one = max(worst_one, t - last[part])
            last_any, last[part] = t, t
        return round(worst_any, 3), round(worst_one, 3)


def _leaders(data) -> tuple[dict[int, int], int]:
    """({broker: partitions it leads}, assignment version) from ``assignment.json``."""
    a = json.loads((data / "__cluster" / "assignment.json").read_text())
    led: dict[int, int] = {}
    for rows in a["partitions"].values():
        for row in rows:
            led[row["leader"]] = led.get(row["leader"], 0) + 1
    return led, int(a["version"])


def _leads(data, broker_id: int) -> int:
    try:
        return _leaders(data)[0].get(broker_id, 0)
    except (OSError, ValueError, KeyError):
        return -1  # being replaced: ask again


def run_rolling(chaos) -> None:
    """Restart every broker in turn (a thread of its own); the figures in ``chaos.figures``."""
    cluster = chaos.cluster
    probe = Probe(cluster.client_config())
    rows: list[dict] = []
    chaos.figures["rolling"] = {"restarts": rows}
    try:
        probe.start()
        time.sleep(SETTLE_S)
        for bid in range(cluster.n):
            if chaos.done:
                break
            rows.append(_restart_one(chaos, probe, bid))
            time.sleep(SETTLE_S)
    except Exception as exc:  # reported, never a hung harness
        chaos.log(f"rolling-restart: {type(exc).__name__}: {exc}")
        chaos.figures["rolling"]["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        probe.stop.set()
        probe.thread.join(90)
    done = [r for r in rows if "gap_partition_s" in r]
    summary = chaos.figures["rolling"]
    summary.update({
        "brokers_restarted": len(done),
        "worst_gap_any_s": max((r["gap_any_s"] for r in done), default=None),
        "worst_gap_partition_s": max((r["gap_partition_s"] for r in done), default=None),
        "worst_moved_s": max((r["moved_s"] for r in done if r["moved_s"] is not None), default=None),
        "probe_acks": len(probe.acks), "probe_errors": probe.errors[:10],
    })
    summary["ok"] = len(done) == cluster.n and not probe.errors and "error" not in summary
    chaos.log(f"rolling-restart: {len(done)} restarts, longest produce gap "
              f"{summary['worst_gap_partition_s']} s on one partition, {summary['worst_gap_any_s']} s overall "
              f"(target {TARGET_GAP_S} s), probe errors {len(probe.errors)}")


def _restart_one(chaos, probe: Probe, bid: int) -> dict:
    cluster = chaos.cluster
    data = cluster.data
    old_pid = cluster.pid(bid)
    t0 = time.monotonic()
    cluster.signal(bid, signal.SIGTERM)
    chaos.log(f"SIGTERM broker {bid} (rolling restart)", time.time(), "other")
    moved = None
    deadline = t0 + BACK_TIMEOUT_S
    while time.monotonic() < deadline:
        if _leads(data, bid) == 0:
            moved = round(time.monotonic() - t0, 3)
            break
        time.sleep(0.01)
    cluster.wait_restarted(bid, old_pid, timeout=max(1.0, deadline - time.monotonic()))
    restarted = time.monotonic()
    back = None
    while time.monotonic() < deadline:
        if _leads(data, bid) > 0:
            back = round(time.monotonic() - t0, 3)
            break
        time.sleep(0.02)
    if back is None:
        raise RuntimeError(f"broker {bid} did not lead partitions again within {BACK_TIMEOUT_S:.0f} s")
    time.sleep(SETTLE_S / 2)  # the partitions that moved back serve again
    end = time.monotonic()
    gap_any, gap_one = probe.gaps(t0, end)
    row = {"broker": bid, "moved_s": moved, "back_s": back, "gap_any_s": gap_any, "gap_partition_s": gap_one,
           # the same, split: while it drains and is down, and while its partitions move back
           "gap_partition_away_s": probe.gaps(t0, restarted)[1], "gap_partition_back_s": probe.gaps(restarted, end)[1]}
    chaos.log(f"broker {bid} back: {row}")
    return row
