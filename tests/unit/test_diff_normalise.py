"""The differential-conformance tool's pure parts (scripts/diff): the normaliser, the
differ, explanations, and the corpus (its expansion, its templates, and that every API
kaas serves has scenarios whose bodies build at every served version). No broker, no Java."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import MetadataResponse

from kaas.handlers.registry import REGISTRY
from kaas.wire import codec
from kaas.wire.batch import build_batch
from kaas.wire.build import build

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from diff import corpus  # noqa: E402
from diff.normalise import (  # noqa: E402
    MASK,
    Difference,
    Explanation,
    batches,
    differences,
    explain,
    normalise,
    select,
    to_tree,
)
from diff.runner import make_batch  # noqa: E402

CORPUS = REPO / "compat" / "diff" / "scenarios"
EXPLANATIONS = REPO / "compat" / "diff" / "explanations.json"


def _metadata(leader: int, isr: list[int], error: ErrorCode = ErrorCode.none) -> MetadataResponse:
    return build(MetadataResponse, {
        "throttle_time": 7, "cluster_id": "abc", "controller_id": 2,
        "brokers": [{"node_id": 1, "host": "h", "port": 9092}, {"node_id": 0, "host": "h", "port": 9093}],
        "topics": [{"name": "t", "topic_id": uuid.uuid4(), "error_code": error, "partitions": [
            {"partition_index": 1, "leader_id": leader, "leader_epoch": 0, "replica_nodes": isr, "isr_nodes": isr},
            {"partition_index": 0, "leader_id": -1, "leader_epoch": 0, "replica_nodes": [], "isr_nodes": []}]}]})


def test_to_tree_plain_data():
    tree = to_tree(_metadata(1, [1]))
    assert tree["throttle_time"] == 7
    assert tree["topics"][0]["error_code"] == "none"
    assert isinstance(tree["topics"][0]["topic_id"], str)
    json.dumps(tree)  # plain data


def test_normalise_masks_what_differs_by_nature_and_keeps_none_values():
    a = normalise(to_tree(_metadata(1, [1, 2])))
    assert a["throttle_time"] == MASK and a["cluster_id"] == MASK
    parts = {p["partition_index"]: p for p in a["topics"][0]["partitions"]}
    assert parts[0]["leader_id"] == -1  # no leader stays visible
    assert parts[1]["leader_id"] == MASK and parts[1]["isr_nodes"] == [MASK, MASK]
    tree = to_tree(_metadata(1, [1, 2]))
    tree["topics"][0]["partitions"].reverse()
    tree["brokers"].reverse()
    assert normalise(tree) == a  # the order of lists is free


def test_same_shape_from_other_brokers_is_identical():
    assert differences(normalise(to_tree(_metadata(1, [1]))), normalise(to_tree(_metadata(2, [0])))) == []


def test_real_differences_are_found_by_key():
    a = normalise(to_tree(_metadata(1, [1])))
    b = normalise(to_tree(_metadata(-1, [1, 2], ErrorCode.leader_not_available)))
    diffs = {d.pattern: d for d in differences(a, b)}
    assert diffs["topics[].error_code"].apache == "none"
    assert diffs["topics[].error_code"].kaas == "leader_not_available"
    assert diffs["topics[].partitions[].leader_id"].path == "topics[name=t].partitions[partition_index=1].leader_id"
    assert "topics[].partitions[].isr_nodes" in diffs


def test_missing_list_element_and_field():
    diffs = differences({"xs": [{"name": "a", "v": 1}], "f": 1}, {"xs": [{"name": "b", "v": 1}]})
    assert {str(d.path) for d in diffs} == {"f", "xs[name=a]", "xs[name=b]"}
    assert Difference("xs[name=a]", 1, "<absent>").pattern == "xs[]"


def test_batches_summary_drops_timestamps_and_ids():
    one = build_batch(base_timestamp=5, producer_id=7, producer_epoch=0, base_sequence=0, records=[(None, b"x")] * 2)
    two = build_batch(base_timestamp=9, producer_id=8, producer_epoch=0, base_sequence=0, records=[(None, b"x")] * 2)
    assert batches(one) == batches(two)
    assert batches(one)[0]["count"] == 2 and batches(one)[0]["idempotent"] == 1
    assert batches(one + one[:20]) == {"batches": batches(one), "partial_tail_bytes": 20}


def test_make_batch_corruptions():
    good = make_batch({"count": 2})
    assert batches(good)[0]["count"] == 2
    assert make_batch({"count": 2, "corrupt": "crc"}) != good
    assert batches(make_batch({"count": 2, "corrupt": "length"})) == {"batches": [], "partial_tail_bytes": len(good)}
    assert len(make_batch({"count": 2, "corrupt": "truncated"})) == len(good) - 3


def test_select_only_and_ignore():
    diffs = [Difference("a.b", 1, 2), Difference("a.c", 1, 2), Difference("xs[k=1].e", 1, 2)]
    assert [d.path for d in select(diffs, only=["a"])] == ["a.b", "a.c"]
    assert [d.path for d in select(diffs, ignore=["a.b", "xs[].e"])] == ["a.c"]
    assert select(diffs, ignore=["*"]) == []


def test_explain_by_keyed_full_path():
    e = Explanation("x", ("*",), ("api_keys[api_key=0].max_version", "features[name=a.*]"), "because")
    produce = Difference("api_keys[api_key=0].max_version", 13, 11)
    fetch = Difference("api_keys[api_key=1].max_version", 18, 17)
    feature = Difference("features[name=a.version].max_version", 2, 1)
    assert explain("s@v3", [produce, fetch, feature], [e]) == ([(produce, e), (feature, e)], [fetch])


def test_explain_by_scenario_and_path():
    e = Explanation("x", ("fam/name@*",), ("topics[].error_code",), "because")
    d = Difference("topics[name=t].error_code", 1, 2)
    assert explain("fam/name@v3", [d], [e]) == ([(d, e)], [])
    assert explain("fam/other@v3", [d], [e]) == ([], [d])


json_leaf = st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=3))
trees = st.recursive(json_leaf, lambda ch: st.one_of(st.lists(ch, max_size=3),
                                                     st.dictionaries(st.sampled_from("abkn"), ch, max_size=3)),
                     max_leaves=12)


@given(trees)
def test_a_tree_never_differs_from_itself(tree):
    assert differences(normalise(tree), normalise(tree)) == []
    assert normalise(normalise(tree)) == normalise(tree)


@given(trees, trees)
def test_differences_are_symmetric(a, b):
    fwd = differences(normalise(a), normalise(b))
    back = differences(normalise(b), normalise(a))
    assert sorted((d.path, repr(d.apache), repr(d.kaas)) for d in fwd) == \
        sorted((d.path, repr(d.kaas), repr(d.apache)) for d in back)


def _served() -> dict[int, tuple[int, int]]:
    return {k: (h.min_version, h.max_version) for k, h in REGISTRY.items()}


def test_versions_of():
    assert corpus.versions_of("all", (2, 4)) == [2, 3, 4]
    assert corpus.versions_of([3, 99], (2, 4)) == [3, 4]
    assert corpus.versions_of({"list": [1, 3]}, (2, 4)) == [3]
    assert corpus.versions_of("all", None) == []


def test_substitute_templates():
    inst = corpus.Instance("fam", "Some name", 3, 2, {})
    tid = uuid.uuid4()
    body = {"g": "$group", "t": "$txn", "u": "x-$uniq", "id": "$topic_id:t", "ref": "$s0.a[1].b",
            "bytes": {"$hex": "0a0b"}, "batch": {"$batch": {"count": "$s0.n"}}}
    out = corpus.substitute(body, inst, [{"a": [{}, {"b": 5}], "n": 3}], {"t": tid}, lambda spec: spec["count"])
    assert out == {"g": "g-fam-some-name-v2", "t": "t-fam-some-name-v2", "u": "x-fam-some-name-v2", "id": tid,
                   "ref": 5, "bytes": b"\n\x0b", "batch": 3}


_LEAVES = {"member_id": "m", "producer_id": 0, "producer_epoch": 0, "generation_id": 1, "member_epoch": 1,
           "base_offset": 0, "first_offset": 0, "last_offset": 0, "node_id": 0, "replica_nodes": [0, 1]}


class _AnyResponse(dict):
    """A setup response in which every path resolves: the corpus's referenced fields to a
    value of their type, anything else to another such response."""

    def __getitem__(self, key: object) -> object:
        return _LEAVES[key] if key in _LEAVES else _AnyResponse()


def _placeholder_setup() -> list[object]:
    return [_AnyResponse() for _ in range(8)]


def test_corpus_covers_every_served_api_and_builds_at_every_version():
    files = corpus.load(CORPUS)
    instances = corpus.expand(files, _served())
    assert len(instances) >= 200
    assert len({i.id for i in instances}) == len(instances), "scenario names repeat"
    covered = {i.api for i in instances}
    assert set(REGISTRY) <= covered, f"APIs with no scenario: {sorted(set(REGISTRY) - covered)}"
    topics = corpus.topics(files)
    ids = {name: uuid.uuid4() for name in topics}
    for inst in instances:
        for step, api, version in [(s, s["api"], inst.version if s["version"] == "same" else s["version"])
                                   for s in inst.spec.get("setup", [])] + [(inst.spec, inst.api, inst.version)]:
            if "raw_body" in step:
                continue
            body = corpus.substitute(step.get("body", {}), inst, _placeholder_setup(), ids, make_batch,
                                     lambda kind, spec, inst: b"n,,n=user,r=nonce")
            req = build(codec.request_class(api, version), body)
            codec.encode_request(api, version, 1, "t", req)  # encodes: fields of the right types


def test_every_explanation_is_in_the_docs():
    doc = (REPO / "docs" / "compatibility.rst").read_text()
    for e in json.loads(EXPLANATIONS.read_text())["explanations"]:
        Explanation.from_dict(e)
        assert e["kind"] in ("design", "cosmetic", "kaas bug, to fix")
        assert f"``{e['id']}``" in doc, f"explanation {e['id']} is not listed in docs/compatibility.rst"
