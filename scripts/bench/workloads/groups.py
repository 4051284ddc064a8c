"""``group-join`` and ``group-add`` (issue 33): how fast a consumer group settles, KIP-848
against the classic protocol and against librdkafka's mock cluster.

``group-join``: 10 confluent-kafka consumers subscribe at once to a 60-partition topic (no
records); the time from the first ``subscribe()`` until the assignment is stable: every
partition owned by exactly one consumer, the counts within one of each other, unchanged
for ``SETTLE_S`` (the time reported is that of the last assignment change, as each
consumer's ``assignment()`` shows it after a poll). Targets, alternated round by round: a
3-broker kaas cluster with ``group.protocol=consumer``, the same cluster with the classic
protocol (librdkafka's defaults, the broker's ``group.initial.rebalance.delay.ms`` of 3 s,
as Apache's), and the mock (3 brokers, ``scripts/peers/mock_cluster.py``) with
``group.protocol=consumer``. Issue 33's targets: consumer protocol <= 1.5x the mock and
<= 0.5x kaas classic (medians).

``group-add``: 10 consumers consume the 60 partitions while a producer writes one record to
each partition every ``PRODUCE_EVERY_S``; once stable an 11th consumer joins. For every
partition that did not move (the same consumer owned it before the join and after, without
a revocation between) the longest gap between two consecutive receptions from just before
the join until ``SETTLE_S`` after the group is stable again, against the heartbeat
interval. Issue 33's target: <= 1 heartbeat interval (the other members keep consuming;
only the moved partitions pause). kaas (consumer protocol) and the mock.

Both kaas targets run on one cluster started with the mock's group timings
(``GROUP_BROKER_ARGS``: heartbeat interval 3 s, session timeout 30 s, the minimums lowered
to match), so the protocols, not the settings, are compared.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from ..common import CLIENT_COMMON, MOCK_CLUSTER, _emit, _payloads, _r, ensure_topic
from ..targets import _KaasCluster, _stop_proc, _wait_ready

CONSUMERS = 10
PARTITIONS = 60
SETTLE_S = 2.0  # a stable assignment must stay unchanged this long
PRODUCE_EVERY_S = 0.05  # group-add: one record per partition this often
MOCK_HEARTBEAT_MS = 3000  # librdkafka's mock: group.consumer.heartbeat.interval.ms
MOCK_SESSION_MS = 30000  # ... and group.consumer.session.timeout.ms
GROUP_BROKER_ARGS = [
    "--group-consumer-heartbeat-interval-ms", str(MOCK_HEARTBEAT_MS),
    "--group-consumer-min-heartbeat-interval-ms", str(MOCK_HEARTBEAT_MS),
    "--group-consumer-session-timeout-ms", str(MOCK_SESSION_MS),
    "--group-consumer-min-session-timeout-ms", str(MOCK_SESSION_MS),
]
JOIN_TARGETS = ("kaas-consumer", "kaas-classic", "mock-consumer")
ADD_TARGETS = ("kaas-consumer", "mock-consumer")
TARGET_VS_MOCK = 1.5  # group-join: consumer protocol / mock
TARGET_VS_CLASSIC = 0.5  # group-join: consumer protocol / classic
TARGET_GAP_HEARTBEATS = 1.0  # group-add: longest unmoved gap, in heartbeat intervals


class _Member:
    """One consumer polled by a thread of its own: its assignment over time (as
    ``assignment()`` says after each poll) and when it received records of each partition."""

    def __init__(self, name: str, conf: dict, topic: str) -> None:
        from confluent_kafka import Consumer

        self.name = name
        self.topic = topic
        self.consumer = Consumer({**conf, "client.id": name})
        self.assignment: frozenset[int] = frozenset()
        self.changes: list[tuple[float, frozenset[int]]] = []  # (monotonic, assignment)
        self.received: dict[int, list[float]] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.consumer.subscribe([self.topic])
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        while not self._stop.is_set():
            try:
                msgs = self.consumer.consume(1000, 0.05)
            except KafkaException as exc:
                self.errors.append(str(exc))
                continue
            now = time.monotonic()
            for m in msgs:
                if m.error():
                    self.errors.append(str(m.error()))
                else:
                    self.received.setdefault(m.partition(), []).append(now)
            current = frozenset(tp.partition for tp in self.consumer.assignment())
            if current != self.assignment:
                self.assignment = current
                self.changes.append((now, current))

    def halt(self) -> None:
        """Stop polling (what it recorded is then still)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def close(self) -> None:
        self.halt()
        self.consumer.close()


