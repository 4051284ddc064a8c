"""The slot file's bytes (``storage.txn_store.SlotEncoder``) are the canonical JSON of
``SlotState.to_json()``, however the entries change between two writes (each write reuses
the pieces of the entries that did not change)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.domain.txn import SlotState, TxnMetadata, TxnState
from kaas.storage.atomic import json_bytes
from kaas.storage.txn_store import SlotEncoder, entry_json

names = st.text(min_size=1, max_size=12)  # any unicode: quotes, backslashes, controls, non-ASCII
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
entries = st.builds(
    TxnMetadata, transactional_id=names, producer_id=ints, producer_epoch=ints, last_producer_id=ints,
    last_producer_epoch=ints, timeout_ms=ints, state=st.sampled_from(TxnState),
    partitions=st.frozensets(st.tuples(names, st.integers(0, 2**31 - 1)), max_size=5),
    groups=st.frozensets(names, max_size=3), ongoing_since_ms=ints, last_update_ms=ints, txn_seq=ints,
    txn_version=st.sampled_from((1, 2)), next_producer_id=ints)


def slot(metas: list[TxnMetadata]) -> SlotState:
    return SlotState({m.transactional_id: m for m in metas})


@given(entries)
def test_an_entry_is_its_canonical_json(meta):
    assert entry_json(meta).encode() == json_bytes(meta.to_json())


@given(st.lists(st.lists(entries, max_size=6), min_size=1, max_size=4))
def test_every_write_is_the_canonical_json_of_the_state(states):
    encoder = SlotEncoder()
    kept: dict[str, TxnMetadata] = {}
    for metas in states:
        # some entries stay the same objects from one write to the next, others change
        state = slot([*kept.values(), *metas])
        data = encoder.encode(7, state)
        assert data == json_bytes(state.to_json())
        assert SlotState.from_json(json.loads(data)) == state
        kept = dict(list(state.entries.items())[::2])


@given(entries, st.sampled_from(TxnState), st.frozensets(st.tuples(names, st.integers(0, 9))),
       st.frozensets(names), ints, ints, ints)
def test_a_transition_keeps_the_producer_fields(meta, state, partitions, groups, since, now, seq):
    from kaas.domain.txn_effects import moved

    assert moved(meta, state, partitions, groups, since, now, seq) == meta._replace(
        state=state, partitions=partitions, groups=groups, ongoing_since_ms=since, last_update_ms=now,
        txn_seq=seq)


@given(entries)
def test_an_entry_reads_back_from_its_json(meta):
    assert TxnMetadata.from_json(json.loads(entry_json(meta))) == meta


@given(entries, st.sampled_from(["producer_id", "producer_epoch", "last_producer_id", "last_producer_epoch",
                                 "timeout_ms", "ongoing_since_ms", "last_update_ms", "txn_seq"]),
       st.sampled_from([True, "7", 7.0, None, [7]]))
def test_a_field_of_another_type_is_refused(meta, field, value):
    obj = json.loads(entry_json(meta))
    obj[field] = value
    with pytest.raises(ValueError):
        TxnMetadata.from_json(obj)
    obj = json.loads(entry_json(meta))
    obj["state"] = "Prepared"
    with pytest.raises(ValueError):
        TxnMetadata.from_json(obj)
