"""The session rule all group kinds share across coordinator moves (``kaas.domain.groups.sessions``):
the function itself, and the consumer-protocol (KIP-848) and share (KIP-932) machines
driven through random sequences of coordinator moves, heartbeats and member deaths. (The
classic machine gets the same simulation in test_group.py, ``run_churn``.)

The properties, as docs/groups.rst states them:

* a live member that heartbeats at its interval (a third of its session or more often),
  reaching each coordinator that serves at least one interval, and so never going unheard
  for longer than ``s + g - s/3``, is never fenced;
* a member that dies at ``D`` is gone from any coordinator serving after ``D + s + g``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as E

from kaas.domain.groups import sessions
from kaas.domain.groups.consumer.group import ConsumerGroup, GroupConfig, Heartbeat, TopicImage, TopicInfo
from kaas.domain.groups.share.group import ShareConfig, ShareGroup, ShareHeartbeat

S = 6_000
G = sessions.grace_ms(S)
STEP = 100
REBALANCE = 4_000
IMG = TopicImage.of(1, [TopicInfo("id-t", "t", 6)])


# ------------------------------------------------------------------ the function


def test_the_rule_by_example():
    # heard from 1 s before a restore: the session it had
    assert sessions.restored_deadline(9_000, S, 10_000) == 15_000
    # heard from 5 s before: the grace from the restore
    assert sessions.restored_deadline(5_000, S, 10_000) == 10_000 + G
    # heard from 8 s before: the grace, but only what is left of it after its session
    assert sessions.restored_deadline(2_000, S, 10_000) == 2_000 + S + G
    # long silent: past already (removed at the first tick)
    assert sessions.restored_deadline(0, S, 60_000) == S + G
    # no time on file: Apache's reset; a time from the future counts as now
    assert sessions.restored_deadline(None, S, 10_000) == 10_000 + S
    assert sessions.restored_deadline(99_000, S, 10_000) == 10_000 + S


def test_contact_is_written_once_it_lags_a_third_of_a_session():
    assert sessions.contact_persist_due(None, 5, S)
    assert not sessions.contact_persist_due(1_000, 1_000 + S // 3 - 1, S)
    assert sessions.contact_persist_due(1_000, 1_000 + S // 3, S)


@given(p=st.integers(0, 10**6), s=st.integers(1_000, 10**6),
       restores=st.lists(st.integers(0, 3 * 10**6), min_size=1, max_size=20))
def test_however_many_restores_the_deadline_stays_within_the_grace_of_the_session(p, s, restores):
    """Each restore computes from the same last contact on file: however many there are,
    and whenever, no deadline passes ``P + s + g``; none is before ``P + s``; and while the
    member might still be alive (``R <= P + s``) it gets the grace from the restore."""
    g = sessions.grace_ms(s)
    for r in sorted(restores):
        d = sessions.restored_deadline(p, s, r)
        q = min(p, r)
        assert q + s <= d <= q + s + g
        if r <= q + s:
            assert d >= r + g


# ------------------------------------------------------------------ the machines under churn


@dataclass
class Client:
    """A member as a client library drives it: heartbeats every ``hb`` ms (the first at
    ``phase``) while it lives, owns what the coordinator last gave it."""

    member_id: str
    hb: int
    phase: int
    death: int | None
    epoch: int = 0
    owned: dict[str, tuple[int, ...]] = field(default_factory=dict)
    next_at: int = 0
    contacts: list[int] = field(default_factory=list)
    fenced_at: int | None = None

    def alive(self, now: int) -> bool:
        return self.death is None or now < self.death


class Consumer:
    """The consumer-protocol machine as its runtime runs it: a heartbeat that changed the
    group is on file before its answer; a timer that fenced someone writes too."""

    config = GroupConfig(session_timeout_ms=S, assignors=("uniform",))

    def __init__(self) -> None:
        self.g = ConsumerGroup("g")
        self.on_file: dict | None = None

    def members(self) -> set[str]:
        return set(self.g.members)

    def beat(self, c: Client, now: int) -> bool:
        if c.epoch == 0:
            hb = Heartbeat(c.member_id, 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=("t",), owned=())
        else:
            hb = Heartbeat(c.member_id, c.epoch, owned=tuple(sorted(c.owned.items())))
        r = self.g.heartbeat(hb, now, IMG, self.config)
        if r.error_code in (E.unknown_member_id, E.fenced_member_epoch):
            return False
        assert r.error_code is E.none, r
        c.epoch = r.member_epoch
        if r.assignment is not None:
            c.owned = {k: tuple(sorted(v)) for k, v in r.assignment.items()}
        if r.changed:
            self.write()
        return True

    def tick(self, now: int) -> None:
        if self.g.tick(now):
            self.write()

    def write(self) -> None:
        self.on_file = json.loads(json.dumps(self.g.snapshot()))

    def restore(self, now: int) -> None:
        if self.on_file is None:
            self.g = ConsumerGroup("g")
        else:
            self.g = ConsumerGroup.restore("g", self.on_file, now_ms=now, session_timeout_ms=S)


class Share:
    """The share machine as its runtime runs it (initializing partitions as asked)."""

    config = ShareConfig(session_timeout_ms=S, max_size=10)

    def __init__(self) -> None:
        self.g = ShareGroup("g")
        self.on_file: dict | None = None

    def members(self) -> set[str]:
        return set(self.g.members)

    def beat(self, c: Client, now: int) -> bool:
        hb = ShareHeartbeat(c.member_id, c.epoch, subscribed_topic_names=("t",) if c.epoch == 0 else None)
        r = self.g.heartbeat(hb, now, IMG, self.config)
        if r.error_code in (E.unknown_member_id, E.fenced_member_epoch):
            return False
        assert r.error_code is E.none, r
        c.epoch = r.member_epoch
        if r.initialize:
            self.g.mark_initialized(r.initialize)
        if r.changed:
            self.write()
        return True

    def tick(self, now: int) -> None:
        if self.g.tick(now, IMG):
            self.write()

    def write(self) -> None:
        self.on_file = json.loads(json.dumps(self.g.snapshot()))
        self.g.mark_filed()

    def restore(self, now: int) -> None:
        if self.on_file is None:
            self.g = ShareGroup("g")
        else:
            self.g = ShareGroup.restore("g", self.on_file, now_ms=now, session_timeout_ms=S)


KINDS = {"consumer": Consumer, "share": Share}


def simulate(kind: str, tenures: list[tuple[int, int, int]], clients: list[Client]) -> tuple[object, list[str]]:
    """Run ``tenures`` ((serving ms, outage ms before the next coordinator, ms the clients
    take to reach it) each); returns the machine and the violations of the dead-member
    bound seen on the way."""
    m = KINDS[kind]()
    now, violations = 0, []
    for i, (length, outage, reach) in enumerate(tenures):
        if i:
            m.restore(now)
            for c in clients:  # they find the new coordinator ``reach`` after it serves
                c.next_at = max(c.next_at, now + reach)
        end = now + length
        while now < end:
            m.tick(now)
            for c in clients:
                if c.death is not None and now >= c.death + S + G + STEP and c.member_id in m.members():
                    violations.append(f"{c.member_id} (dead at {c.death}) still there at {now}")
                if c.fenced_at is not None or not c.alive(now) or now < max(c.next_at, c.phase):
                    continue
                c.next_at = now + c.hb
                if m.beat(c, now):
                    c.contacts.append(now)
                else:
                    c.fenced_at = now
            now += STEP
        now += outage  # nobody serves: the clients' heartbeats fail, they retry at their interval
        for c in clients:
            c.next_at = min(c.next_at, now)
    return m, violations


def longest_unheard(c: Client, end: int) -> int:
    """The longest time ``c`` went unheard while alive, up to ``end``."""
    times = [0, *c.contacts]
    last_alive = end if c.death is None else min(end, c.death)
    return max([b - a for a, b in zip(times, times[1:])] + [max(0, last_alive - times[-1])])


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=150, deadline=None)
@given(
    tenures=st.lists(st.tuples(st.integers(5, 60).map(lambda x: x * STEP),
                               st.integers(0, 25).map(lambda x: x * STEP) | st.just(2_500),
                               st.integers(0, (G - 2 * STEP) // STEP).map(lambda x: x * STEP)
                               | st.just(G - 2 * STEP)),
                     min_size=1, max_size=10),
    hbs=st.lists(st.sampled_from([500, 1_000, S // 3]), min_size=3, max_size=3),
    deaths=st.lists(st.one_of(st.none(), st.integers(0, 300).map(lambda x: x * STEP)), min_size=3, max_size=3),
)
def test_under_churn_live_members_stay_and_dead_ones_go_by_death_plus_session_plus_grace(kind, tenures, hbs,
                                                                                        deaths):
    tenures = [*tenures, (3 * S, 0, 0)]  # a last long tenure: everything settles
    clients = [Client(f"m{i}", hb, phase=i * STEP, death=d) for i, (hb, d) in enumerate(zip(hbs, deaths))]
    m, violations = simulate(kind, tenures, clients)
    assert violations == []
    end = sum(length + outage for length, outage, _ in tenures)
    for c in clients:
        if c.death is None:
            # a live member is fenced only if the churn kept it unheard for longer than
            # its session and the grace, less the lag its time on file may have
            if longest_unheard(c, end) < S + G - S // 3 - STEP:
                assert c.fenced_at is None, (c.member_id, c.fenced_at, c.contacts)
                assert c.member_id in m.members()  # type: ignore[attr-defined]
        elif end > c.death + S + G + STEP:
            assert c.member_id not in m.members()  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_coordinator_moves_faster_than_the_grace_cannot_keep_a_dead_member(kind):
    """Issue 42's case: a move every 4 s (well under the 6 s session): the dead member is
    gone within its session and the grace of its death; the live one stays."""
    clients = [Client("live", 1_000, 0, None), Client("dead", 1_000, STEP, 2_000)]
    tenures = [(3_500, 500, 1_000)] * 10 + [(2 * S, 0, 0)]
    m, violations = simulate(kind, tenures, clients)
    assert violations == [] and m.members() == {"live"}  # type: ignore[attr-defined]
    assert clients[0].fenced_at is None


def test_a_dead_members_partitions_go_to_the_restarted_member_on_its_next_heartbeat():
    """Item 3 of issue 42: a member dies and its restarted copy joins as a new member at
    once; the coordinator moves. Once the dead member is fenced, its partitions are the
    restarted member's at its next heartbeats, with no other round."""
    m = Consumer()
    a, b, c = Client("a", 1_000, 0, None), Client("b", 1_000, 0, 1_000), Client("c", 1_000, 0, None)
    for t in range(0, 1_000, 100):
        assert m.beat(a, t) and m.beat(b, t)
    assert sorted(a.owned["id-t"] + b.owned["id-t"]) == [0, 1, 2, 3, 4, 5]
    fenced_at, got_at = None, None
    for t in range(1_000, 1_000 + S + G + 2_000, 500):
        if t == 3_000:
            m.restore(t)  # the coordinator moves
        m.tick(t)
        if fenced_at is None and "b" not in m.members():
            fenced_at = t
        assert m.beat(a, t) and m.beat(c, t + 1)
        if got_at is None and len(c.owned.get("id-t", ())) == 3:
            got_at = t
        if fenced_at is None:
            assert len(c.owned.get("id-t", ())) < 3  # b's partitions wait for b
    assert fenced_at is not None and fenced_at <= 1_000 + S + G
    assert got_at is not None and got_at - fenced_at <= 500  # within the heartbeats that follow
    assert sorted(a.owned["id-t"] + c.owned["id-t"]) == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_live_member_slow_to_reach_the_new_coordinator_lives_on_its_grace(kind):
    """Its time on file lags by 1.5 s, the old coordinator is gone for 2.5 s and the member
    reaches the new one 2.8 s after it serves: 5.4 s unheard, 6.9 s after the time on file,
    more than its 6 s session; the grace (3 s from the restore) keeps it."""
    clients = [Client("m0", 500, 0, None)]
    m, violations = simulate(kind, [(3_600, 2_500, 0), (3 * S, 0, G - 200)], clients)
    assert clients[0].fenced_at is None and m.members() == {"m0"}  # type: ignore[attr-defined]
    assert clients[0].contacts[7:9] == [3_500, 3_600 + 2_500 + G - 200]