def _stable(members: list[_Member], partitions: int) -> bool:
    sizes = [len(m.assignment) for m in members]
    owned = set().union(*(m.assignment for m in members))
    return sum(sizes) == partitions == len(owned) and max(sizes) - min(sizes) <= 1


def _wait_stable(members: list[_Member], partitions: int, timeout: float) -> float:
    """When (monotonic) the group's assignment last changed before it held stable for SETTLE_S.

    Raises:
        click.ClickException: not stable within ``timeout`` seconds, or a consumer reported errors.
    """
    deadline = time.monotonic() + timeout
    since: float | None = None
    while time.monotonic() < deadline:
        if _stable(members, partitions):
            since = since if since is not None else time.monotonic()
            if time.monotonic() - since >= SETTLE_S:
                return max(m.changes[-1][0] for m in members if m.changes)
        else:
            since = None
        time.sleep(0.01)
    errors = sorted({e for m in members for e in m.errors})[:5]
    raise click.ClickException(f"no stable assignment in {timeout:.0f} s: "
                               f"{[len(m.assignment) for m in members]} partitions per consumer; errors {errors}")


def _conf(bootstrap: str, group: str, protocol: str) -> dict:
    """A consumer with librdkafka's defaults but for the group protocol (and reading from the
    end: only records produced during the run count)."""
    return {**CLIENT_COMMON, "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
            "enable.auto.commit": False, "auto.offset.reset": "latest"}


@contextmanager
def _members(bootstrap: str, topic: str, protocol: str, count: int, tag: str) -> Iterator[list[_Member]]:
    group = f"bench-{tag}-{uuid.uuid4().hex[:8]}"
    made = [_Member(f"{tag}-{i}", _conf(bootstrap, group, protocol), topic) for i in range(count)]
    try:
        yield made
    finally:
        for m in made:
            m.close()


def measure_join(bootstrap: str, topic: str, protocol: str, consumers: int = CONSUMERS,
                 partitions: int = PARTITIONS, timeout: float = 60.0) -> dict:
    """``consumers`` consumers of a fresh group subscribe at once: seconds to a stable assignment."""
    with _members(bootstrap, topic, protocol, consumers, "join") as members:
        t0 = time.monotonic()
        for m in members:
            m.start()
        stable_at = _wait_stable(members, partitions, timeout)
        sizes = sorted(len(m.assignment) for m in members)
        changes = sum(len(m.changes) for m in members)
    return {"stable_s": _r(stable_at - t0), "sizes": [sizes[0], sizes[-1]], "assignment_changes": changes}


@contextmanager
def _mock_cluster(topic: str, partitions: int, brokers: int = 3, extra: tuple[str, ...] = ()) -> Iterator[str]:
    """scripts/peers/mock_cluster.py with ``topic`` made (and ``extra`` options): its bootstrap."""
    proc = subprocess.Popen([sys.executable, str(MOCK_CLUSTER), "--brokers", str(brokers), "--topic",
                             f"{topic}:{partitions}", *extra], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, text=True)
    try:
        bootstrap = proc.stdout.readline().strip() if proc.stdout else ""
        if not bootstrap:
            raise click.ClickException("mock cluster printed no bootstrap")
        _wait_ready(bootstrap, proc)
        yield bootstrap
    finally:
        _stop_proc(proc, timeout=10)


@contextmanager
def _targets(names: tuple[str, ...], topic: str, partitions: int) -> Iterator[dict[str, tuple[str, str]]]:
    """target name -> (bootstrap, group protocol), with the kaas cluster (GROUP_BROKER_ARGS
    when a consumer-protocol target is on it) and the mock running as the names need."""
    cluster = None
    try:
        where: dict[str, tuple[str, str]] = {}
        if any(n.startswith("kaas-") for n in names):
            cluster = _KaasCluster(3, GROUP_BROKER_ARGS if "kaas-consumer" in names else [])
            ensure_topic(cluster.bootstrap, topic, partitions)
            where.update({"kaas-consumer": (cluster.bootstrap, "consumer"),
                          "kaas-classic": (cluster.bootstrap, "classic")})
        with _mock_cluster(topic, partitions) if "mock-consumer" in names else _nothing() as mock:
            if mock is not None:
                where["mock-consumer"] = (mock, "consumer")
            yield {n: where[n] for n in names}
    finally:
        if cluster is not None:
            cluster.close()


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def _alternate(bench: str, measure: Callable[..., dict], names: tuple[str, ...], rounds: int, consumers: int,
               partitions: int, timeout: float, emit: Callable[[dict], None]) -> dict[str, list[dict]]:
    """``rounds`` rounds of ``measure`` on the targets ``names`` in turn, on one topic of
    ``partitions`` (a fresh group each run): each run's line through ``emit``, and the runs
    by target."""
    topic = f"bench-{bench}-{uuid.uuid4().hex[:8]}"
    runs: dict[str, list[dict]] = {t: [] for t in names}
    with _targets(names, topic, partitions) as targets:
        for rnd in range(rounds):
            for name, (bootstrap, protocol) in targets.items():
                res = {"bench": bench, "target": name, "round": rnd, "consumers": consumers, "partitions": partitions,
                       **measure(bootstrap, topic, protocol, consumers, partitions, timeout)}
                runs[name].append(res)
                emit(res)
    return runs


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return _r(statistics.median(values)) if values else None


