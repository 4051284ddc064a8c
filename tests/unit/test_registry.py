"""The handler registry's table against the handler modules, and its lazy imports."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import kaas.handlers
from kaas.handlers import registry


def test_table_rows_are_their_modules_key_and_versions():
    for key, name, lo, hi in registry.TABLE:
        h = registry.REGISTRY[key]
        assert (h.module.API_KEY, h.module.VERSIONS) == (key, (lo, hi)), name
        assert h.module.__name__ == f"kaas.handlers.{name}"
        assert callable(h.handle)


def test_table_lists_every_handler_module_once():
    keys = [key for key, *_ in registry.TABLE]
    assert keys == sorted(set(keys))
    modules = {m.name for m in pkgutil.iter_modules(kaas.handlers.__path__) if not m.name.startswith("_")}
    handlers = {name for name in modules
                if hasattr(__import__(f"kaas.handlers.{name}", fromlist=["x"]), "API_KEY")}
    assert handlers == {name for _k, name, _lo, _hi in registry.TABLE}


def test_handle_of_a_gated_api_is_wrapped_by_its_feature_gate():
    from kaas.handlers import _feature_gate

    for key in _feature_gate.GATES:
        h = registry.REGISTRY[key]
        assert h.handle is not h.module.handle
    assert registry.REGISTRY[3].handle is registry.REGISTRY[3].module.handle


def _imported_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_registry_and_broker_preload_import_only_the_first_apis_handlers():
    mods = _imported_after("from kaas.cli import preload_broker\npreload_broker()")
    handlers = {m.rsplit(".", 1)[-1] for m in mods if m.startswith("kaas.handlers.")}
    assert {"api_versions", "metadata"} <= handlers
    assert not handlers & {"produce", "fetch", "share_fetch", "join_group", "end_txn"}
    assert "kio.schema.produce.v13.request" not in mods
    everything = _imported_after("from kaas.cli import preload_broker\npreload_broker(all_handlers=True)")
    assert {f"kaas.handlers.{name}" for _k, name, _lo, _hi in registry.TABLE} <= everything


def test_refusal_of_a_gated_describe_names_the_groups_asked_for():
    from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
    from kio.schema.describe_share_group_offsets.v1 import request as offsets
    from kio.schema.errors import ErrorCode
    from kio.schema.types import GroupId

    from kaas.handlers import _feature_gate

    code = ErrorCode.unsupported_version
    req = ConsumerGroupDescribeRequest(group_ids=(GroupId("a"), GroupId("b")), include_authorized_operations=False)
    out = _feature_gate.refusal(69, req, code)
    assert [(g["group_id"], g["error_code"]) for g in out["groups"]] == [("a", code), ("b", code)]
    req2 = offsets.DescribeShareGroupOffsetsRequest(groups=(
        offsets.DescribeShareGroupOffsetsRequestGroup(group_id=GroupId("s"), topics=None),))
    out = _feature_gate.refusal(90, req2, code)
    assert [(g["group_id"], g["error_code"]) for g in out["groups"]] == [("s", code)]
