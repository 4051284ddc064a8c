"""An import-linter contract type, ``acyclic``: no import cycle at all among the modules of
the given packages. ``make lint`` runs it (pyproject.toml ``[tool.importlinter]``).

import-linter's own ``acyclic_siblings`` squashes each child package and looks only for
cycles between siblings, so it misses a package that imports a child which imports the
package back (``kaas.handlers`` and its handlers were such a cycle). This contract takes
grimp's graph as it is, module by module, and fails on every strongly connected
component of more than one module, printing one cycle of each. Imports under
``TYPE_CHECKING`` are counted: the session's ``exclude_type_checking_imports`` is false.

    [[tool.importlinter.contracts]]
    type = "acyclic"
    packages = ["kaas", "cluster"]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

if TYPE_CHECKING:
    from grimp import ImportGraph


def cycles(graph: ImportGraph, packages: Iterable[str]) -> list[list[str]]:
    """One cycle (a closed path of direct imports, its first module repeated at the end)
    for each strongly connected component of more than one module of ``packages`` (a
    package and its descendants), in module order."""
    inside = {m for m in graph.modules if any(m == p or m.startswith(p + ".") for p in packages)}
    modules = sorted(inside)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & inside) for m in modules}
    return [_closed_path(component, edges) for component in _components(modules, edges)]


def _components(modules: list[str], edges: Mapping[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(edges[step])))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _closed_path(component: list[str], edges: Mapping[str, list[str]]) -> list[str]:
    """The shortest cycle through the component's first module (breadth first)."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for step in edges[node]:
                if step == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if step in members and step not in came_from:
                    came_from[step] = node
                    following.append(step)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a component of >1 module has one


class AcyclicContract(Contract):
    type_name = "acyclic"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        found = cycles(graph, self.packages)  # type: ignore[arg-type]  # (the field, set to its value)
        return ContractCheck(kept=not found, metadata={"cycles": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error(f"Import cycle ({len(cycle) - 1} modules):")
            output.indent_cursor()
            output.print_error(" -> ".join(cycle), bold=False)
            output.new_line()
