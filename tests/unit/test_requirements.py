"""tests/tools.py: a missing tool skips a test with the reason and the package, and fails it
under KAAS_REQUIRE_ALL=1; and no test skips for a missing requirement any other way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import tools

TESTS = Path(__file__).resolve().parents[1]
# files that may: not a missing requirement (mallopt exists on glibc alone, nothing installs it),
# and a test that asserts both ways (compiled with a C compiler, pure Python without one)
ALLOWED = {"unit/test_allocator.py", "integration/test_testing_install.py"}


def test_a_missing_tool_skips_naming_its_package(monkeypatch):
    monkeypatch.delenv(tools.REQUIRE_ALL, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.skip.Exception, match=r"kcat is not on PATH \(reads\): apt-get install kcat"):
        tools.require_tool("kcat", package="kcat", why="reads")


def test_under_require_all_a_missing_tool_fails(monkeypatch):
    monkeypatch.setenv(tools.REQUIRE_ALL, "1")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.fail.Exception, match="go is not on PATH: apt-get install golang-go.*KAAS_REQUIRE_ALL=1"):
        tools.require_tool("go", package="golang-go")
    with pytest.raises(pytest.fail.Exception, match="no such file"):
        tools.require(False, "no such file")


def test_a_present_tool_is_its_path(monkeypatch, tmp_path):
    exe = tmp_path / "kcat"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(tools.REQUIRE_ALL, "1")
    assert tools.require_tool("kcat", package="kcat") == str(exe)
    tools.require(True, "unused")


@pytest.mark.parametrize("value", ["", "0", "yes"])
def test_only_one_turns_skips_into_failures(monkeypatch, value):
    monkeypatch.setenv(tools.REQUIRE_ALL, value)
    with pytest.raises(pytest.skip.Exception):
        tools.missing("why")


def test_no_test_skips_or_looks_for_a_tool_except_through_tests_tools():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS).as_posix()
        if rel == "tools.py" or rel.startswith(("js/", "go/")) or rel in ALLOWED:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"pytest\.skip\(|\.skipif\(|importorskip\(|shutil\.which\(", line):
                found.append(f"tests/{rel}:{n}: {line.strip()}")
    assert not found, "skip through tests/tools.py (require_tool, require, missing):\n" + "\n".join(found)
