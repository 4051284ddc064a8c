"""docs/compatibility.rst must match the handler registry (scripts/compat_matrix.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compat_matrix.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_compatibility_doc_matches_registry():
    res = run("--check")
    assert res.returncode == 0, f"{res.stderr}\nregenerate with: python scripts/compat_matrix.py"


def test_table_lists_every_handler():
    from kaas.handlers.registry import REGISTRY

    table = run("--print").stdout
    for h in REGISTRY.values():
        row = [c for c in table.splitlines() if c.startswith(f"``{h.api_name}``")]
        assert len(row) == 1, h.api_name
        assert row[0].split()[1:] == [str(h.api_key), str(h.min_version), str(h.max_version)]


def test_check_detects_a_stale_doc(tmp_path):
    doc = tmp_path / "compat.rst"
    good = (ROOT / "docs" / "compatibility.rst").read_text()
    stale = "".join("``Produce``  0  0  0\n" if line.startswith("``Produce``") else line
                    for line in good.splitlines(True))
    assert stale != good
    doc.write_text(stale)
    assert run("--check", "--doc", str(doc)).returncode == 1
    assert run("--doc", str(doc)).returncode == 0  # regenerates in place
    assert doc.read_text() == good
    assert run("--check", "--doc", str(doc)).returncode == 0


def test_doc_without_markers_gets_the_block_appended(tmp_path):
    doc = tmp_path / "new.rst"
    doc.write_text("Title\n=====\n")
    assert run("--doc", str(doc)).returncode == 0
    text = doc.read_text()
    assert text.startswith("Title\n=====\n\n.. BEGIN GENERATED")
    assert run("--check", "--doc", str(doc)).returncode == 0
