"""The ``connect`` chaos scenario's verdicts (pure): the source's numbers exactly once, the
sink group's offsets against what the sink was given, the internal topics' reads."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from chaos.connect_verdict import (  # noqa: E402
    Rec,
    Round,
    Sample,
    SinkLine,
    final_next,
    internal_verdict,
    sink_verdict,
    source_verdict,
)


def written(count: int, tasks: int, partitions: int) -> list[Rec]:
    """Task t's numbers in order, number n in partition n % partitions, one offset each."""
    nxt = [0] * partitions
    out = []
    for n in sorted(range(count), key=lambda n: (n % tasks, n)):
        p = n % partitions
        out.append(Rec(p, nxt[p], str(n)))
        nxt[p] += 1
    return out


def test_every_number_once_in_order_passes_and_a_reread_offset_is_no_duplicate():
    reads = written(10, 2, 3)
    v = source_verdict(10, 2, reads + reads[:3])
    assert v["ok"] and (v["input"], v["output"], v["duplicates"], v["lost"]) == (10, 10, 0, 0)


def test_a_number_at_two_offsets_is_a_duplicate_a_missing_one_lost_and_a_foreign_one_unexpected():
    reads = written(10, 2, 3)
    v = source_verdict(10, 2, [*reads[1:], Rec(0, 99, "5"), Rec(1, 99, "x")])
    assert not v["ok"] and (v["duplicates"], v["lost"], v["unexpected"]) == (1, 1, 1)
    assert v["examples"]["duplicates"] == ["5"] and v["examples"]["lost"] == [reads[0].value]


def test_a_task_going_back_within_a_partition_is_out_of_order_and_an_offset_with_two_values_conflicts():
    reads = [Rec(0, 0, "0"), Rec(0, 1, "4"), Rec(0, 2, "2"), Rec(0, 3, "1"), Rec(0, 4, "3")]
    v = source_verdict(5, 2, reads)
    assert not v["ok"] and v["out_of_order"] == 1 and v["duplicates"] == v["lost"] == 0
    v = source_verdict(5, 2, [*reads[:1], Rec(0, 1, "2"), Rec(0, 2, "4"), Rec(0, 3, "1"), Rec(0, 4, "3"),
                              Rec(0, 4, "1")])
    assert not v["ok"] and v["conflicting_offsets"] == 1


@given(st.integers(1, 60), st.integers(1, 4), st.integers(1, 4), st.data())
def test_source_verdict_counts_what_was_done_to_a_clean_run(count, tasks, partitions, data):
    reads = written(count, tasks, partitions)
    drop = data.draw(st.sets(st.integers(0, count - 1), max_size=count))
    double = data.draw(st.sets(st.integers(0, count - 1), max_size=count)) - drop
    out = [r for r in reads if int(r.value) not in drop]
    end = {p: max((r.offset for r in reads if r.partition == p), default=-1) + 1 for p in range(partitions)}
    for n in sorted(double):  # written again after everything: in order for no task
        p = n % partitions
        out.append(Rec(p, end[p], str(n)))
        end[p] += 1
    v = source_verdict(count, tasks, out)
    assert (v["lost"], v["duplicates"], v["output"]) == (len(drop), len(double), count - len(drop) + len(double))
    assert v["ok"] == (not drop and not double)


def test_final_next_is_each_tasks_first_number_not_below_count():
    assert [final_next(t, 2, 20000) for t in range(2)] == [20000, 20001]
    assert [final_next(t, 3, 10) for t in range(3)] == [12, 10, 11]
    assert final_next(3, 4, 2) == 3  # a task with no number to write keeps its start


RECS = [Rec(0, 0, "0"), Rec(0, 2, "2"), Rec(0, 3, "4"), Rec(1, 0, "1"), Rec(1, 1, "3")]  # offset 1 of 0: a marker


def lines(*given_at: tuple[Rec, int]) -> list[SinkLine]:
    return [SinkLine(r.partition, r.offset, r.value, ms) for r, ms in given_at]


def test_a_sink_given_everything_before_each_commit_passes_and_redeliveries_are_counted():
    ls = lines(*((r, 100) for r in RECS), (RECS[2], 300))
    samples = [Sample(150, {0: 3}), Sample(200, {0: 4, 1: 2})]
    v = sink_verdict(RECS, {0: 5, 1: 2}, ls, samples, {0: 5, 1: 2})
    assert v["ok"] and v["redelivered"] == 1 and v["distinct_given"] == 5


