"""Apache's rules for Alter/DescribeUserScramCredentials (kaas.domain.scram_users) and the
credentials file (kaas.storage.credentials): round trip, corrupt files refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kaas.domain import scram, scram_users
from kaas.domain.scram_users import Deletion, Upsertion
from kaas.errors import CorruptState
from kaas.storage import credentials


def up(user, mechanism=2, iterations=4096, password="pw"):
    name = scram.MECHANISM_TYPES.get(mechanism, "SCRAM-SHA-512")
    return Upsertion(user, mechanism, iterations, b"salt", scram.salted_password(name, password, b"salt", 4096))


def test_upsert_then_delete():
    users, res = scram_users.alter({}, [], [up("a"), up("b")])
    assert [(r.user, r.error_code) for r in res] == [("a", ErrorCode.none), ("b", ErrorCode.none)]
    users, res = scram_users.alter(users, [], [up("a", 1)])
    assert sorted(users["a"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert scram.verify_password("SCRAM-SHA-512", users["a"]["SCRAM-SHA-512"], "pw")
    assert "salted" not in repr(up("a")) and "pw" not in repr(up("a"))
    users, res = scram_users.alter(users, [Deletion("b", 2)], [])
    assert "b" not in users and res[0].error_code == ErrorCode.none


def test_a_user_with_one_refused_change_gets_none_applied():
    users, res = scram_users.alter({}, [Deletion("a", 1)], [up("a", 2), up("c", iterations=20000)])
    assert [(r.user, r.error_code) for r in res] == [("a", ErrorCode.resource_not_found),
                                                     ("c", ErrorCode.unacceptable_credential)]
    assert users == {}
    _users, res = scram_users.alter({}, [], [up("")])
    assert res[0].error_code == ErrorCode.unacceptable_credential


def test_a_user_changed_twice_in_one_request_is_a_duplicate_whatever_the_mechanisms():
    """Apache keys a request's changes by user name (``ScramControlManager``): two
    mechanisms of one user, or a deletion and an upsertion, are DUPLICATE_RESOURCE and
    neither is applied (the bug: kaas keyed them by user and mechanism)."""
    base, _ = scram_users.alter({}, [], [up("a", 2)])
    users, res = scram_users.alter(base, [], [up("b", 1), up("b", 2), up("c")])
    assert [(r.user, r.error_code) for r in res] == [("b", ErrorCode.duplicate_resource), ("c", ErrorCode.none)]
    assert "b" not in users and "c" in users
    users, res = scram_users.alter(base, [Deletion("a", 2)], [up("a", 1), up("a", 1)])
    assert [(r.user, r.error_code) for r in res] == [("a", ErrorCode.duplicate_resource)]
    assert users == base
    # a first change refused keeps its own error
    users, res = scram_users.alter(base, [Deletion("a", 1)], [up("a", 2)])
    assert [(r.user, r.error_code) for r in res] == [("a", ErrorCode.resource_not_found)]


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from([0, 1, 2, 3]), st.booleans()), max_size=8))
def test_at_most_one_change_per_user_is_applied(changes):
    base, _ = scram_users.alter({}, [], [up("a", 1)])
    dels = [Deletion(u, m) for u, m, is_del in changes if is_del]
    ups = [up(u, m) for u, m, is_del in changes if not is_del]
    after, res = scram_users.alter(base, dels, ups)
    named = [d.user for d in dels] + [u.user for u in ups]
    for r in res:
        if named.count(r.user) > 1:
            assert r.error_code != ErrorCode.none and after.get(r.user) == base.get(r.user)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from([0, 1, 2, 3]), st.booleans()), max_size=8))
def test_every_named_user_gets_one_result_in_first_appearance_order(changes):
    base, _ = scram_users.alter({}, [], [up("a", 1)])
    dels = [Deletion(u, m) for u, m, is_del in changes if is_del]
    ups = [up(u, m) for u, m, is_del in changes if not is_del]
    after, res = scram_users.alter(base, dels, ups)
    assert [r.user for r in res] == list(dict.fromkeys([d.user for d in dels] + [u.user for u in ups]))
    for r in res:
        if r.error_code != ErrorCode.none:  # untouched
            assert after.get(r.user) == base.get(r.user)


def test_file_round_trip_and_corruption(tmp_path):
    path = tmp_path / "security" / "scram-credentials.json"
    assert credentials.read(path) == {}
    users, _ = scram_users.alter({}, [], [up("a"), up("b", 1)])
    credentials.write(path, users, fsync=False)
    assert credentials.read(path) == users
    store = credentials.CredentialStore(path, fsync=False)
    assert store.lookup("a", "SCRAM-SHA-512") == users["a"]["SCRAM-SHA-512"]
    assert not store.refresh()  # unchanged
    for bad in ("{", "[]", '{"format": 2, "users": {}}', '{"format": 1}', '{"format": 1, "users": {"a": {}}}',
                '{"format": 1, "users": {"a": {"SCRAM-SHA-1": {}}}}',
                '{"format": 1, "users": {"a": {"SCRAM-SHA-512": {"salt": "!", "stored_key": "", '
                '"server_key": "", "iterations": 4096}}}}'):
        path.write_text(bad)
        with pytest.raises(CorruptState):
            credentials.read(path)
        assert store.refresh() or store.error is not None
        with pytest.raises(CorruptState):
            store.lookup("a", "SCRAM-SHA-512")  # never "no users"
    credentials.write(path, users, fsync=False)
    assert store.refresh() and store.error is None and store.lookup("b", "SCRAM-SHA-256") is not None


def test_describe():
    users, _ = scram_users.alter({}, [], [up("a"), up("b")])
    users, _ = scram_users.alter(users, [], [up("a", 1)])
    assert [(d.user, d.credentials) for d in scram_users.describe(users, None)] == [
        ("a", ((1, 4096), (2, 4096))), ("b", ((2, 4096),))]
    assert [(d.user, d.error_code) for d in scram_users.describe(users, ["b", "x", "a", "a"])] == [
        ("b", ErrorCode.none), ("x", ErrorCode.resource_not_found), ("a", ErrorCode.duplicate_resource)]
