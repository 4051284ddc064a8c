#!/usr/bin/env python3
"""Generate the API compatibility matrix of docs/compatibility.rst from the handler
registry (kaas.handlers.registry.REGISTRY, the same table ApiVersions advertises).

    python scripts/compat_matrix.py           # rewrite the generated part of the doc
    python scripts/compat_matrix.py --check   # exit 1 when the doc is out of date
    python scripts/compat_matrix.py --print   # print the table only

Only the text between the two marker comments is generated; the prose around it is
hand-written.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import docgen  # noqa: E402  (scripts/docgen.py, beside this file)

DOC = ROOT / "docs" / "compatibility.rst"


def matrix() -> str:
    """The generated block (markers excluded)."""
    from kaas.handlers.registry import REGISTRY

    rows = [[f"``{h.api_name}``", str(h.api_key), str(h.min_version), str(h.max_version)]
            for h in REGISTRY.values()]
    table = docgen.rst_table(["API", "key", "min version", "max version"], rows)
    return f"{len(rows)} APIs, ordered by key.\n\n{table}\n"


def render(current: str) -> str:
    """``current`` with the generated block replaced (or appended when it has no markers)."""
    return docgen.splice(current, "compat_matrix.py", matrix())

def main(argv: list[str] | None = None) -> int:
    return docgen.main(argv, description=__doc__.split("\n\n")[0], script="compat_matrix.py", doc=DOC,
                       generate=matrix, source="from kaas.handlers.registry.REGISTRY")


if __name__ == "__main__":
    sys.exit(main())
