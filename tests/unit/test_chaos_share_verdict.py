"""scripts/chaos's share scenario: the per-record verdict over what the clients reported,
the read-back and the share-partition files."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from chaos.share_verdict import ACCEPT, RELEASE, Ack, Delivery, Evidence, verdict  # noqa: E402

LIMIT = 5


def _ev(deliveries, acks, *, committed=None, aborted=(), produced=None, final=None) -> Evidence:
    committed = committed if committed is not None else {(0, 0): "a", (0, 1): "b"}
    return Evidence(committed, [Delivery(*d) for d in deliveries], [Ack(*a) for a in acks], set(aborted),
                    set(committed.values()) if produced is None else set(produced), LIMIT, final or {})


def _kinds(ev: Evidence) -> dict[str, int]:
    return verdict(ev)["anomalies"]


def test_each_record_delivered_and_accepted_once_is_clean():
    ev = _ev([("c0", 0, 0, "a", 1), ("c1", 0, 1, "b", 1)],
             [("c0", 0, 0, ACCEPT, 1, None), ("c1", 0, 1, ACCEPT, 1, None)])
    v = verdict(ev)
    assert v["ok"] and v["anomalies"] == {}
    assert (v["counts"]["committed"], v["counts"]["accepted"], v["counts"]["redeliveries"]) == (2, 2, 0)


def test_a_release_then_a_later_accept_is_clean():
    ev = _ev([("c0", 0, 0, "a", 1), ("c1", 0, 0, "a", 2), ("c1", 0, 1, "b", 1)],
             [("c0", 0, 0, RELEASE, 1, None), ("c1", 0, 0, ACCEPT, 2, None), ("c1", 0, 1, ACCEPT, 1, None)])
    v = verdict(ev)
    assert v["ok"], v
    assert (v["counts"]["released"], v["counts"]["redeliveries"], v["counts"]["max_delivery_count"]) == (1, 1, 2)


def test_lost_and_never_delivered_records_are_anomalies():
    ev = _ev([("c0", 0, 0, "a", 1)], [("c0", 0, 0, ACCEPT, 1, "transport failure")],
             final={0: (0, [(0, 1, "AVAILABLE", 1)])})
    assert _kinds(ev) == {"lost (delivered, never accepted)": 1, "never delivered": 1}


def test_an_accept_whose_answer_was_lost_counts_when_the_files_say_acknowledged():
    ev = _ev([("c0", 0, 0, "a", 1), ("c0", 0, 1, "b", 1)],
             [("c0", 0, 0, ACCEPT, 1, "transport failure"), ("c0", 0, 1, ACCEPT, 1, None)],
             final={0: (0, [(0, 1, "ACKNOWLEDGED", 1)])})
    v = verdict(ev)
    assert v["ok"] and v["counts"]["accept_answer_lost"] == 1


def test_a_record_archived_at_the_delivery_limit_is_counted_not_lost():
    ds = [("c0", 0, 0, "a", n) for n in range(1, LIMIT + 1)] + [("c0", 0, 1, "b", 1)]
    ev = _ev(ds, [("c0", 0, 1, ACCEPT, 1, None)], final={0: (2, [])})
    v = verdict(ev)
    assert v["ok"] and v["counts"]["archived_at_limit"] == 1
    below = _ev(ds[:2] + ds[-1:], [("c0", 0, 1, ACCEPT, 1, None)], final={0: (0, [(0, 0, "ARCHIVED", 3)])})
    assert _kinds(below) == {"lost (delivered, never accepted)": 1}  # archived below the limit


def test_accepted_twice_and_delivered_after_an_accept():
    ev = _ev([("c0", 0, 0, "a", 1), ("c1", 0, 0, "a", 2), ("c1", 0, 1, "b", 1)],
             [("c0", 0, 0, ACCEPT, 1, None), ("c1", 0, 0, ACCEPT, 2, None), ("c1", 0, 1, ACCEPT, 1, None)])
    assert _kinds(ev) == {"accepted twice": 1, "delivered after an accept answered success": 1}


def test_one_delivery_count_handed_out_twice_and_over_the_limit():
    ev = _ev([("c0", 0, 0, "a", 1), ("c1", 0, 0, "a", 1), ("c1", 0, 1, "b", LIMIT + 1)],
             [("c1", 0, 0, ACCEPT, 1, None), ("c1", 0, 1, ACCEPT, LIMIT + 1, None)])
    assert _kinds(ev) == {"delivered twice at one delivery count": 1, "delivery count over the limit": 1}


def test_a_killed_consumers_records_come_again_at_the_next_count():
    """A SIGKILLed consumer's session close releases what it held with the delivery counts
    kept (Apache 4.4): its next incarnation gets those records at the next count, and the
    same count twice is an anomaly, whoever got it."""
    ev = _ev([("c3.0", 0, 0, "a", 1), ("c3.1", 0, 0, "a", 2), ("c1.0", 0, 1, "b", 1)],
             [("c3.1", 0, 0, ACCEPT, 2, None), ("c1.0", 0, 1, ACCEPT, 1, None)])
    assert _kinds(ev) == {}
    ev = _ev([("c3.0", 0, 0, "a", 1), ("c3.1", 0, 0, "a", 1), ("c1.0", 0, 1, "b", 1)],
             [("c3.1", 0, 0, ACCEPT, 1, None), ("c1.0", 0, 1, ACCEPT, 1, None)])
    assert _kinds(ev) == {"delivered twice at one delivery count": 1}


def test_aborted_and_uncommitted_deliveries_and_producer_losses():
    committed = {(0, 0): "a", (0, 2): "c"}
    ev = _ev([("c0", 0, 0, "a", 1), ("c0", 0, 1, "x", 1), ("c0", 0, 2, "c", 1), ("c0", 0, 3, "y", 1)],
             [("c0", 0, o, ACCEPT, 1, None) for o in range(4)], committed=committed, aborted={"x", "c"},
             produced={"a", "c", "z"})
    assert _kinds(ev) == {"aborted record delivered": 2, "delivered, not in the committed log": 1,
                          "aborted record in the read_committed log": 1,
                          "producer-acknowledged record missing from the log": 1}
    wrong = _ev([("c0", 0, 0, "q", 1), ("c0", 0, 1, "b", 1)],
                [("c0", 0, 0, ACCEPT, 1, None), ("c0", 0, 1, ACCEPT, 1, None)])
    assert _kinds(wrong) == {"delivered a value the log does not hold there": 1}
