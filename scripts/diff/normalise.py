"""Responses as comparable trees: kio entities to plain data, the fields that differ by
nature masked, free orderings sorted, and a field-by-field difference (pure: no I/O).

A tree is dicts, lists and scalars. ``normalise`` masks, by field name:

- values that differ between any two brokers (throttle times, cluster, broker and node
  ids, hosts and ports, topic and producer ids, fetch session ids, generated member ids,
  timestamps, error messages, log dir paths, disk and partition sizes, SASL tokens) to a placeholder,
  keeping "none" values (-1, null, empty) as they are, so that "no leader" still differs
  from "a leader";
- record batches (``records``) to a summary of their headers (offsets, counts,
  attributes, sequence), without timestamps, CRC or producer id;

and sorts every list (the protocol leaves the order of topics, partitions, groups and
brokers free). ``differences`` walks two normalised trees; a difference's path names the
fields with list indices (``topics[0].error_code``), and its pattern (``topics[].error_code``)
is what explanations and a scenario's ``ignore`` match, with ``fnmatch`` wildcards.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import fnmatch
import json
import re
import struct
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

MASK = "<masked>"
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"

VOLATILE = frozenset({
    "throttle_time", "throttle_time_ms", "cluster_id", "host", "port", "session_id",
    "producer_id", "topic_id", "member_id", "leader_id", "node_id", "controller_id", "broker_id",
    "coordinator_id", "log_append_time", "log_append_time_ms", "timestamp", "transaction_start_time_ms",
    "last_timestamp", "error_message", "leader_id_and_epoch", "assignment_epoch_hint",
    "member_epoch_hint", "current_leader", "last_caught_up_timestamp", "acquired_records_start_ts",
    "metadata_epoch", "finalized_features_epoch", "error_str", "message", "last_sequence_epoch",
    "instance_id_epoch", "leader", "log_dir", "total_bytes", "usable_bytes", "partition_size",
    "auth_bytes",
})
"""Field names whose values differ between two brokers by nature."""
ID_LISTS = frozenset({"replica_nodes", "isr_nodes", "offline_replicas", "eligible_leader_replicas",
                      "last_known_elr", "removing_replicas", "adding_replicas", "replicas"})
"""Lists of node ids: each id masked, the list's length kept."""
_BATCH = struct.Struct(">qiibIhiqqqhii")  # the v2 batch header, 61 bytes


def _is_none_value(v: Any) -> bool:
    return v is None or v == -1 or v == "" or v == b"" or v == _ZERO_UUID or v == []