def test_an_offset_ahead_of_the_sink_backwards_short_or_past_the_end_fails():
    ls = lines(*((r, 100) for r in RECS[:2]), (RECS[2], 500), *((r, 100) for r in RECS[3:]))
    v = sink_verdict(RECS, {0: 5, 1: 2}, ls, [Sample(200, {0: 4})], {0: 4, 1: 2})
    assert not v["ok"] and v["offsets_ahead_of_sink"] == 1 and v["examples"]["ahead"][0]["first_not_given"] == 3
    ok = lines(*((r, 100) for r in RECS))
    v = sink_verdict(RECS, {0: 5, 1: 2}, ok, [Sample(200, {0: 4}), Sample(300, {0: 2})], {0: 4, 1: 2})
    assert not v["ok"] and v["offsets_went_back"] == 1
    v = sink_verdict(RECS, {0: 5, 1: 2}, ok, [], {0: 3})
    assert not v["ok"] and v["final_offsets_short"] == {"0": 3, "1": -1}
    v = sink_verdict(RECS, {0: 5, 1: 2}, ok, [], {0: 6, 1: 2})
    assert not v["ok"] and v["final_offsets_past_end"] == {"0": 6}


def test_a_record_never_given_or_given_with_another_value_fails():
    v = sink_verdict(RECS, {0: 5, 1: 2}, lines(*((r, 1) for r in RECS[1:]), (Rec(1, 1, "9"), 1)), [],
                     {0: 5, 1: 2})
    assert not v["ok"] and v["never_given"] == 1 and v["unexpected"] == 1


def rnd(at: float, offsets: dict[int, int], connectors=("seq", "rec"), tasks=("rec-0", "seq-0"), ok=True) -> Round:
    return Round(at=at, ok=ok, source_offsets=offsets, connectors=list(connectors), task_configs=list(tasks))


def test_internal_rounds_that_keep_everything_and_end_where_the_output_does_pass():
    rounds = [rnd(1, {}, (), ()), rnd(2, {0: 4}), rnd(3, {0: 10})]
    for r, n in zip(rounds, (3, 9, 2)):
        r.records = {"connect-offsets": n}
    v = internal_verdict(rounds, ["seq", "rec"], {"seq": 1, "rec": 1}, {0: 10})
    assert v["ok"] and v["rounds"] == 3 and v["rounds_shorter_than_the_one_before"] == {"connect-offsets": 1}


def test_internal_rounds_unreadable_losing_a_connector_going_back_or_ending_elsewhere_fail():
    want, tasks = ["seq", "rec"], {"seq": 1, "rec": 1}
    assert not internal_verdict([rnd(1, {0: 4}), rnd(2, {}, ok=False), rnd(3, {0: 10})], want, tasks, {0: 10})["ok"]
    v = internal_verdict([rnd(1, {0: 4}), rnd(2, {0: 6}, ("rec",)), rnd(3, {0: 10})], want, tasks, {0: 10})
    assert not v["ok"] and v["rounds_missing_connectors"] == 1
    v = internal_verdict([rnd(1, {0: 6}), rnd(2, {0: 4}), rnd(3, {0: 10})], want, tasks, {0: 10})
    assert not v["ok"] and v["offsets_went_back"][0]["to"] == 4
    assert not internal_verdict([rnd(1, {0: 4}), rnd(2, {0: 8})], want, tasks, {0: 10})["ok"]
    assert not internal_verdict([rnd(1, {0: 10}), rnd(2, {0: 10}, ok=False)], want, tasks, {0: 10})["ok"]
    assert not internal_verdict([], want, tasks, {0: 10})["ok"]


def test_a_task_resumes_right_after_its_last_number_out_and_not_behind_its_stored_offset():
    from chaos.connect_verdict import resume_verdict

    reads = written(10, 2, 3)
    rounds = [rnd(1.0, {1: 5}), rnd(3.0, {1: 9})]
    assert resume_verdict([{"task": 1, "next": 7, "at": 2.0}], reads, rounds, 2, 10)["ok"]
    assert resume_verdict([{"task": 1, "next": 11, "at": 4.0}], reads, rounds, 2, 10)["ok"]  # done: past the end
    for bad, why in [({"task": 1, "next": 6, "at": 2.0}, "not the task's number"),
                     ({"task": 1, "next": 3, "at": 2.0}, "behind the offset stored before"),
                     ({"task": 1, "next": 13, "at": 4.0}, "the number before it is not in the output")]:
        v = resume_verdict([bad], reads, rounds, 2, 10)
        assert not v["ok"] and v["bad"][0]["why"] == why
    v = resume_verdict([{"task": 1, "next": 7, "at": 2.0}], [r for r in reads if r.value != "7"], rounds, 2, 10)
    assert v["bad"][0]["why"] == "it is not in the output"
    late = Round(at=1.5, ok=True, seconds=1.0, source_offsets={1: 9})  # over after the start: it may hold later writes
    assert resume_verdict([{"task": 1, "next": 7, "at": 2.0}], reads, [rounds[0], late], 2, 10)["ok"]