def run_group_join(rounds: int, consumers: int, partitions: int, timeout: float, emit: Callable[[dict], None],
                   names: tuple[str, ...] = JOIN_TARGETS) -> dict:
    """``rounds`` rounds of the targets ``names`` in turn (a fresh group each run): one line
    per run through ``emit``; returns the medians, the ratios and issue 33's targets."""
    started = time.monotonic()
    runs = {t: [] for t in JOIN_TARGETS} | _alternate("group-join", measure_join, names, rounds, consumers, partitions,
                                                       timeout, emit)
    med = {t: _median(rs, "stable_s") for t, rs in runs.items()}
    vs_mock = _ratio(med["kaas-consumer"], med["mock-consumer"])
    vs_classic = _ratio(med["kaas-consumer"], med["kaas-classic"])
    return {"bench": "group-join", "rounds": rounds, "consumers": consumers, "partitions": partitions,
            "heartbeat_interval_ms": MOCK_HEARTBEAT_MS, "cpus": os.cpu_count(),
            "seconds": round(time.monotonic() - started, 1), "median_stable_s": med,
            "consumer_over_mock": vs_mock, "consumer_over_classic": vs_classic,
            "target": {"consumer_over_mock": f"<= {TARGET_VS_MOCK:g}",
                       "consumer_over_classic": f"<= {TARGET_VS_CLASSIC:g}",
                       "met": vs_mock is not None and vs_classic is not None
                       and vs_mock <= TARGET_VS_MOCK and vs_classic <= TARGET_VS_CLASSIC}}


def _ratio(a: float | None, b: float | None) -> float | None:
    return _r(a / b) if a is not None and b else None


