"""The scenario corpus (``compat/diff/scenarios/*.json``, one file per API family) and
its expansion into runnable instances (pure: no I/O but reading the files).

A file::

    {"family": "groups", "topics": {"dg-a": 3},
     "scenarios": [{"name": "join-unknown-member", "api": 11, "versions": "all",
                    "to": "group", "setup": [...], "body": {...},
                    "only": [...], "ignore": [...], "note": "..."}]}

``versions`` is ``"all"`` (every version kaas serves of ``api``), ``[lo, hi]`` (those of
kaas's within the range) or ``{"list": [...]}``; each version is one instance, named
``family/name@vN``. ``to`` routes the request: ``any`` (the first broker), ``group`` /
``txn`` (the coordinator of the instance's group / transactional id), ``leader:TOPIC:P``;
``trial`` (each broker until one coordinates); ``fresh`` (a new connection). A ``setup``
step is ``{"api", "version", "body", "to"}`` (version ``"same"``: the instance's) and
may ``retry`` while its ``retry_on`` error (a field path and codes) holds; ``bump`` names
a body field (a share session epoch) that each retry moves on by one. ``sleep_ms`` waits
after the step (for what a broker finishes in the background after it answered).

In bodies, strings are templates: ``$uniq`` becomes the instance's unique tag, ``$group``
and ``$txn`` its group and transactional id; a whole string ``$topic_id:NAME`` is the
topic's id on that broker, ``$uuid:HEX`` a UUID, ``$sN.path`` a value from setup step N's response; a dict
``{"$batch": {...}}`` is a record batch (``runner.make_batch``), ``{"$batches": [...]}``
several, one after the other, ``{"$hex": "..."}`` bytes, ``{"$scram_first": {...}}`` and
``{"$scram_final": {...}}`` a SCRAM client message (``runner.make_sasl``).

A file with ``"cluster": "secure"`` runs against a second pair of clusters, with SASL and
the authoriser on (``scripts/diff/secure.py``): its ``users`` (name -> password) are made
on both, and a step's ``as`` names the user its connection authenticates as (default
``admin``, a super user; ``none``: a connection of the instance's that has not
authenticated).
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class Instance:
    """One scenario at one version."""

    family: str
    name: str
    api: int
    version: int
    spec: Mapping[str, Any]

    @property
    def id(self) -> str:
        return f"{self.family}/{self.name}@v{self.version}"

    @property
    def uniq(self) -> str:
        return re.sub(r"[^a-z0-9-]", "-", f"{self.family}-{self.name}-v{self.version}".lower())


def load(directory: Path) -> list[dict[str, Any]]:
    files = sorted(directory.glob("*.json"))
    return [json.loads(f.read_text()) | {"_file": f.name} for f in files]


def secure(f: Mapping[str, Any]) -> bool:
    """Whether a corpus file runs against the secure pair of clusters."""
    return f.get("cluster", "plain") == "secure"


def topics(files: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The topic layout of the corpus: name -> partitions."""
    out: dict[str, int] = {}
    for f in files:
        out.update(f.get("topics", {}))
    return out


def versions_of(spec: Any, served: tuple[int, int] | None) -> list[int]:
    """The versions an entry runs at, given kaas's served range of its API (None: not served)."""
    if served is None:
        return list(spec["list"]) if isinstance(spec, dict) else []
    lo, hi = served
    if spec == "all":
        return list(range(lo, hi + 1))
    if isinstance(spec, dict):
        return [v for v in spec["list"] if lo <= v <= hi or spec.get("unserved")]
    a, b = spec
    return list(range(max(a, lo), min(b, hi) + 1))


def expand(files: Iterable[Mapping[str, Any]], served: Mapping[int, tuple[int, int]]) -> list[Instance]:
    out: list[Instance] = []
    for f in files:
        for entry in f["scenarios"]:
            for v in versions_of(entry.get("versions", "all"), served.get(entry["api"])):
                out.append(Instance(f["family"], entry["name"], entry["api"], v, entry))
    return out


_REF = re.compile(r"^\$s(\d+)\.(.+)$")


def lookup(tree: Any, path: str) -> Any:
    """``a.b[0].c`` in a plain tree."""
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        tree = tree[int(part[1:-1])] if part.startswith("[") else tree[part]
    return tree


def substitute(value: Any, inst: Instance, setup: list[Any], topic_ids: Mapping[str, str],
               make_batch: Any, make_sasl: Any = None) -> Any:
    """``value`` with the templates of the module's docstring filled for one broker.
    ``setup``: the responses so far as plain trees; ``make_batch``: spec dict -> bytes;
    ``make_sasl``: (``first`` or ``final``, spec dict, instance) -> bytes."""
    def sub(v: Any) -> Any:
        return substitute(v, inst, setup, topic_ids, make_batch, make_sasl)

    if isinstance(value, dict):
        for kind in ("first", "final"):
            if f"$scram_{kind}" in value:
                return make_sasl(kind, sub(value[f"$scram_{kind}"]), inst)
        if "$batches" in value:
            return b"".join(make_batch({k: substitute(v, inst, setup, topic_ids, make_batch) for k, v in spec.items()})
                            for spec in value["$batches"])
        if "$batch" in value:
            return make_batch({k: substitute(v, inst, setup, topic_ids, make_batch)
                               for k, v in value["$batch"].items()})
        if "$hex" in value:
            return bytes.fromhex(value["$hex"])
        return {k: sub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sub(v) for v in value]
    if not isinstance(value, str) or "$" not in value:
        return value
    if value.startswith("$topic_id:"):
        return topic_ids[value.split(":", 1)[1]]
    if value.startswith("$uuid:"):
        return uuid.UUID(value.split(":", 1)[1])
    m = _REF.match(value)
    if m:
        return lookup(setup[int(m.group(1))], m.group(2))
    return (value.replace("$group", "g-$uniq").replace("$txn", "t-$uniq").replace("$uniq", inst.uniq))
