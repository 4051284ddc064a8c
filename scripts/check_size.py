"""``make lint``: no module of ``kaas`` or ``cluster`` over 600 lines, no function over 80
(docs/architecture.rst, "One concern per module"). A function's length runs from its
``def`` line to its last line, docstring included, decorators not; a nested function counts
within its parent as well as on its own. Prints every offender and exits 1 if there is one.

Usage: ``python scripts/check_size.py [ROOT ...]`` (default: ``kaas cluster``).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
ROOTS = ("kaas", "cluster")


def functions(tree: ast.AST) -> Iterator[tuple[str, int, int]]:
    """(qualified name, first line, line count) of every function and method in ``tree``."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                yield name, child.lineno, (child.end_lineno or child.lineno) - child.lineno + 1
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)

    return walk(tree, "")


def offenders(path: Path) -> list[str]:
    """What in the module at ``path`` breaks a rule, one line each."""
    text = path.read_text()
    found = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{path}: module has {lines} lines (max {MAX_MODULE_LINES})")
    for name, first, count in functions(ast.parse(text, str(path))):
        if count > MAX_FUNCTION_LINES:
            found.append(f"{path}:{first}: function {name} has {count} lines (max {MAX_FUNCTION_LINES})")
    return found


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [Path(r) for r in ROOTS]
    found = [line for root in roots for path in sorted(root.rglob("*.py")) for line in offenders(path)]
    for line in found:
        print(line)
    if found:
        print(f"check_size: {len(found)} over the limits (docs/architecture.rst)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