class _SteadyProducer:
    """One record to every partition each PRODUCE_EVERY_S, from a thread of its own."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({**CLIENT_COMMON, "bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
        self.topic, self.partitions = topic, partitions
        self.value = _payloads(100, 1)[0]
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            for p in range(self.partitions):
                self.producer.produce(self.topic, self.value, partition=p)
            self.sent += self.partitions
            self.producer.poll(0)
            next_at += PRODUCE_EVERY_S
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> _SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(10)


def _held(member: _Member, partition: int, since: float, until: float) -> bool:
    """Whether ``member`` owned ``partition`` from ``since`` to ``until`` without a break."""
    owned = False
    for at, assignment in member.changes:
        if at <= since:
            owned = partition in assignment
        elif at <= until and partition not in assignment:
            return False
    return owned


def _longest_gap(times: list[float], since: float, until: float) -> float | None:
    ts = [t for t in times if since <= t <= until]
    return max((b - a for a, b in zip(ts, ts[1:])), default=None)


def measure_add(bootstrap: str, topic: str, protocol: str, consumers: int = CONSUMERS,
                partitions: int = PARTITIONS, timeout: float = 60.0) -> dict:
    """``consumers`` consume under steady produce; one more joins: the longest gap of an
    unmoved partition (and of a moved one), in ms."""
    with _SteadyProducer(bootstrap, topic, partitions) as producer, \
            _members(bootstrap, topic, protocol, consumers + 1, "add") as members:
        old, newcomer = members[:-1], members[-1]
        for m in old:
            m.start()
        _wait_stable(old, partitions, timeout)
        time.sleep(1.0)  # steady consumption before the join
        before = max(m.changes[-1][0] for m in old)
        t_add = time.monotonic()
        newcomer.start()
        stable_at = _wait_stable(members, partitions, timeout)
        until = time.monotonic()
        for m in members:
            m.halt()
        window = t_add - 0.5
        unmoved, moved = [], []
        for p in range(partitions):
            owner = next((m for m in old if _held(m, p, t_add, until)), None)
            gap = _longest_gap(owner.received.get(p, []), window, until) if owner else None
            if owner is not None:
                unmoved.append(gap if gap is not None else until - window)
            else:
                times = sorted(t for m in members for t in m.received.get(p, []))
                moved.append(_longest_gap(times, window, until) or until - window)
        baseline = [g for m in old for ts in m.received.values()
                    if (g := _longest_gap(ts, before, t_add)) is not None]
        sent = producer.sent
    return {"unmoved_partitions": len(unmoved), "moved_partitions": len(moved),
            "longest_unmoved_gap_ms": _r(max(unmoved) * 1000, 1) if unmoved else None,
            "longest_moved_gap_ms": _r(max(moved) * 1000, 1) if moved else None,
            "longest_gap_before_join_ms": _r(max(baseline) * 1000, 1) if baseline else None,
            "rejoin_stable_s": _r(stable_at - t_add), "records_produced": sent}


def run_group_add(rounds: int, consumers: int, partitions: int, timeout: float, emit: Callable[[dict], None],
                  names: tuple[str, ...] = ADD_TARGETS) -> dict:
    """``rounds`` rounds of the targets ``names`` in turn (a fresh group each run): one line
    per run through ``emit``; returns the worst and median unmoved gap per target against
    the target."""
    started = time.monotonic()
    runs = _alternate("group-add", measure_add, names, rounds, consumers, partitions, timeout, emit)
    limit_ms = TARGET_GAP_HEARTBEATS * MOCK_HEARTBEAT_MS
    worst = {t: max((r["longest_unmoved_gap_ms"] or 0.0) for r in rs) for t, rs in runs.items() if rs}
    return {"bench": "group-add", "rounds": rounds, "consumers": consumers, "partitions": partitions,
            "heartbeat_interval_ms": MOCK_HEARTBEAT_MS, "produce_every_ms": PRODUCE_EVERY_S * 1000,
            "cpus": os.cpu_count(), "seconds": round(time.monotonic() - started, 1),
            "median_longest_unmoved_gap_ms": {t: _median(rs, "longest_unmoved_gap_ms") for t, rs in runs.items()},
            "worst_longest_unmoved_gap_ms": worst,
            "median_rejoin_stable_s": {t: _median(rs, "rejoin_stable_s") for t, rs in runs.items()},
            "target": {"longest_unmoved_gap_ms": f"<= {limit_ms:g} (one heartbeat interval)",
                       "met": "kaas-consumer" in worst and worst["kaas-consumer"] <= limit_ms}}


def _target_names(allowed: tuple[str, ...]) -> Callable[[object, object, str], tuple[str, ...]]:
    def check(_ctx: object, _param: object, value: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
        if not names or set(names) - set(allowed):
            raise click.BadParameter(f"a comma-separated choice of {', '.join(allowed)}")
        return names
    return check


def _options(f: Callable) -> Callable:
    for opt in reversed((
        click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True),
        click.option("--consumers", type=click.IntRange(min=1), default=CONSUMERS, show_default=True),
        click.option("--partitions", type=click.IntRange(min=1), default=PARTITIONS, show_default=True),
        click.option("--timeout", type=float, default=60.0, show_default=True,
                     help="Seconds for a group to become stable."),
    )):
        f = opt(f)
    return f


@click.command("group-join")
@_options
@click.option("--targets", "names", default=",".join(JOIN_TARGETS), show_default=True,
              callback=_target_names(JOIN_TARGETS), help="The targets, comma-separated.")
def group_join(rounds: int, consumers: int, partitions: int, timeout: float, names: tuple[str, ...]) -> None:
    """Issue 33: seconds until 10 consumers joining a 60-partition topic hold a stable
    assignment: kaas with group.protocol=consumer, kaas classic, the mock (consumer), A B C
    A B C; the targets: consumer <= 1.5x the mock and <= 0.5x classic."""
    _emit(run_group_join(rounds, consumers, partitions, timeout, _emit, names))


@click.command("group-add")
@_options
@click.option("--targets", "names", default=",".join(ADD_TARGETS), show_default=True,
              callback=_target_names(ADD_TARGETS), help="The targets, comma-separated.")
def group_add(rounds: int, consumers: int, partitions: int, timeout: float, names: tuple[str, ...]) -> None:
    """Issue 33: an 11th consumer joins 10 consuming a 60-partition topic under steady
    produce: the longest gap of a partition that did not move, kaas and the mock (consumer
    protocol); the target: <= 1 heartbeat interval."""
    _emit(run_group_add(rounds, consumers, partitions, timeout, _emit, names))


COMMANDS = (group_join, group_add)
