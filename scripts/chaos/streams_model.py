"""The ``streams`` scenario's data and verdict (pure): the input the application gets, the
output it must give, computed here independently of Kafka Streams, and the judgement of what
was read back ``read_committed`` (``compat/streams/EosStreamsApp.java`` names the topology).

Input (from the seed): ``CUSTOMERS`` customers, each in one of ``REGIONS``, written to the
``customers`` table before the orders with earlier timestamps; ``n`` orders, order ``i`` of a
random customer and amount, with event time ``base_ms + i * STEP_MS`` (so the orders
span windows of every customer), keyed by order id. The scenario takes ``base_ms`` from
``recent_base``: event times in the hour before the run, not years back, because a broker's
time retention goes by record timestamps (``retention.ms`` 7 days for the input and output
topics, about 2 days for the windowed store's changelog, which Streams creates): Apache 4.4's
retention check deletes whole logs of older records, the active segment included, so it
would delete orders not yet processed and the changelog a restore reads.

Expected output:
- ``enriched``: every order exactly once, "orderId,customerId,amount,region";
- ``windowed-totals``: per customer and 1-minute window, the last update is "count,sum" of
  its orders, and each key's updates only grow in its partition's offset order (a count
  that falls or repeats is an order applied twice, or a store that lost state: restored
  from a changelog missing records);
- ``region-totals``: likewise per region, over all orders.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import NamedTuple

CUSTOMERS = 500
REGIONS = ("north", "south", "east", "west", "centre")
BASE_TS_MS = 1_700_000_000_000  # the unit tests' base; a run uses ``recent_base``
RECENT_MS = 3_600_000  # the last order's event time is this long before the run
STEP_MS = 25  # 200k orders span 5000 s: 84 windows of a minute
WINDOW_MS = 60_000
MAX_AMOUNT = 1000
EXAMPLES = 5
EXAMPLES_REGRESSIONS = 50  # each with its partition and offsets: the evidence to look up


@dataclass(frozen=True)
class Data:
    customers: dict[str, str]  # customer id -> region
    orders: list[tuple[str, str, int, int]]  # (order id, customer id, amount, timestamp ms)
    base_ms: int = BASE_TS_MS  # the first order's event time; the customers' is an hour earlier


class Record(NamedTuple):
    """A record read back from an output topic."""

    partition: int
    offset: int
    key: str
    value: str


def recent_base(now_ms: int, n: int) -> int:
    """A first event time, on a minute, such that ``n`` orders end ``RECENT_MS`` before
    ``now_ms``: far inside every retention, never in the future."""
    base = now_ms - RECENT_MS - n * STEP_MS
    return base - base % WINDOW_MS


def generate(seed: int, n: int, base_ms: int = BASE_TS_MS) -> Data:
    rnd = random.Random(seed)
    customers = {f"c{c:04d}": rnd.choice(REGIONS) for c in range(CUSTOMERS)}
    ids = sorted(customers)
    orders = [(f"o{i:07d}", rnd.choice(ids), rnd.randint(1, MAX_AMOUNT), base_ms + i * STEP_MS) for i in range(n)]
    return Data(customers, orders, base_ms)


def order_value(order: tuple[str, str, int, int]) -> str:
    """The ``orders`` record's value."""
    oid, cust, amount, _ts = order
    return f"{oid},{cust},{amount}"


@dataclass(frozen=True)
class Expected:
    enriched: dict[str, str]  # order id -> "orderId,customerId,amount,region"
    windows: dict[str, str]  # "customerId@windowStartMs" -> "count,sum"
    regions: dict[str, str]  # region -> "count,sum"


def expected(data: Data) -> Expected:
    enriched = {}
    windows: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    regions: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for oid, cust, amount, ts in data.orders:
        region = data.customers[cust]
        enriched[oid] = f"{oid},{cust},{amount},{region}"
        for acc in (windows[f"{cust}@{ts - ts % WINDOW_MS}"], regions[region]):
            acc[0] += 1
            acc[1] += amount
    return Expected(enriched, {k: f"{c},{s}" for k, (c, s) in windows.items()},
                    {k: f"{c},{s}" for k, (c, s) in regions.items()})


