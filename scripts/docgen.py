"""Shared by the scripts that keep generated blocks of documentation in sync with the code
(compat_matrix.py, config_reference.py): a reStructuredText table, splicing a block between
marker comments, and the write/--check/--print command line."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable
from pathlib import Path


def _escape(cell: str) -> str:
    """A cell's ``*`` escaped outside its inline literals (``DATA/run/*.log`` is no emphasis)."""
    parts = re.split(r"(``.+?``)", cell)
    return "".join(p if p.startswith("``") else p.replace("*", "\\*") for p in parts)


def rst_table(header: list[str], rows: list[list[str]]) -> str:
    """A reStructuredText simple table; a ``*`` in a cell is text, not emphasis."""
    rows = [[_escape(str(c)) for c in r] for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    rule = "  ".join("=" * w for w in widths)

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([rule, line(header), rule, *(line(r) for r in rows), rule])


def markers(script: str) -> tuple[str, str]:
    return (f".. BEGIN GENERATED: scripts/{script} (do not edit by hand)",
            f".. END GENERATED: scripts/{script}")


def splice(current: str, script: str, body: str) -> str:
    """``current`` with the block between the script's markers replaced by ``body`` (or the
    block appended when the document has no markers yet)."""
    begin, end = markers(script)
    block = f"{begin}\n\n{body}\n{end}\n"
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        _, tail = rest.split(end, 1)
        return head + block + tail.removeprefix("\n")
    sep = "" if not current or current.endswith("\n\n") else ("\n" if current.endswith("\n") else "\n\n")
    return current + sep + block


def main(argv: list[str] | None, *, description: str, script: str, doc: Path, generate: Callable[[], str],
         source: str) -> int:
    """Write the generated block into ``doc``; ``--check`` exits 1 when it is out of date."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--check", action="store_true", help="exit 1 if the document is out of date")
    ap.add_argument("--print", dest="print_only", action="store_true", help="print the block and exit")
    ap.add_argument("--doc", type=Path, default=doc, help=f"the document (default: {doc.name})")
    args = ap.parse_args(argv)
    if args.print_only:
        sys.stdout.write(generate())
        return 0
    current = args.doc.read_text() if args.doc.exists() else ""
    wanted = splice(current, script, generate())
    if args.check:
        if current == wanted:
            return 0
        sys.stderr.writelines(difflib.unified_diff(current.splitlines(True), wanted.splitlines(True),
                                                   str(args.doc), source))
        sys.stderr.write(f"\n{args.doc} is out of date: run python scripts/{script}\n")
        return 1
    if current != wanted:
        args.doc.write_text(wanted)
        print(f"wrote {args.doc}")
    return 0
