"""The ``connect`` scenario's verdicts (pure: no I/O), over what its readers saw.

- ``source_verdict``: the numbers 0..count-1 that ``SequenceSource`` writes (task t of n
  writes t, t+n, ...), read ``read_committed`` from the output topic: each exactly once, and
  each task's numbers in increasing order within a partition (a task writes them in order,
  in transactions; a restarted task resumes after its last committed one).
- ``sink_verdict``: the lines ``RecordingSink``'s tasks wrote (each record given to a task,
  with the time) against the output topic's records and the samples of the sink's consumer
  group offsets: every record reached the sink; no committed offset ever claimed a record
  the sink had not been given by then, nor went back; the final offsets cover every record.
  A record given twice (after a worker's death, from the last committed offset) is counted,
  as Connect's sinks are at-least-once, not judged.
- ``resume_verdict``: each start of a source task from a stored offset: it resumed at one
  of its own numbers, right after one the output holds, and not before what the last read
  of the internal topics that ended before the start had stored for it.
- ``internal_verdict``: the rounds that read the compacted internal topics (config, offsets,
  status) from their start to their end while the faults went on: each round read them to
  the end; the config topic kept the connectors; no source offset went back between two
  rounds; and the last round's offsets are where the output says each task ended. How often
  a topic read shorter than the round before (the cleaner at work) is reported, not judged.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

EXAMPLES = 5


@dataclass(frozen=True)
class Rec:
    """A record of the output topic: partition, offset, value."""

    partition: int
    offset: int
    value: str


@dataclass(frozen=True)
class SinkLine:
    """What a sink task was given: a record and when (epoch ms)."""

    partition: int
    offset: int
    value: str
    at_ms: int


@dataclass(frozen=True)
class Sample:
    """The sink group's committed offsets, answered at ``at_ms`` (epoch ms)."""

    at_ms: int
    offsets: dict[int, int]


@dataclass
class Round:
    """One read of the internal topics, to their end at the read's start."""

    at: float
    ok: bool
    error: str = ""
    seconds: float = 0.0
    records: dict[str, int] = field(default_factory=dict)  # records read per topic
    source_offsets: dict[int, int] = field(default_factory=dict)  # task -> stored "next"
    connectors: list[str] = field(default_factory=list)  # connector configs in the config topic
    task_configs: list[str] = field(default_factory=list)  # "seq-0", ...