def _distinct(reads: list[Record]) -> tuple[list[Record], int]:
    """Each offset once (a consumer's re-read is not the topic's), in offset order per
    partition; and how many offsets were read with two different records."""
    seen: dict[tuple[int, int], Record] = {}
    conflicts = 0
    for r in reads:
        prev = seen.setdefault((r.partition, r.offset), r)
        conflicts += prev != r
    return [seen[k] for k in sorted(seen)], conflicts


def _table_verdict(want: dict[str, str], reads: list[Record]) -> dict:
    """An aggregate's changelog-like output: the last update per key equals ``want``, and
    every key's counts strictly grow from update to update.

    What exactly-once Streams guarantees here: each key is written by one producer
    partitioner to one partition (a key found in two is ``split_keys``), so that partition's
    offset order is the key's update order; each input record is applied once, so each
    committed update of a key has a higher count than the one before it (the record cache
    may fold updates, never repeat or undo one). Each regression example names both
    updates' partition and offset, to find them in the log."""
    records, conflicts = _distinct(reads)
    last: dict[str, Record] = {}
    regressions: list[dict] = []
    split: set[str] = set()
    for r in records:
        before = last.get(r.key)
        if before is not None and before.partition != r.partition:
            split.add(r.key)  # offset order says nothing across partitions
        elif before is not None and int(r.value.split(",")[0]) <= int(before.value.split(",")[0]):
            regressions.append({"key": r.key, "partition": r.partition, "before": before.value,
                                "before_offset": before.offset, "after": r.value, "after_offset": r.offset})
        if before is None or before.partition == r.partition:
            last[r.key] = r
    final = {k: r.value for k, r in last.items()}
    wrong = sorted(k for k in want if final.get(k) != want[k])
    extra = sorted(set(final) - set(want))
    return {"keys": len(want), "updates": len(records), "wrong_final": len(wrong), "unexpected_keys": len(extra),
            "regressions": len(regressions), "split_keys": len(split), "conflicting_offsets": conflicts,
            "examples": {"wrong_final": [f"{k}: want {want[k]}, got {final.get(k)}" for k in wrong[:EXAMPLES]],
                         "unexpected_keys": extra[:EXAMPLES], "split_keys": sorted(split)[:EXAMPLES],
                         "regressions": regressions[:EXAMPLES_REGRESSIONS]},
            "ok": not (wrong or extra or regressions or split or conflicts)}


def verdict(exp: Expected, reads: dict[str, list[Record]]) -> dict:
    """The judgement of the three output topics read back read_committed."""
    records, conflicts = _distinct(reads.get("enriched", []))
    ids = Counter(r.value.split(",", 1)[0] for r in records)
    dups = sorted(o for o, c in ids.items() if c > 1)
    lost = sorted(set(exp.enriched) - set(ids))
    unexpected = sorted(set(ids) - set(exp.enriched))
    wrong = sorted({r.value.split(",", 1)[0] for r in records
                    if exp.enriched.get(r.value.split(",", 1)[0], r.value) != r.value
                    or r.key != r.value.split(",")[1]})
    enriched = {"input": len(exp.enriched), "output": len(records), "duplicates": sum(ids[o] - 1 for o in dups),
                "lost": len(lost), "unexpected": len(unexpected), "wrong_value": len(wrong),
                "conflicting_offsets": conflicts,
                "examples": {"duplicates": dups[:EXAMPLES], "lost": lost[:EXAMPLES],
                             "unexpected": unexpected[:EXAMPLES], "wrong_value": wrong[:EXAMPLES]}}
    enriched["ok"] = not (dups or lost or unexpected or wrong or conflicts)
    windows = _table_verdict(exp.windows, reads.get("windowed-totals", []))
    regions = _table_verdict(exp.regions, reads.get("region-totals", []))
    return {"enriched": enriched, "windowed_totals": windows, "region_totals": regions,
            "ok": enriched["ok"] and windows["ok"] and regions["ok"]}
