"""``domain.client_quotas``: AlterClientQuotas' validation and DescribeClientQuotas' filter
with Apache 4.4's messages (checked against a 4.4.0 KRaft node), KIP-55's precedence in
``effective``, and the quota file."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.domain import client_quotas as cq
from kaas.domain.client_quotas import CLIENT_ID, IP, USER, Op, Refusal
from kaas.errors import CorruptState
from kaas.storage.client_quotas import ClientQuotaFile, ClientQuotas

EXACT, DEFAULT, ANY = 0, 1, 2


def never(_: str) -> bool:
    return False


def refused(got: object) -> tuple[str, str]:
    assert isinstance(got, Refusal), got
    return got.error, got.message


def test_parse_entity():
    assert cq.parse_entity([(USER, "u"), (CLIENT_ID, "c")], never) == ((CLIENT_ID, "c"), (USER, "u"))
    assert cq.parse_entity([(USER, None)], never) == ((USER, None),)
    assert cq.parse_entity([(USER, "a"), (USER, "b")], never) == ((USER, "b"),)  # the later one, as Apache
    assert cq.parse_entity([(IP, "::1")], never) == ((IP, "::1"),)
    assert cq.parse_entity([(IP, "localhost")], lambda n: n == "localhost") == ((IP, "localhost"),)


@pytest.mark.parametrize(("pairs", "message"), [
    ([], "Invalid empty client quota entity"),
    ([("foo", "x")], "Unhandled client quota entity type: foo"),
    ([(USER, "u"), ("foo", "c")], "Unhandled client quota entity type: foo"),
    ([(USER, "")], "Empty user not supported"),
    ([(CLIENT_ID, "")], "Empty client-id not supported"),
    ([(IP, "")], "Empty ip not supported"),
    ([(USER, "a"), (IP, "1.2.3.4")],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ([(USER, "a"), (IP, "bad ip")],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ([(IP, "999.1.1.1")], "999.1.1.1 is not a valid IP or resolvable host."),
    ([(IP, "not-an-ip")], "not-an-ip is not a valid IP or resolvable host."),
])
def test_parse_entity_refusals(pairs, message):
    assert refused(cq.parse_entity(pairs, never)) == ("invalid_request", message)


U = ((USER, "u"),)
UC = ((CLIENT_ID, "c"), (USER, "u"))
IPE = ((IP, "10.0.0.1"),)


def test_alter_entry():
    assert cq.alter_entry({}, U, [Op("producer_byte_rate", 1024)]) == {"producer_byte_rate": 1024.0}
    got = cq.alter_entry({"producer_byte_rate": 1.0}, U, [Op("producer_byte_rate", 0, True),
                                                          Op("request_percentage", 1.5)])
    assert got == {"request_percentage": 1.5}
    assert cq.alter_entry({}, U, [Op("foo", -5, True)]) == {}  # a removal is not checked (Apache)
    assert cq.alter_entry({}, U, [Op("controller_mutation_rate", 1.5)]) == {"controller_mutation_rate": 1.5}
    assert cq.alter_entry({}, IPE, [Op("connection_creation_rate", 5)]) == {"connection_creation_rate": 5.0}
    assert cq.alter_entry({}, U, [Op("producer_byte_rate", 9.2e18)]) == {"producer_byte_rate": 9.2e18}


@pytest.mark.parametrize(("entity", "ops", "message"), [
    (U, [Op("foo_rate", 1)], "Invalid configuration key foo_rate"),
    (IPE, [Op("producer_byte_rate", 1)], "Invalid configuration key producer_byte_rate"),
    (U, [Op("connection_creation_rate", 1)], "Invalid configuration key connection_creation_rate"),
    (U, [Op("producer_byte_rate", -1)], "Quota producer_byte_rate must be greater than 0"),
    (U, [Op("producer_byte_rate", 0)], "Quota producer_byte_rate must be greater than 0"),
    (U, [Op("request_percentage", 0)], "Quota request_percentage must be greater than 0"),
    (U, [Op("controller_mutation_rate", 0)], "Quota controller_mutation_rate must be greater than 0"),
    (U, [Op("producer_byte_rate", 1.5)], "producer_byte_rate cannot be a fractional value."),
    (IPE, [Op("connection_creation_rate", 1.5)], "connection_creation_rate cannot be a fractional value."),
    (U, [Op("producer_byte_rate", 1e300)], "Proposed value for producer_byte_rate is too large for a LONG."),
    (U, [Op("producer_byte_rate", 9.3e18)], "Proposed value for producer_byte_rate is too large for a LONG."),
    (IPE, [Op("connection_creation_rate", 3e9)],
     "Proposed value for connection_creation_rate is too large for an INT."),
    (U, [Op("producer_byte_rate", math.nan)], "Quota producer_byte_rate must be a finite number"),
    (U, [Op("request_percentage", math.inf)], "Quota request_percentage must be a finite number"),
    (UC, [Op("producer_byte_rate", 1), Op("producer_byte_rate", 2)],
     "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c, user=u})"),
    (((CLIENT_ID, None), (USER, None)), [Op("producer_byte_rate", 1), Op("producer_byte_rate", 1)],
     "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=null, user=null})"),
])
def test_alter_entry_refusals(entity, ops, message):
    assert refused(cq.alter_entry({}, entity, ops)) == ("invalid_request", message)


QUOTAS = {
    ((USER, "alice"),): {"producer_byte_rate": 1.0},
    ((CLIENT_ID, "c1"), (USER, "alice")): {"consumer_byte_rate": 2.0},
    ((USER, None),): {"producer_byte_rate": 3.0},
    ((CLIENT_ID, None),): {"producer_byte_rate": 4.0},
    ((CLIENT_ID, None), (USER, None)): {"producer_byte_rate": 5.0},
    ((CLIENT_ID, "c2"),): {"controller_mutation_rate": 6.0},
    ((IP, "10.0.0.1"),): {"connection_creation_rate": 7.0},
    ((IP, None),): {"connection_creation_rate": 8.0},
}


def found(components, strict=False):
    got = cq.describe(QUOTAS, components, strict)
    assert not isinstance(got, Refusal), got
    return [e for e, _ in got]


def test_describe_matches():
    assert len(found([])) == len(QUOTAS)
    assert found([], strict=True) == []
    assert found([(USER, EXACT, "alice")]) == [((CLIENT_ID, "c1"), (USER, "alice")), ((USER, "alice"),)]
    assert found([(USER, EXACT, "alice")], strict=True) == [((USER, "alice"),)]
    assert found([(USER, DEFAULT, None)]) == [((CLIENT_ID, None), (USER, None)), ((USER, None),)]
    assert found([(USER, DEFAULT, None)], strict=True) == [((USER, None),)]
    assert found([(USER, ANY, None)], strict=True) == [((USER, None),), ((USER, "alice"),)]  # default first
    assert found([(USER, ANY, None), (CLIENT_ID, ANY, None)], strict=True) == [
        ((CLIENT_ID, None), (USER, None)), ((CLIENT_ID, "c1"), (USER, "alice"))]
    assert found([(CLIENT_ID, EXACT, "c1")]) == [((CLIENT_ID, "c1"), (USER, "alice"))]
    assert found([(IP, ANY, None)]) == [((IP, None),), ((IP, "10.0.0.1"),)]
    assert found([(USER, EXACT, "nobody")]) == []
    got = cq.describe(QUOTAS, [(IP, EXACT, "10.0.0.1")], True)
    assert got == [(((IP, "10.0.0.1"),), {"connection_creation_rate": 7.0})]


@pytest.mark.parametrize(("components", "error", "message"), [
    ([(USER, 3, None)], "invalid_request", "Unknown match type 3"),
    ([(USER, EXACT, None)], "invalid_request", "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([(USER, DEFAULT, "x")], "invalid_request",
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([(USER, ANY, "x")], "invalid_request",
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([(USER, ANY, None), (USER, ANY, None)], "invalid_request",
     "Entity type user cannot appear more than once in the filter."),
    ([(USER, ANY, None), (IP, ANY, None)], "invalid_request",
     "Invalid entity filter component combination. IP filter component should not be used with user or clientId "
     "filter component."),
    ([("foo", ANY, None)], "unsupported_version", "Unsupported entity type foo"),
])
def test_describe_refusals(components, error, message):
    assert refused(cq.describe(QUOTAS, components, False)) == (error, message)


def test_effective_follows_kip55():
    q = {
        ((CLIENT_ID, "c"), (USER, "u")): {"producer_byte_rate": 1.0},
        ((CLIENT_ID, None), (USER, "u")): {"producer_byte_rate": 2.0, "consumer_byte_rate": 20.0},
        ((USER, "u"),): {"producer_byte_rate": 3.0, "consumer_byte_rate": 30.0, "request_percentage": 300.0},
        ((CLIENT_ID, "c"), (USER, None)): {"producer_byte_rate": 4.0},
        ((CLIENT_ID, None), (USER, None)): {"producer_byte_rate": 5.0},
        ((USER, None),): {"producer_byte_rate": 6.0},
        ((CLIENT_ID, "c"),): {"producer_byte_rate": 7.0},
        ((CLIENT_ID, None),): {"producer_byte_rate": 8.0, "controller_mutation_rate": 80.0},
    }
    assert cq.effective(q, "producer_byte_rate", user="u", client_id="c") == (1.0, ((CLIENT_ID, "c"), (USER, "u")))
    assert cq.effective(q, "producer_byte_rate", user="u", client_id="x")[0] == 2.0
    assert cq.effective(q, "consumer_byte_rate", user="u", client_id="c")[0] == 20.0  # per key
    assert cq.effective(q, "request_percentage", user="u", client_id="c")[0] == 300.0
    assert cq.effective(q, "producer_byte_rate", user="v", client_id="c")[0] == 4.0
    assert cq.effective(q, "controller_mutation_rate", user="u", client_id="c")[0] == 80.0
    assert cq.effective(q, "connection_creation_rate", ip="1.2.3.4") is None
    assert cq.effective(QUOTAS, "connection_creation_rate", ip="10.0.0.1")[0] == 7.0
    assert cq.effective(QUOTAS, "connection_creation_rate", ip="10.0.0.2")[0] == 8.0
    # the 8 levels, removed one by one from the most specific, give each next in order
    left = dict(q)
    for expect, entity in enumerate(cq._precedence("u", "c"), start=1):
        assert cq.effective(left, "producer_byte_rate", user="u", client_id="c") == (float(expect), entity)
        del left[entity]
    assert cq.effective(left, "producer_byte_rate", user="u", client_id="c") is None


names = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]))
entities = st.sampled_from([((USER, "a"),), ((USER, None),), ((CLIENT_ID, "c"),), ((CLIENT_ID, None),),
                            ((CLIENT_ID, "c"), (USER, "a")), ((CLIENT_ID, None), (USER, "a")),
                            ((CLIENT_ID, "c"), (USER, None)), ((CLIENT_ID, None), (USER, None))])
quota_maps = st.dictionaries(entities, st.fixed_dictionaries({"producer_byte_rate": st.integers(1, 99).map(float)}))


@given(quota_maps, st.sampled_from(["a", "b"]), st.sampled_from(["c", "d"]))
def test_effective_is_the_most_specific_matching_entity(quotas, user, client):
    got = cq.effective(quotas, "producer_byte_rate", user=user, client_id=client)
    matching = [e for e in quotas if all({USER: user, CLIENT_ID: client}[t] == n or n is None for t, n in e)]
    if got is None:
        assert not matching
        return
    value, entity = got
    assert entity in matching and quotas[entity]["producer_byte_rate"] == value
    order = list(cq._precedence(user, client))
    assert all(order.index(entity) <= order.index(e) for e in matching)


components = st.lists(st.tuples(st.sampled_from([USER, CLIENT_ID, IP, "x"]), st.integers(-1, 3),
                                st.one_of(st.none(), st.sampled_from(["a", "alice", "c1"]))), max_size=3)


@given(components, st.booleans())
def test_describe_results_match_every_component(comps, strict):
    got = cq.describe(QUOTAS, comps, strict)
    if isinstance(got, Refusal):
        assert got.error in ("invalid_request", "unsupported_version")
        return
    for entity, values in got:
        names = dict(entity)
        assert values == QUOTAS[entity]
        for t, m, s in comps:
            assert t in names and (m == ANY or names[t] == s)
        if strict:
            assert len(names) == len(comps)


@given(st.lists(st.tuples(st.sampled_from(sorted(cq.CLIENT_KEYS) + ["foo"]),
                          st.one_of(st.floats(allow_nan=True), st.integers(-5, 2**64).map(float)), st.booleans()),
                max_size=4))
def test_alter_entry_never_stores_what_apache_refuses(ops):
    got = cq.alter_entry({}, UC, [Op(k, v, r) for k, v, r in ops])
    if not isinstance(got, Refusal):
        assert cq.check_stored(UC, got) is None or not got


def test_file_round_trip_and_corrupt(tmp_path):
    f = ClientQuotaFile(tmp_path / "q.json", fsync=False)
    assert f.read() == ClientQuotas()
    v1 = ClientQuotas().with_entries({UC: {"producer_byte_rate": 1.0}, ((USER, None),): {"request_percentage": 2.5}})
    f.write(v1)
    assert f.read() == v1
    v2 = v1.with_entries({UC: {}})
    f.write(v2)
    assert f.read() == ClientQuotas(2, {((USER, None),): {"request_percentage": 2.5}})
    for bad in ({"format": 1, "version": 1, "entries": [{"entity": {"user": "u"}, "quotas": {"foo": 1}}]},
                {"format": 1, "version": 1, "entries": [{"entity": {"user": "u"}, "quotas": {}}]},
                {"format": 1, "version": 1, "entries": [{"entity": {"ip": "1.1.1.1", "user": "u"},
                                                         "quotas": {"producer_byte_rate": 1}}]},
                {"format": 1, "version": 1, "entries": [{"entity": {"user": "u"},
                                                         "quotas": {"producer_byte_rate": 1.5}}]},
                {"format": 1, "version": 1, "entries": [{"entity": {"user": 5}, "quotas": {"producer_byte_rate": 1}}]},
                {"format": 2, "version": 1, "entries": []}):
        f.path.write_text(json.dumps(bad))
        with pytest.raises(CorruptState):
            f.read()