def final_next(task: int, tasks: int, count: int) -> int:
    """The offset a task stores once it has written all its numbers: its first number not
    below ``count``."""
    if task >= count:
        return task
    return task + ((count - task + tasks - 1) // tasks) * tasks


def source_verdict(count: int, tasks: int, reads: list[Rec]) -> dict:
    """Each of 0..count-1 exactly once in ``reads`` (a record read twice at one offset is a
    re-read, not a duplicate), and each task's numbers in order within each partition."""
    at: dict[tuple[int, int], str] = {}
    conflicting = 0
    for r in reads:
        prev = at.setdefault((r.partition, r.offset), r.value)
        conflicting += prev != r.value
    seen = Counter(at.values())
    expected = {str(n) for n in range(count)}
    dups = sorted((v for v, k in seen.items() if k > 1 and v in expected), key=int)
    lost = sorted(expected - seen.keys(), key=int)
    unexpected = sorted(v for v in seen if v not in expected)
    disorder = 0
    last: dict[tuple[int, int], int] = {}
    for (p, _off), v in sorted(at.items()):
        if v not in expected:
            continue
        n = int(v)
        key = (p, n % tasks)
        disorder += key in last and n <= last[key]
        last[key] = n
    return {"ok": not (dups or lost or unexpected or conflicting or disorder), "input": count, "output": len(at),
            "duplicates": sum(seen[v] - 1 for v in dups), "lost": len(lost), "unexpected": len(unexpected),
            "conflicting_offsets": conflicting, "out_of_order": disorder,
            "examples": {"duplicates": dups[:EXAMPLES], "lost": lost[:EXAMPLES], "unexpected": unexpected[:EXAMPLES]}}


def sink_verdict(records: list[Rec], ends: dict[int, int], lines: list[SinkLine], samples: list[Sample],
                 final: dict[int, int]) -> dict:
    """``records``: the output topic's records (read_committed, one per offset); ``ends``:
    each partition's end offset; ``final``: the group's offsets after the run."""
    data = {(r.partition, r.offset): r.value for r in records}
    first: dict[tuple[int, int], int] = {}  # (partition, offset) -> when first given
    given = Counter[tuple[int, int]]()
    unexpected = []
    for ln in sorted(lines, key=lambda x: x.at_ms):
        key = (ln.partition, ln.offset)
        if data.get(key) != ln.value:
            unexpected.append(key)
            continue
        given[key] += 1
        first.setdefault(key, ln.at_ms)
    never = sorted(data.keys() - first.keys())
    by_part: dict[int, list[int]] = defaultdict(list)
    for p, off in sorted(data):
        by_part[p].append(off)
    ahead, backwards = _offset_claims(by_part, first, samples)
    short = {p: c for p, c in final.items() if by_part.get(p) and c <= by_part[p][-1]}
    short.update({p: -1 for p in by_part if p not in final})
    past_end = {p: c for p, c in final.items() if c > ends.get(p, 0)}
    return {"ok": not (never or unexpected or ahead or backwards or short or past_end),
            "records": len(data), "given": sum(given.values()), "distinct_given": len(first),
            "redelivered": sum(k - 1 for k in given.values()), "never_given": len(never),
            "unexpected": len(unexpected), "offsets_ahead_of_sink": len(ahead),
            "offsets_went_back": len(backwards), "final_offsets": {str(p): c for p, c in sorted(final.items())},
            "final_offsets_short": {str(p): c for p, c in short.items()},
            "final_offsets_past_end": {str(p): c for p, c in past_end.items()}, "samples": len(samples),
            "examples": {"never_given": never[:EXAMPLES], "unexpected": unexpected[:EXAMPLES],
                         "ahead": ahead[:EXAMPLES], "backwards": backwards[:EXAMPLES]}}


def _offset_claims(by_part: dict[int, list[int]], first: dict[tuple[int, int], int],
                   samples: list[Sample]) -> tuple[list, list]:
    """The samples whose offset claims a record the sink had not been given by the time of
    the answer (the record below the offset, first given later or never), and those whose
    offset is below the previous sample's."""
    ahead, backwards = [], []
    prev: dict[int, int] = {}
    for s in sorted(samples, key=lambda x: x.at_ms):
        for p, c in s.offsets.items():
            offs = by_part.get(p, [])
            # the records below c: every one must have been given at or before the answer
            i = _count_below(offs, c)
            late = [o for o in offs[:i] if first.get((p, o), 1 << 62) > s.at_ms]
            if late:
                ahead.append({"partition": p, "committed": c, "at_ms": s.at_ms, "first_not_given": late[0]})
            if c < prev.get(p, -1):
                backwards.append({"partition": p, "from": prev[p], "to": c, "at_ms": s.at_ms})
            prev[p] = c
    return ahead, backwards


def _count_below(sorted_offsets: list[int], c: int) -> int:
    lo, hi = 0, len(sorted_offsets)
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_offsets[mid] < c:
            lo = mid + 1
        else:
            hi = mid
    return lo


def internal_verdict(rounds: list[Round], connectors: list[str], tasks: dict[str, int],
                     final_offsets: dict[int, int]) -> dict:
    """Once a round has shown ``connectors`` in the config topic with ``tasks[name]`` task
    configurations each, every later round must, and the last one must; ``final_offsets``:
    what the last round's source offsets must be (task -> next)."""
    unreadable = [r for r in rounds if not r.ok]
    want_tasks = {f"{c}-{t}" for c in connectors for t in range(tasks[c])}
    missing, back = [], []
    seen_all = False
    prev: dict[int, int] = {}
    for r in (r for r in rounds if r.ok):
        has_all = not (set(connectors) - set(r.connectors) or want_tasks - set(r.task_configs))
        if seen_all and not has_all:
            missing.append(r.at)
        seen_all = seen_all or has_all
        for t, n in r.source_offsets.items():
            if n < prev.get(t, -1):
                back.append({"task": t, "from": prev[t], "to": n, "at": r.at})
            prev[t] = n
    shrank: Counter[str] = Counter()  # a topic read shorter than in the round before: the cleaner compacted it
    readable = [r for r in rounds if r.ok]
    for a, b in zip(readable, readable[1:]):
        shrank.update(t for t, n in b.records.items() if n < a.records.get(t, 0))
    last = next((r for r in reversed(rounds) if r.ok), None)
    last_ok = last is not None and last is rounds[-1] and last.source_offsets == final_offsets and not (
        set(connectors) - set(last.connectors) or want_tasks - set(last.task_configs))
    return {"ok": not (unreadable or missing or back) and last_ok, "rounds": len(rounds),
            "unreadable": len(unreadable), "errors": sorted({r.error for r in unreadable})[:EXAMPLES],
            "rounds_missing_connectors": len(missing), "offsets_went_back": back[:EXAMPLES],
            "final_source_offsets": None if last is None else {
                str(t): n for t, n in sorted(last.source_offsets.items())},
            "expected_final_source_offsets": {str(t): n for t, n in sorted(final_offsets.items())},
            "records_read": {"first": rounds[0].records if rounds else None, "last": last.records if last else None},
            "rounds_shorter_than_the_one_before": dict(shrank),
            "longest_read_s": max((r.seconds for r in rounds), default=None)}


def resume_verdict(resumes: list[dict], reads: list[Rec], rounds: list[Round], tasks: int, count: int) -> dict:
    """``resumes``: ``{"task", "next", "at"}`` (wall clock) of each task started from a
    stored offset."""
    out = {r.value for r in reads}
    bad = []
    for r in resumes:
        t, n = r["task"], r["next"]
        # a round may read records written after it began: only one over before the start counts
        stored = [x.source_offsets.get(t, -1) for x in rounds if x.ok and x.at + x.seconds < r["at"]]
        why = ("not the task's number" if n % tasks != t % tasks else
               "the number before it is not in the output" if n - tasks >= 0 and str(n - tasks) not in out else
               "it is not in the output" if n < count and str(n) not in out else
               "behind the offset stored before" if stored and n < stored[-1] else "")
        if why:
            bad.append({**r, "why": why})
    return {"ok": not bad, "resumes": len(resumes), "bad": bad[:EXAMPLES]}
