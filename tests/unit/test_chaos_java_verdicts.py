"""The verdicts of the Java chaos scenarios (pure): ``apache-eos``'s copy verdict over what
VerifiableConsumer read, and ``streams``'s expected results and verdict."""

from __future__ import annotations

import random
import sys
from collections import defaultdict
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from chaos import streams_model as model  # noqa: E402
from chaos.copy_verdict import Read, copy_verdict  # noqa: E402

INPUTS = {0: ["0", "2", "4"], 1: ["1", "3"]}


def reads_of(outputs: dict[int, list[str]]) -> list[Read]:
    return [Read(p, o, v) for p, vs in outputs.items() for o, v in enumerate(vs)]


def test_an_exact_copy_passes_and_a_reread_offset_is_no_duplicate():
    reads = reads_of(INPUTS)
    v = copy_verdict(INPUTS, reads + reads[:2])
    assert v["ok"] and (v["input"], v["output"], v["duplicates"], v["lost"], v["reread"]) == (5, 5, 0, 0, 2)


def test_a_value_at_two_offsets_is_a_duplicate_and_a_missing_one_is_lost():
    v = copy_verdict(INPUTS, reads_of({0: ["0", "2", "2", "4"], 1: ["1"]}))
    assert not v["ok"] and (v["duplicates"], v["lost"]) == (1, 1)
    assert v["examples"] == {"duplicates": ["2"], "lost": ["3"], "unexpected": [], "conflicting_offsets": []}
    assert v["partitions_not_equal_to_input"] == [0, 1]


def test_order_across_a_partition_and_foreign_values_and_offsets_that_changed():
    v = copy_verdict(INPUTS, reads_of({0: ["2", "0", "4"], 1: ["1", "3"]}))
    assert not v["ok"] and v["partitions_not_equal_to_input"] == [0] and v["duplicates"] == v["lost"] == 0
    v = copy_verdict(INPUTS, reads_of({**INPUTS, 2: ["99"]}))
    assert not v["ok"] and v["unexpected"] == 1 and v["partitions_not_equal_to_input"] == [2]
    v = copy_verdict(INPUTS, reads_of(INPUTS) + [Read(0, 0, "7")])
    assert not v["ok"] and v["conflicting_offsets"] == 1


