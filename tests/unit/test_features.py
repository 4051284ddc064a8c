"""``domain.features``: UpdateFeatures' validation as Apache 4.4's controller decides it
(messages checked against a 4.4.0 KRaft node), its properties, and the features file."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kaas.domain import features as ft
from kaas.domain.features import Refusal, Update
from kaas.errors import CorruptState
from kaas.handlers import _feature_gate
from kaas.handlers.registry import REGISTRY
from kaas.storage.features import FeaturesFile, FinalizedFeatures
from kaas.wire import codec
from kaas.wire.build import build

TV, GV, SV, MV = ft.TRANSACTION_VERSION, ft.GROUP_VERSION, ft.SHARE_VERSION, ft.METADATA_VERSION
UP, SAFE, UNSAFE = 1, 2, 3
NEW = ft.default_levels()


def reason(result: dict[str, int] | Refusal) -> str:
    assert isinstance(result, Refusal) and result.error == "invalid_update_version", result
    prefix = "The update failed for all features since the following feature had an error: "
    assert result.message.startswith(prefix)
    return result.message[len(prefix):]


def test_new_cluster_levels_within_supported():
    assert NEW == {MV: 33, TV: ft.TRANSACTION_VERSION_MAX, GV: 1, SV: 1}
    assert ft.TRANSACTION_VERSION_MAX == 2  # KIP-890 part 2, finalized on a new cluster as in Apache 4.4
    for name, level in NEW.items():
        lo, hi = ft.SUPPORTED[name]
        assert lo <= level <= hi


def test_upgrade_downgrade_and_removal():
    assert ft.plan(NEW, [Update(TV, 0, SAFE)], 0) == {MV: 33, GV: 1, SV: 1}
    assert ft.plan(NEW, [Update(SV, 0, UNSAFE), Update(GV, 0, SAFE)], 0) == {MV: 33, TV: 2}
    assert ft.plan({MV: 33}, [Update(TV, 1, UP)], 0) == {MV: 33, TV: 1}
    assert ft.plan(NEW, [Update(TV, 1, SAFE)], 0) == {**NEW, TV: 1}  # a safe downgrade to TV1
    assert ft.plan({**NEW, TV: 1}, [Update(TV, 2, UP)], 0) == NEW  # and back up
    assert ft.plan(NEW, [Update(TV, 2, SAFE)], 0) == NEW  # same level: any type
    assert ft.plan(NEW, [Update(MV, 33, SAFE)], 0) == NEW
    assert ft.plan(NEW, [Update("streams.version", 0, SAFE)], 0) == NEW  # an Apache feature kaas lacks, off
    assert ft.plan(NEW, [], 0) == NEW


@pytest.mark.parametrize(("current", "update", "why"), [
    (NEW, Update(TV, 3, UP), "Invalid update version 3 for feature transaction.version. Local controller 3 only "
                             "supports versions 0-2"),
    (NEW, Update(TV, 0, UP), "Invalid update version 0 for feature transaction.version. Can't downgrade the version "
                             "of this feature without setting the upgrade type to either safe or unsafe downgrade."),
    ({MV: 33}, Update(TV, 1, SAFE), "Invalid update version 1 for feature transaction.version. Can't downgrade to a "
                                    "newer version."),
    ({MV: 33}, Update(GV, 1, UNSAFE), "Invalid update version 1 for feature group.version. Can't downgrade to a "
                                      "newer version."),
    # the upgrade type is checked first, even before a negative level (as Apache)
    (NEW, Update(TV, -1, 0), "Invalid update version -1 for feature transaction.version. The controller does not "
                             "support the given upgrade type."),
    (NEW, Update(TV, 9, 4), "Invalid update version 9 for feature transaction.version. The controller does not "
                            "support the given upgrade type."),
    (NEW, Update("foo", -1, UP), "Invalid update version -1 for feature foo. A feature version cannot be less than 0."),
    (NEW, Update("foo", 1, UP), "Invalid update version 1 for feature foo. Local controller 3 does not support this "
                                "feature."),
    (NEW, Update("", 1, UP), "Invalid update version 1 for feature . Local controller 3 does not support this "
                             "feature."),
    (NEW, Update("foo", 0, SAFE), "Invalid update version 0 for feature foo. Feature foo not found."),
    (NEW, Update(MV, 7, UNSAFE), "Invalid update version 7 for feature metadata.version. Local controller 3 only "
                                 "supports versions 33-33"),
    (NEW, Update("eligible.leader.replicas.version", 1, UP),
     "Invalid update version 1 for feature eligible.leader.replicas.version. Local controller 3 does not support "
     "this feature."),
])
def test_refusals(current, update, why):
    assert reason(ft.plan(current, [update], 3)) == why


def test_first_bad_update_refuses_all_and_each_is_checked_against_the_committed_levels():
    got = ft.plan(NEW, [Update(TV, 0, SAFE), Update("foo", 1, UP)], 0)
    assert reason(got).startswith("Invalid update version 1 for feature foo.")
    # the second update of a feature is checked against the committed level, not the first's
    got = ft.plan(NEW, [Update(TV, 0, SAFE), Update(TV, 2, UP)], 0)
    assert got == NEW


names = st.sampled_from([MV, TV, GV, SV, "kraft.version", "streams.version", "foo", ""])
updates = st.lists(st.builds(Update, names, st.integers(-2, 40), st.integers(-1, 5)), max_size=5)
levels = st.dictionaries(st.sampled_from(sorted(ft.SUPPORTED)), st.integers(1, 40))


@given(levels, updates)
def test_plan_properties(current, ups):
    got = ft.plan(current, ups, 0)
    if isinstance(got, Refusal):
        assert got.error == "invalid_update_version"
        return
    for name, level in got.items():
        assert level >= 1
        if name not in current or current[name] != level:  # a level plan set: always supported
            lo, hi = ft.SUPPORTED[name]
            assert lo <= level <= hi
    for u in ups:  # every update was either an upgrade or a downgrade of the right type
        old = current.get(u.feature, 0)
        assert (u.level >= old) == (u.level == old or u.upgrade_type == UP)
    assert set(got) <= set(current) | {u.feature for u in ups}


in_range = st.fixed_dictionaries({}, optional={n: st.integers(lo, hi).filter(bool)
                                               for n, (lo, hi) in ft.SUPPORTED.items()})


@given(in_range, updates)
def test_plan_is_deterministic_and_idempotent(current, ups):
    first = ft.plan(current, ups, 0)
    assert ft.plan(current, ups, 0) == first
    if not isinstance(first, Refusal):
        again = ft.plan(first, [Update(n, lv, UP) for n, lv in first.items() if n in ft.SUPPORTED], 0)
        assert again == first


def test_file_round_trip_create_and_corrupt(tmp_path):
    f = FeaturesFile(tmp_path / "features.json", fsync=False)
    assert f.read() == FinalizedFeatures(0, NEW)  # no file: the new-cluster levels, epoch 0
    assert f.create() is True
    assert f.create() is False  # exclusive: a second controller never writes twice
    assert f.read() == FinalizedFeatures(1, NEW)
    f.write(f.read().with_levels({MV: 33}))
    assert f.read() == FinalizedFeatures(2, {MV: 33})
    for bad in ({"format": 2, "epoch": 1, "levels": {}}, {"format": 1, "epoch": -1, "levels": {}},
                {"format": 1, "epoch": 1, "levels": {TV: 0}}, {"format": 1, "epoch": 1, "levels": {TV: "1"}},
                {"format": 1, "epoch": 1, "levels": []}, {"format": 1, "levels": {}}):
        f.path.write_text(json.dumps(bad))
        with pytest.raises(CorruptState):
            f.read()


def test_gate_refusals_build_and_encode_at_every_version():
    """Each gated API's refusal builds into its response class at every version served."""
    asked = {"group_ids": ["g1", "g2"], "groups": [{"group_id": "g1"}]}
    for key in _feature_gate.GATES:
        h = REGISTRY[key]
        for v in range(h.min_version, h.max_version + 1):
            req = build(codec.request_class(key, v), asked)
            body = build(codec.response_class(key, v), _feature_gate.refusal(key, req, ErrorCode.unsupported_version))
            assert codec.encode_response(key, v, 7, body)
            errors = [getattr(body, "error_code", None)] + [g.error_code for g in getattr(body, "groups", ())]
            assert ErrorCode.unsupported_version in errors, (key, v, body)
