"""The ``acyclic`` import-linter contract (scripts/import_cycles.py): it finds a cycle
between a package and its own module, which import-linter's ``acyclic_siblings`` cannot
see, counts imports made under ``TYPE_CHECKING``, and keeps kaas's own graph."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from import_cycles import AcyclicContract, cycles  # noqa: E402


def graph(*imports: tuple[str, str]) -> grimp.ImportGraph:
    g = grimp.ImportGraph()
    for importer, imported in imports:
        g.add_module(importer)
        g.add_module(imported)
        g.add_import(importer=importer, imported=imported)
    return g


def contract(packages: list[str]) -> AcyclicContract:
    return AcyclicContract(name="no cycle", session_options={}, contract_options={"packages": packages})


def test_a_package_that_imports_a_module_importing_it_back_is_a_cycle():
    # the shape kaas.handlers had: the package imports every handler, a handler the package
    g = graph(("pkg.handlers", "pkg.handlers.produce"), ("pkg.handlers", "pkg.handlers.fetch"),
              ("pkg.handlers.produce", "pkg.handlers"), ("pkg.handlers.fetch", "pkg.broker"))
    assert cycles(g, ["pkg"]) == [["pkg.handlers", "pkg.handlers.produce", "pkg.handlers"]]
    check = contract(["pkg"]).check(g, verbose=False)
    assert not check.kept and check.metadata["cycles"] == [["pkg.handlers", "pkg.handlers.produce", "pkg.handlers"]]


def test_each_component_gives_one_shortest_cycle():
    g = graph(("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.b", "p.a"),  # one component of three
              ("p.x", "p.y"), ("p.y", "p.x"),  # another
              ("p.c", "p.x"))  # an edge between them: no cycle of its own
    assert cycles(g, ["p"]) == [["p.a", "p.b", "p.a"], ["p.x", "p.y", "p.x"]]


def test_an_acyclic_graph_and_a_cycle_outside_the_packages_keep_the_contract():
    g = graph(("p.a", "p.b"), ("p.b", "p.c"), ("p.a", "p.c"), ("q.a", "q.b"), ("q.b", "q.a"))
    assert cycles(g, ["p"]) == []
    assert contract(["p"]).check(g, verbose=False).kept
    assert not contract(["p", "q"]).check(g, verbose=False).kept


@pytest.mark.parametrize("guarded", [False, True])
def test_a_type_checking_import_closes_a_cycle(tmp_path, guarded):
    """grimp, as make lint builds it, counts an import under ``if TYPE_CHECKING:``."""
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from cyc import handler\n")
    body = "from cyc import Context\n"
    if guarded:
        body = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyc import Context\n"
    (pkg / "handler.py").write_text(body)
    sys.path.insert(0, str(tmp_path))
    try:
        g = grimp.build_graph("cyc", exclude_type_checking_imports=False, cache_dir=None)
    finally:
        sys.path.remove(str(tmp_path))
    assert cycles(g, ["cyc"]) == [["cyc", "cyc.handler", "cyc"]]


def test_kaas_has_no_import_cycle_and_lint_imports_says_so():
    g = grimp.build_graph("kaas", "cluster", exclude_type_checking_imports=False, cache_dir=None)
    assert cycles(g, ["kaas", "cluster"]) == []
    lint = ROOT / ".venv" / "bin" / "lint-imports"
    if not lint.exists():
        lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--contract", "no-cycle"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "KEPT" in out.stdout