def to_tree(value: Any) -> Any:
    """A kio entity (or any value inside one) as plain data: dataclasses to dicts, enums to
    their names, durations and times to milliseconds, UUIDs to strings, bytes kept."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_tree(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (tuple, list, frozenset, set)):
        return [to_tree(v) for v in value]
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int((value - _EPOCH).total_seconds() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def batches(data: bytes) -> list[dict[str, int]] | dict[str, Any]:
    """Headers of the v2 batches in ``data``, without what differs between brokers
    (timestamps, CRC, producer id, partition leader epoch); an unreadable tail is
    reported by its length."""
    out: list[dict[str, int]] = []
    pos = 0
    while pos + _BATCH.size <= len(data):
        (base, length, _ple, magic, _crc, attrs, last_delta, _bts, _mts, pid, epoch, seq,
         count) = _BATCH.unpack_from(data, pos)
        if length < 49 or pos + 12 + length > len(data):
            break
        out.append({"base_offset": base, "magic": magic, "attributes": attrs, "last_offset_delta": last_delta,
                    "idempotent": int(pid >= 0), "producer_epoch": epoch, "base_sequence": seq, "count": count,
                    "bytes": length})
        pos += 12 + length
    if pos < len(data):
        return {"batches": out, "partial_tail_bytes": len(data) - pos}
    return out


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def normalise(tree: Any, key: str = "") -> Any:
    """Masked and sorted copy of ``tree`` (see the module's docstring)."""
    if isinstance(tree, dict):
        return {k: normalise(v, k) for k, v in tree.items()}
    if key == "records" and isinstance(tree, (bytes, bytearray)):
        return batches(bytes(tree))
    if key in ID_LISTS and isinstance(tree, list):
        return [MASK] * len(tree)
    if key in VOLATILE:
        if isinstance(tree, (dict, list)) and not tree:
            return tree
        return tree if _is_none_value(tree) and key != "error_message" else MASK
    if isinstance(tree, list):
        return sorted((normalise(v, key) for v in tree), key=_canonical)
    if isinstance(tree, (bytes, bytearray)):
        return {"bytes": len(tree)}
    return tree


class Difference(NamedTuple):
    path: str
    apache: Any
    kaas: Any

    @property
    def pattern(self) -> str:
        return re.sub(r"\[[^\]]*\]", "[]", self.path)

    def __str__(self) -> str:
        return f"{self.path}: apache {_short(self.apache)} / kaas {_short(self.kaas)}"


def _short(value: Any, limit: int = 160) -> str:
    text = _canonical(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def differences(apache: Any, kaas: Any, path: str = "") -> list[Difference]:
    """Where two normalised trees differ: a missing field, a list of another length, or
    another value."""
    if isinstance(apache, dict) and isinstance(kaas, dict):
        out: list[Difference] = []
        for k in sorted(set(apache) | set(kaas)):
            sub = f"{path}.{k}" if path else k
            if k not in apache or k not in kaas:
                out.append(Difference(sub, apache.get(k, "<absent>"), kaas.get(k, "<absent>")))
            else:
                out.extend(differences(apache[k], kaas[k], sub))
        return out
    if isinstance(apache, list) and isinstance(kaas, list):
        key = _list_key(apache, kaas)
        if key is not None:
            a = {item[key]: item for item in apache}
            b = {item[key]: item for item in kaas}
            out = []
            for k in sorted(set(a) | set(b), key=_canonical):
                sub = f"{path}[{key}={k}]"
                if k not in a or k not in b:
                    out.append(Difference(sub, a.get(k, "<absent>"), b.get(k, "<absent>")))
                else:
                    out.extend(differences(a[k], b[k], sub))
            return out
        if len(apache) != len(kaas):
            return [Difference(path, apache, kaas)]
        out = []
        for i, (a, b) in enumerate(zip(apache, kaas, strict=True)):
            out.extend(differences(a, b, f"{path}[{i}]"))
        return out
    if apache != kaas:
        return [Difference(path, apache, kaas)]
    return []


KEY_FIELDS = ("api_key", "name", "topic", "topic_name", "partition_index", "partition", "group_id",
              "transactional_id", "resource_name", "key")
"""Fields that identify an element of a list: lists whose elements all have one (unique
and not masked) are compared element by element by it, not by position."""


def _list_key(a: list[Any], b: list[Any]) -> str | None:
    items = a + b
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    for key in KEY_FIELDS:
        values = [i.get(key, MASK) for i in items]
        if MASK in values or not all(isinstance(v, (str, int)) for v in values):
            continue
        if len({_canonical(i[key]) for i in a}) == len(a) and len({_canonical(i[key]) for i in b}) == len(b):
            return key
    return None


def _glob(pattern: str) -> str:
    """A path pattern as an fnmatch pattern: ``[]`` (any list element) taken literally."""
    return pattern.replace("[]", "[[]]")


def matches(pattern: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(pattern, _glob(p)) for p in patterns)


def select(diffs: Sequence[Difference], only: Sequence[str] = (), ignore: Sequence[str] = ()) -> list[Difference]:
    """The differences a scenario compares: under ``only`` (all when empty; a pattern also
    covers the fields below it), less those under ``ignore``."""
    def under(d: Difference, pats: Sequence[str]) -> bool:
        return any(matches(d.pattern, (p, p + ".*", p + "[]*")) for p in pats)
    return [d for d in diffs if (not only or under(d, only)) and not under(d, ignore)]


@dataclasses.dataclass(frozen=True)
class Explanation:
    """Why a scenario's differences are expected: the scenarios (``fnmatch`` patterns of
    their names) and fields (patterns of difference paths, or full paths when they name
    a list element by its key) it covers, and its reason.
    ``kind`` is ``design`` or ``kaas bug, to fix``."""

    id: str
    scenarios: tuple[str, ...]
    paths: tuple[str, ...]
    reason: str
    kind: str = "design"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Explanation:
        return cls(d["id"], tuple(d["scenarios"]), tuple(d["paths"]), d["reason"], d.get("kind", "design"))

    def covers(self, scenario: str, diff: Difference) -> bool:
        """A path with a keyed element (``api_keys[api_key=0].max_version``) is matched
        against the difference's full path, any other against its pattern."""
        return any(fnmatch.fnmatchcase(scenario, s) for s in self.scenarios) and any(
            any(fnmatch.fnmatchcase(diff.path, q.replace("[", "[[]")) for q in (p, p + ".*", p + "[*"))
            if "=" in p
            else matches(diff.pattern, (p, p + ".*", p + "[]*")) for p in self.paths)


def explain(scenario: str, diffs: Sequence[Difference], explanations: Sequence[Explanation]
            ) -> tuple[list[tuple[Difference, Explanation]], list[Difference]]:
    """(explained differences with their explanation, unexplained differences)."""
    explained: list[tuple[Difference, Explanation]] = []
    unexplained: list[Difference] = []
    for d in diffs:
        why = next((e for e in explanations if e.covers(scenario, d)), None)
        if why is None:
            unexplained.append(d)
        else:
            explained.append((d, why))
    return explained, unexplained
