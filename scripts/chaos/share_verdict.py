"""The ``share`` scenario's verdict, per record, from what the clients reported, what the
log holds and what the share-partition files say at the end (pure: no I/O).

A record is one committed offset of the topic (its read_committed read-back). The
guarantees (KIP-932, at-least-once with explicit acknowledgement):

- **delivered**: every committed record is delivered at least once;
- **not lost**: every committed record is eventually accepted (an ACCEPT answered success;
  or, when the answer was lost, the files say it was acknowledged); a record archived
  because its delivery count reached ``group.share.delivery.count.limit`` is counted, not
  an anomaly (that is what the limit is for);
- **not accepted twice**: at most one ACCEPT of a record is answered success, and once one
  is, the record is never delivered again (no delivery with a higher delivery count);
- **one delivery per attempt**: no two deliveries of a record with the same delivery
  count (a lock handed out twice);
- **within the limit**: no delivery count above the limit;
- **nothing aborted**: no value of a transaction whose abort succeeded is delivered, none
  is in the read-back, and nothing delivered is absent from it (or differs at its offset);
- **nothing acknowledged to a producer is missing** from the read-back.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

ACCEPT, RELEASE, REJECT = 1, 2, 3
EXAMPLES = 5  # anomalies listed per kind


@dataclass(frozen=True, slots=True)
class Delivery:
    consumer: str
    partition: int
    offset: int
    value: str
    count: int


@dataclass(frozen=True, slots=True)
class Ack:
    consumer: str
    partition: int
    offset: int
    kind: int  # ACCEPT, RELEASE, REJECT; -1 when the consumer did not say (not its record)
    count: int  # the delivery count of the delivery it acknowledged
    error: str | None


@dataclass(slots=True)
class Evidence:
    """Everything the verdict reads.

    ``final``: per partition the share partition's start offset and its runs (first,
    last, state name, delivery count) as its files hold them after the run; a partition
    missing there had no share state.
    """

    committed: dict[tuple[int, int], str]
    deliveries: list[Delivery]
    acks: list[Ack]
    aborted: set[str]
    produced: set[str]
    limit: int
    final: dict[int, tuple[int, list[tuple[int, int, str, int]]]] = field(default_factory=dict)


def final_state(ev: Evidence, partition: int, offset: int) -> tuple[str, int]:
    """(state, delivery count) of the offset in the files: ``done`` below the start offset
    (acknowledged or archived), ``unread`` past the window's end or with no state."""
    got = ev.final.get(partition)
    if got is None:
        return "unread", 0
    start, runs = got
    if offset < start:
        return "done", 0
    for first, last, state, count in runs:
        if first <= offset <= last:
            return state.lower(), count
    return "unread", 0


def verdict(ev: Evidence) -> dict:
    """The counts and the anomalies (kind -> how many, and a few examples)."""
    by_rec: dict[tuple[int, int], list[Delivery]] = defaultdict(list)
    for d in ev.deliveries:
        by_rec[(d.partition, d.offset)].append(d)
    accepts: dict[tuple[int, int], list[Ack]] = defaultdict(list)
    released = failed = 0
    for a in ev.acks:
        if a.error is not None:
            failed += 1
        elif a.kind == ACCEPT:
            accepts[(a.partition, a.offset)].append(a)
        elif a.kind == RELEASE:
            released += 1
    anomalies: dict[str, list[str]] = defaultdict(list)
    archived_at_limit = answer_lost = 0
    values = set(ev.committed.values())
    for rec, value in sorted(ev.committed.items()):
        ds = by_rec.get(rec, [])
        ok = accepts.get(rec, [])
        state, fcount = final_state(ev, *rec)
        top = max((d.count for d in ds), default=0)
        if not ds:
            anomalies["never delivered"].append(f"{rec} {value!r} (files: {state})")
        if not ok:
            if state == "acknowledged" or (state == "done" and ds and top < ev.limit):
                answer_lost += 1
            elif state in ("archived", "done") and max(top, fcount) >= ev.limit:
                archived_at_limit += 1
            elif ds:
                anomalies["lost (delivered, never accepted)"].append(
                    f"{rec} {value!r}: deliveries {sorted(d.count for d in ds)}, files: {state}")
        if len(ok) > 1:
            anomalies["accepted twice"].append(f"{rec} {value!r}: by {[(a.consumer, a.count) for a in ok]}")
        if ok:
            first_ok = min(a.count for a in ok)
            later = sorted(d.count for d in ds if d.count > first_ok)
            if later:
                anomalies["delivered after an accept answered success"].append(
                    f"{rec} {value!r}: accepted at delivery {first_ok}, delivered again at {later}")
        # A SIGKILLed consumer's session closes with its connection, and the leader
        # releases what it held with the delivery counts kept (Apache 4.4): every delivery
        # of a record, to any incarnation, has a count of its own
        counts = sorted(d.count for d in ds)
        if len(set(counts)) != len(counts):
            anomalies["delivered twice at one delivery count"].append(
                f"{rec} {value!r}: {[(d.consumer, d.count) for d in ds]}")
    for rec, ds in sorted(by_rec.items()):
        value = ev.committed.get(rec)
        if any(d.count > ev.limit for d in ds):
            anomalies["delivery count over the limit"].append(f"{rec}: {sorted(d.count for d in ds)} > {ev.limit}")
        for v in sorted({d.value for d in ds}):
            if v in ev.aborted:
                anomalies["aborted record delivered"].append(f"{rec} {v!r}")
            elif value is None:
                anomalies["delivered, not in the committed log"].append(f"{rec} {v!r}")
            elif v != value:
                anomalies["delivered a value the log does not hold there"].append(f"{rec} {v!r} != {value!r}")
    for v in sorted(ev.aborted & values):
        anomalies["aborted record in the read_committed log"].append(repr(v))
    for v in sorted(ev.produced - values):
        anomalies["producer-acknowledged record missing from the log"].append(repr(v))
    delivered = [rec for rec in ev.committed if rec in by_rec]
    counts = {
        "committed": len(ev.committed),
        "aborted_values": len(ev.aborted),
        "delivered": len(delivered),
        "deliveries": len(ev.deliveries),
        "redeliveries": sum(1 for d in ev.deliveries if d.count > 1),
        "max_delivery_count": max((d.count for d in ev.deliveries), default=0),
        "accepted": sum(1 for rec in ev.committed if rec in accepts),
        "accept_answer_lost": answer_lost,
        "released": released,
        "ack_failures": failed,
        "archived_at_limit": archived_at_limit,
    }
    return {"counts": counts, "anomalies": {k: len(v) for k, v in anomalies.items()},
            "examples": {k: v[:EXAMPLES] for k, v in anomalies.items()},
            "ok": not anomalies}
