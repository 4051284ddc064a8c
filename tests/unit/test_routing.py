"""Coordinator placement: FNV-1a, txn slots, coordinator_for and slot_owners."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kaas.domain.routing import (
    NO_BROKER,
    TXN_SLOTS,
    coordinator_for,
    fnv1a_32,
    slot_owners,
    txn_slot,
    txn_slot_key,
)

broker_sets = st.sets(st.integers(0, 40), min_size=1, max_size=8)
keys = st.lists(st.text(max_size=20), min_size=1, max_size=40, unique=True)


@st.composite
def cluster(draw: st.DrawFn, min_alive: int = 0) -> tuple[list[int], set[int]]:
    registered = sorted(draw(broker_sets))
    alive = draw(st.sets(st.sampled_from(registered), min_size=min(min_alive, len(registered))))
    return registered, alive


# ---- FNV-1a and txn slots ---------------------------------------------------------------


def test_fnv1a_known_vectors() -> None:
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968


@given(st.binary(max_size=64))
def test_fnv1a_is_32_bit(data: bytes) -> None:
    assert 0 <= fnv1a_32(data) < 2**32


def test_txn_slot_is_fnv_mod_50() -> None:
    assert TXN_SLOTS == 50
    assert txn_slot("") == 0x811C9DC5 % 50
    assert txn_slot("a") == 0xE40C292C % 50
    assert txn_slot("héllo") == fnv1a_32("héllo".encode()) % 50


@given(st.text())
def test_txn_slot_in_range(tid: str) -> None:
    assert 0 <= txn_slot(tid) < TXN_SLOTS


# ---- coordinator_for ----------------------------------------------------------------------


def test_primary_is_fnv_mod_registered_when_alive() -> None:
    registered = [7, 3, 5]
    for key in ["group-1", "g", "", "orders-consumers"]:
        want = sorted(registered)[fnv1a_32(key.encode()) % 3]
        assert coordinator_for(key, registered, registered) == want


def test_dead_primary_keeps_the_divisor() -> None:
    registered = [0, 1, 2, 3]
    key = next(k for k in (f"g{i}" for i in range(100)) if fnv1a_32(k.encode()) % 4 == 2)
    assert coordinator_for(key, registered, {0, 1, 2, 3}) == 2
    owner = coordinator_for(key, registered, {0, 1, 3})
    assert owner in {0, 1, 3}
    # Another key whose primary is alive is unaffected by 2's death.
    other = next(k for k in (f"g{i}" for i in range(100)) if fnv1a_32(k.encode()) % 4 == 1)
    assert coordinator_for(other, registered, {0, 1, 3}) == 1


def test_nobody_alive_is_none() -> None:
    assert coordinator_for("g", [0, 1, 2], []) is None
    assert coordinator_for("g", [], set()) is None


def test_alive_but_unregistered_can_only_be_an_alternate() -> None:
    assert coordinator_for("g", [], {4}) == 4


@given(cluster(), st.text(max_size=30), st.randoms(use_true_random=False))
def test_deterministic_and_order_independent(
    c: tuple[list[int], set[int]], key: str, rnd: random.Random
) -> None:
    registered, alive = c
    owner = coordinator_for(key, registered, alive)
    shuffled_reg = list(registered)
    shuffled_alive = list(alive)
    rnd.shuffle(shuffled_reg)
    rnd.shuffle(shuffled_alive)
    assert coordinator_for(key, shuffled_reg + shuffled_reg[:1], shuffled_alive) == owner
    assert coordinator_for(key, tuple(registered), frozenset(alive)) == owner
    if alive:
        assert owner in alive
    else:
        assert owner is None


@given(cluster(min_alive=1), keys, st.data())
def test_killing_one_broker_moves_only_its_keys(
    c: tuple[list[int], set[int]], ks: list[str], data: st.DataObject
) -> None:
    registered, alive = c
    victim = data.draw(st.sampled_from(sorted(alive)))
    survivors = alive - {victim}
    for key in ks:
        before = coordinator_for(key, registered, alive)
        after = coordinator_for(key, registered, survivors)
        if before != victim:
            assert after == before
        elif survivors:
            assert after in survivors
        else:
            assert after is None


@given(cluster(), keys, st.data())
def test_reviving_one_broker_moves_keys_only_to_it(
    c: tuple[list[int], set[int]], ks: list[str], data: st.DataObject
) -> None:
    registered, alive = c
    dead = sorted(set(registered) - alive)
    if not dead:
        return
    revived = data.draw(st.sampled_from(dead))
    for key in ks:
        before = coordinator_for(key, registered, alive)
        after = coordinator_for(key, registered, alive | {revived})
        assert after == before or after == revived


def test_dead_brokers_keys_spread_over_survivors() -> None:
    registered = list(range(5))
    alive = {0, 1, 3, 4}
    owners = [coordinator_for(f"group-{i}", registered, alive) for i in range(4000)]
    primaries = [coordinator_for(f"group-{i}", registered, registered) for i in range(4000)]
    moved = [o for o, p in zip(owners, primaries, strict=True) if p == 2]
    assert moved
    # Every survivor takes a share of broker 2's keys (no single heir).
    for b in alive:
        assert moved.count(b) > len(moved) / 8


# ---- slot_owners --------------------------------------------------------------------------


@settings(max_examples=50)
@given(cluster())
def test_slot_owners_use_coordinator_for(c: tuple[list[int], set[int]]) -> None:
    registered, alive = c
    owners = slot_owners(registered, alive)
    assert sorted(owners) == list(range(TXN_SLOTS))
    for slot, owner in owners.items():
        want = coordinator_for(txn_slot_key(slot), registered, alive)
        assert owner == (NO_BROKER if want is None else want)
    assert slot_owners(list(reversed(registered)), sorted(alive)) == owners


def test_slot_key_format() -> None:
    assert txn_slot_key(7) == "__txn_slot_7"


def test_slots_spread_over_a_full_cluster() -> None:
    for n in range(1, 6):
        owners = slot_owners(range(n), range(n))
        assert set(owners.values()) == set(range(n))
