#!/usr/bin/env python3
"""Generate the API compatibility matrix of docs/compatibility.rst from the handler
registry (kaas.handlers.REGISTRY, the same table ApiVersions advertises).

    python scripts/compat_matrix.py           # rewrite the generated part of the doc
    python scripts/compat_matrix.py --check   # exit 1 when the doc is out of date
    python scripts/compat_matrix.py --print   # print the table only

Only the text between the two marker comments is generated; the prose around it is
hand-written.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DOC = ROOT / "docs" / "compatibility.rst"
BEGIN = ".. BEGIN GENERATED: scripts/compat_matrix.py (do not edit by hand)"
END = ".. END GENERATED: scripts/compat_matrix.py"


def rst_table(header: list[str], rows: list[list[str]]) -> str:
    """A reStructuredText simple table."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    rule = "  ".join("=" * w for w in widths)

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([rule, line(header), rule, *(line(r) for r in rows), rule])


def matrix() -> str:
    """The generated block (markers excluded)."""
    from kaas.handlers import REGISTRY

    rows = [[f"``{h.api_name}``", str(h.api_key), str(h.min_version), str(h.max_version)]
            for h in REGISTRY.values()]
    table = rst_table(["API", "key", "min version", "max version"], rows)
    return f"{len(rows)} APIs, ordered by key.\n\n{table}\n"


def render(current: str) -> str:
    """``current`` with the generated block replaced (or appended when it has no markers)."""
    block = f"{BEGIN}\n\n{matrix()}\n{END}\n"
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        return head + block + tail.removeprefix("\n")
    sep = "" if not current or current.endswith("\n\n") else ("\n" if current.endswith("\n") else "\n\n")
    return current + sep + block


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the doc differs from the registry")
    ap.add_argument("--print", dest="print_only", action="store_true", help="print the table and exit")
    ap.add_argument("--doc", type=Path, default=DOC, help=f"the document (default: {DOC.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    if args.print_only:
        sys.stdout.write(matrix())
        return 0
    current = args.doc.read_text() if args.doc.exists() else ""
    wanted = render(current)
    if args.check:
        if current == wanted:
            return 0
        sys.stderr.writelines(difflib.unified_diff(current.splitlines(True), wanted.splitlines(True),
                                                   str(args.doc), "from kaas.handlers.REGISTRY"))
        sys.stderr.write(f"\n{args.doc} is out of date: run python scripts/compat_matrix.py\n")
        return 1
    if current != wanted:
        args.doc.write_text(wanted)
        print(f"wrote {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