@given(st.lists(st.integers(0, 2), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_copy_verdict_counts_what_was_done_to_an_exact_copy(parts, rnd):
    inputs: dict[int, list[str]] = defaultdict(list)
    for i, p in enumerate(parts):
        inputs[p].append(str(i))
    outputs = {p: list(vs) for p, vs in inputs.items()}
    victims = rnd.sample(range(len(parts)), rnd.randint(0, len(parts)))
    lost = victims[: len(victims) // 2]
    doubled = victims[len(victims) // 2:]
    for i in lost:
        outputs[parts[i]].remove(str(i))
    for i in doubled:
        outputs[parts[i]].append(str(i))
    v = copy_verdict(dict(inputs), reads_of(outputs))
    assert (v["lost"], v["duplicates"], v["ok"]) == (len(lost), len(doubled), not victims)


def test_streams_expectation_is_computed_from_the_input_alone():
    data = model.generate(3, 2000)
    assert data == model.generate(3, 2000) and len(data.orders) == 2000
    exp = model.expected(data)
    assert sum(int(v.split(",")[0]) for v in exp.regions.values()) == 2000
    assert sum(int(v.split(",")[1]) for v in exp.windows.values()) == sum(o[2] for o in data.orders)
    oid, cust, amount, ts = data.orders[1500]
    assert exp.enriched[oid] == f"{oid},{cust},{amount},{data.customers[cust]}"
    assert f"{cust}@{ts - ts % model.WINDOW_MS}" in exp.windows


def app_output(data: model.Data, rnd: random.Random) -> dict[str, list[model.Record]]:
    """What a correct application may write: every order once, and for each aggregate key a
    growing series of updates (some folded, as the Streams cache does) ending at the total."""
    exp = model.expected(data)
    out: dict[str, list[model.Record]] = {t: [] for t in ("enriched", "windowed-totals", "region-totals")}
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for oid, cust, amount, ts in data.orders:
        out["enriched"].append(model.Record(0, len(out["enriched"]), cust, exp.enriched[oid]))
        region = data.customers[cust]
        for topic, key, final in (("windowed-totals", f"{cust}@{ts - ts % model.WINDOW_MS}", exp.windows),
                                  ("region-totals", region, exp.regions)):
            acc = counts[topic, key]
            acc[0] += 1
            acc[1] += amount
            if rnd.random() < 0.5 or f"{acc[0]},{acc[1]}" == final[key]:
                out[topic].append(model.Record(0, len(out[topic]), key, f"{acc[0]},{acc[1]}"))
    return out


def test_streams_verdict_passes_a_correct_output_and_catches_each_anomaly():
    data = model.generate(5, 600)
    exp = model.expected(data)
    good = app_output(data, random.Random(1))
    assert model.verdict(exp, good)["ok"]
    dup = {**good, "enriched": [*good["enriched"], model.Record(1, 0, *good["enriched"][7][2:])]}
    v = model.verdict(exp, dup)
    assert not v["ok"] and v["enriched"]["duplicates"] == 1
    v = model.verdict(exp, {**good, "enriched": good["enriched"][1:]})
    assert not v["ok"] and v["enriched"]["lost"] == 1
    regions = good["region-totals"]
    last = regions[-1]
    replayed = [*regions, model.Record(0, last.offset + 1, last.key, last.value)]  # an update applied twice
    v = model.verdict(exp, {**good, "region-totals": replayed})
    assert not v["ok"] and v["region_totals"]["regressions"] == 1 and v["windowed_totals"]["ok"]
    v = model.verdict(exp, {**good, "windowed-totals": good["windowed-totals"][:-1]})
    assert not v["ok"] and v["windowed_totals"]["wrong_final"] == 1


def test_a_regression_names_the_partition_and_offsets_of_both_updates():
    data = model.generate(5, 600)
    exp = model.expected(data)
    good = app_output(data, random.Random(2))
    windows = good["windowed-totals"]
    first = next(r for r in windows if r.value.startswith("1,") and not exp.windows[r.key].startswith("1,"))
    last = [r for r in windows if r.key == first.key][-1]  # the final total, after `first`
    undone = model.Record(0, windows[-1].offset + 1, first.key, first.value)  # a restore from a short changelog
    v = model.verdict(exp, {**good, "windowed-totals": [*windows, undone]})["windowed_totals"]
    assert not v["ok"] and (v["regressions"], v["wrong_final"]) == (1, 1)
    assert v["examples"]["regressions"] == [{"key": first.key, "partition": 0, "before": last.value,
                                             "before_offset": last.offset, "after": first.value,
                                             "after_offset": undone.offset}]


def test_a_key_in_two_partitions_is_flagged_and_not_compared_across_them():
    data = model.generate(5, 600)
    exp = model.expected(data)
    good = app_output(data, random.Random(3))
    regions = good["region-totals"]
    moved = model.Record(1, 0, regions[0].key, "1,1")  # lower than later updates, but in another partition
    v = model.verdict(exp, {**good, "region-totals": [*regions, moved]})["region_totals"]
    assert not v["ok"] and (v["split_keys"], v["regressions"], v["wrong_final"]) == (1, 0, 0)
    assert v["examples"]["split_keys"] == [regions[0].key]


@given(st.integers(0, 2**16), st.lists(st.tuples(st.integers(0, 5), st.integers(1, 3)), max_size=40))
def test_updates_spread_over_partitions_by_key_pass_and_any_non_growing_step_is_reported(seed, ops):
    """Keys hashed to partitions, each key's counts growing by 1-3 per update: ok. Then
    every step that does not grow (found by a brute-force scan per key) is a regression
    named by its partition and offsets, and nothing else is."""
    rnd = random.Random(seed)
    counts: dict[str, int] = {}
    offsets = [0, 0, 0]
    records = []
    for key_i, step in ops:
        key = f"k{key_i}"
        counts[key] = counts.get(key, 0) + (step if rnd.random() < 0.8 else -rnd.randint(0, 2))
        p = key_i % 3
        records.append(model.Record(p, offsets[p], key, f"{counts[key]},0"))
        offsets[p] += 2 if rnd.random() < 0.3 else 1  # gaps: transaction markers, aborted records
    want = {k: f"{c},0" for k, c in counts.items()}
    v = model._table_verdict(want, list(reversed(records)))  # the read order does not matter
    expected = []
    for key in sorted(counts):
        mine = [r for r in records if r.key == key]
        expected += [(key, a.offset, b.offset) for a, b in zip(mine, mine[1:])
                     if int(b.value.split(",")[0]) <= int(a.value.split(",")[0])]
    got = sorted((e["key"], e["before_offset"], e["after_offset"]) for e in v["examples"]["regressions"])
    assert got == sorted(expected) and v["regressions"] == len(expected)
    assert v["split_keys"] == 0 and v["wrong_final"] == 0 and v["ok"] == (not expected)


@given(st.integers(1_600_000_000_000, 2_000_000_000_000), st.integers(1, 400_000))
def test_a_runs_event_times_lie_in_the_hours_before_it_on_a_window_boundary(now_ms, n):
    """Within every retention (the brokers delete by record timestamp), never ahead of the
    brokers' clock; the expected windows follow the base."""
    base = model.recent_base(now_ms, n)
    last = base + (n - 1) * model.STEP_MS
    assert base % model.WINDOW_MS == 0
    assert now_ms - model.RECENT_MS - model.WINDOW_MS < last + model.STEP_MS <= now_ms - model.RECENT_MS
    assert now_ms - base < 24 * 3_600_000 + model.RECENT_MS  # 400k orders span under 3 h


def test_the_expected_windows_follow_the_runs_base():
    data = model.generate(4, 300, model.recent_base(1_800_000_000_000, 300))
    assert [o[:3] for o in data.orders] == [o[:3] for o in model.generate(4, 300).orders]
    assert all(int(k.split("@")[1]) >= data.base_ms for k in model.expected(data).windows)
    assert sum(int(v.split(",")[0]) for v in model.expected(data).windows.values()) == 300
