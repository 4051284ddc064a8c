"""The mixed-tv chaos scenario's verdict (scripts/chaos/mixed_verdict.py): TV1 transactions
judged as wholes, the TV2 copy's seed values once and in order, the failpoint tally."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from chaos.mixed_verdict import (  # noqa: E402
    ABORTED,
    COMMITTED,
    UNKNOWN,
    Rec,
    Txn,
    aborted_in_log,
    judge,
    kills_by_point,
    outcomes,
    seed_value,
    torn_transactions,
    tv1_value,
    version_violations,
)

P = 3


def log(values: list[str]) -> list[Rec]:
    """``values`` written in this order, each to partition ``i % P`` (offsets per partition)."""
    nxt = [0] * P
    out = []
    for i, v in enumerate(values):
        p = int(v) % P if v.isdigit() else i % P
        out.append(Rec(p, nxt[p], v))
        nxt[p] += 1
    return out


def txn_values(producer: str, t: int, size: int) -> list[str]:
    return [tv1_value(producer, t, i, size) for i in range(size)]


def test_a_clean_mixed_log_passes():
    txns = {("a", 1): Txn(4, COMMITTED), ("a", 2): Txn(4, ABORTED), ("b", 1): Txn(4, COMMITTED),
            ("b", 2): Txn(4, UNKNOWN)}
    values = txn_values("a", 1, 4) + [seed_value(k) for k in range(6)] + txn_values("b", 1, 4)
    v = judge(log(values), txns, 6, P)
    assert v["ok"], v
    assert (v["records"], v["tv1_records"], v["seed_records"]) == (14, 8, 6)


def test_re_reads_of_one_offset_are_no_duplicates():
    reads = log(txn_values("a", 1, 3))
    v = judge(reads + reads[:2], {("a", 1): Txn(3, COMMITTED)}, 0, P)
    assert v["ok"] and v["duplicates"] == 0


def test_an_aborted_transaction_visible_is_an_aborted_read():
    txns = {("a", 1): Txn(3, ABORTED)}
    v = judge(log(txn_values("a", 1, 3)), txns, 0, P)
    assert not v["ok"] and v["aborted_reads"] == 3 and v["torn"] == 0


def test_a_partly_visible_transaction_is_torn_whatever_its_outcome():
    for outcome in (COMMITTED, ABORTED, UNKNOWN):
        v = judge(log(txn_values("a", 1, 4)[:3]), {("a", 1): Txn(4, outcome)}, 0, P)
        assert not v["ok"] and v["torn"] == 1, outcome
        assert v["examples"]["torn"] == [f"a:1 (3 of 4 records, {outcome})"]


def test_a_missing_committed_transaction_is_lost_an_unknown_one_is_not():
    txns = {("a", 1): Txn(2, COMMITTED), ("a", 2): Txn(2, UNKNOWN)}
    v = judge([], txns, 0, P)
    assert v["lost"] == 2 and v["torn"] == 0 and not v["ok"]
    assert judge(log(txn_values("a", 1, 2)), txns, 0, P)["ok"]


def test_seed_values_once_and_in_partition_order():
    good = log([seed_value(k) for k in range(9)])
    assert judge(good, {}, 9, P)["ok"]
    dup = good + [Rec(0, 3, seed_value(0))]
    assert judge(dup, {}, 9, P)["duplicates"] == 1
    assert judge(good[:-1], {}, 9, P)["lost"] == 1
    swapped = [Rec(0, 0, "3"), Rec(0, 1, "0"), *[r for r in good if r.partition != 0], Rec(0, 2, "6")]
    assert judge(swapped, {}, 9, P)["order_violations"] == 1


def test_a_value_nobody_wrote_is_a_phantom():
    v = judge([Rec(0, 0, "junk")], {}, 0, P)
    assert v["phantoms"] == 1 and not v["ok"]


@given(st.lists(st.tuples(st.integers(1, 5), st.sampled_from([COMMITTED, ABORTED, UNKNOWN]), st.booleans()),
                max_size=12),
       st.data())
def test_property_whole_transactions_pass_parts_are_torn(spec, data):
    txns, values, expect_torn = {}, [], 0
    for t, (size, outcome, shown) in enumerate(spec):
        txns[("p", t)] = Txn(size, outcome)
        if outcome == COMMITTED or (outcome == UNKNOWN and shown):
            vs = txn_values("p", t, size)
            if size > 1 and data.draw(st.booleans()):
                vs = vs[:data.draw(st.integers(1, size - 1))]
                expect_torn += 1
            values += vs
    v = judge(log(values), txns, 0, P)
    assert v["torn"] == expect_torn == len(torn_transactions(values, txns))
    assert v["aborted_reads"] == 0
    assert v["ok"] == (expect_torn == 0)


def test_outcomes_by_producer():
    txns = {("a", 1): Txn(1, COMMITTED), ("a", 2): Txn(1, ABORTED), ("b", 1): Txn(1, UNKNOWN)}
    assert outcomes(txns) == {"a": {COMMITTED: 1, ABORTED: 1, UNKNOWN: 0}, "b": {COMMITTED: 0, ABORTED: 0, UNKNOWN: 1}}


def test_kills_by_point_reads_the_chaos_log():
    points = ("endtxn.after_prepare", "endtxn.before_complete")
    faults = ["armed endtxn.after_prepare (crash) on every broker", "broker [2] crashed at endtxn.after_prepare",
              "armed endtxn.before_complete (crash) on every broker", "endtxn.before_complete did not fire in 8.0 s",
              "armed endtxn.after_prepare (crash) on every broker", "broker [0] crashed at endtxn.after_prepare"]
    assert kills_by_point(faults, points) == {
        "endtxn.after_prepare": {"armed": 2, "crashes": 2, "not_fired": 0},
        "endtxn.before_complete": {"armed": 1, "crashes": 0, "not_fired": 1}}


def test_version_violations_name_the_ids_on_the_wrong_version():
    versions = {"tv1-0": {"transaction_version": 1}, "java-0": {"transaction_version": 1}}
    assert version_violations(versions, ["tv1-0"], ["java-0", "java-1"]) == [
        "java-0: transaction.version 1, expected 2", "java-1: transaction.version None, expected 2"]


def test_aborted_in_log_counts_distinct_records_of_aborted_transactions():
    txns = {("a", 1): Txn(2, ABORTED), ("a", 2): Txn(2, COMMITTED)}
    reads = log(txn_values("a", 1, 2) + txn_values("a", 2, 2) + [seed_value(0)])
    assert aborted_in_log(reads + reads[:1], txns) == 2
