"""scripts/bench cpu: reading callgrind's dumps and charging them to Python functions."""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench.workloads import callgrind as cg  # noqa: E402

DUMP = """# callgrind format
version: 1
creator: callgrind-3.19.0
events: Ir
fl=(1) ???
fn=(1) kaas_py_0
0 100
+3 20
cfn=(2) kaas_py_1
calls=2 0
0 5000
fn=(2)
0 300
fn=(3) _PyEval_EvalFrameDefault'2
0 7
fn=(1)
0 1
totals: 428
"""

FRAMES = {"kaas_py_0": ("/repo/kaas/coord/txn/slots.py", "Slots.persist", 110),
          "kaas_py_1": ("/venv/lib/python3.11/site-packages/trio/_core/_run.py", "unrolled_run", 2712)}


def test_self_costs_leave_out_calls_and_fold_recursion(tmp_path):
    dump = tmp_path / "callgrind.out.1"
    dump.write_text(DUMP)
    total, costs = cg.read_costs(dump)
    assert total == 428
    # a call's inclusive cost line (after calls=) is not self cost; a name defined at its
    # first mention as a callee (cfn=(2) name) is known when fn=(2) comes
    assert costs == {"kaas_py_0": 121, "kaas_py_1": 300, "_PyEval_EvalFrameDefault": 7}


def test_layers_by_source_file():
    costs = {"kaas_py_0": 121, "kaas_py_1": 300, "_PyEval_EvalFrameDefault": 7}
    assert cg.by_layer(costs, FRAMES) == {"coord": 121, "trio": 300, cg.NO_FRAME: 7}
    assert cg.layer_of("/x/kaas/dispatch.py") == "dispatch"
    assert cg.layer_of("/x/lib/python3.11/json/encoder.py") == "stdlib"
    assert cg.layer_of("/x/site-packages/kio/serial/_serialize.py") == "kio"


def test_the_skips_spare_only_the_trampolines_and_the_loader():
    patterns = [o.removeprefix("--fn-skip=") for o in cg.skip_options()]

    def skipped(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    assert not skipped("kaas_py_123") and not skipped("_dl_start") and not skipped("_start")
    for name in ("_PyEval_EvalFrameDefault", "PyObject_Call", "kaas_layer", "kill", "memcpy",
                 "<pyo3::types::bytes::PyBytes>::new", "0x0000000004936718", "__libc_malloc"):
        assert skipped(name), name
