"""scripts/check_docs.py (``make lint``): every path, make target and kaas option the docs
name exists; it passes on the tree and fails when a named file, target or option goes. And
docs/operations.rst lists every metric family the brokers serve."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import check_docs  # noqa: E402  (scripts/check_docs.py)


def test_the_docs_of_the_tree_name_only_what_exists(capsys):
    assert check_docs.main([]) == 0, capsys.readouterr().err
    assert len(check_docs.documents(ROOT)) >= 15


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the repository's docs, Makefile and the files they name."""
    for name in ("README.rst", "CHANGELOG.rst", "LICENSE", "Makefile", "pyproject.toml", "setup.py",
                 "Containerfile", "containers.conf"):
        shutil.copy2(ROOT / name, tmp_path / name)
    for name in ("docs", "examples", "scripts", "deploy", "cluster", ".ci"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("node_modules", "__pycache__"))
    for name in ("kaas", "tests"):  # the paths only: empty files
        for p in (ROOT / name).rglob("*"):
            if "__pycache__" in p.parts or "node_modules" in p.parts:
                continue
            q = tmp_path / p.relative_to(ROOT)
            if p.is_dir():
                q.mkdir(parents=True, exist_ok=True)
            else:
                q.parent.mkdir(parents=True, exist_ok=True)
                q.touch()
    return tmp_path


def _check(root: Path, *docs: Path) -> list[str]:
    return check_docs.check(list(docs) or check_docs.documents(root), root)


def test_the_copy_passes(tree):
    assert _check(tree) == []


def test_a_named_file_removed_fails(tree):
    (tree / "docs" / "deploy.rst").unlink()
    assert any("names docs/deploy.rst, which does not exist" in p for p in _check(tree))
    (tree / "scripts" / "broker_ctl.py").unlink()
    assert any(p.startswith("README.rst:") and "scripts/broker_ctl.py" in p for p in _check(tree))


def test_a_make_target_removed_fails(tree):
    makefile = tree / "Makefile"
    text = makefile.read_text()
    makefile.write_text(re.sub(r"^chaos:.*$", "chaos-all: $(STAMP)", text, flags=re.M).replace(" chaos ", " "))
    assert any("names make chaos, which is not a target" in p for p in _check(tree))


def test_an_option_or_subcommand_that_does_not_exist_fails(tmp_path):
    (tmp_path / "Makefile").write_text("test:\n\ttrue\n")
    doc = tmp_path / "doc.rst"
    doc.write_text("Run ``kaas cluster --brokers 3 --no-such-option`` or::\n\n"
                   "    kaas topics create t --partitions 2 --bootstrap $BOOT   # fine\n"
                   "    kaas cluster --brokers 3 -- --num-partitions 4 --bogus-broker-flag\n"
                   "    kaas frobnicate --data DIR\n"
                   "    make test && make nothing-here\n\n"
                   "A path: scripts/no_such_script.py, and a fine one: Makefile.\n")
    problems = _check(tmp_path, doc)
    assert problems == [
        "doc.rst:8: names scripts/no_such_script.py, which does not exist",
        "doc.rst:1: kaas cluster has no option --no-such-option",
        "doc.rst:4: kaas broker has no option --bogus-broker-flag",
        "doc.rst:5: kaas has no subcommand frobnicate",
        "doc.rst:6: names make nothing-here, which is not a target of the Makefile",
    ], problems


def test_the_script_exits_1_naming_what_is_missing(tmp_path, capsys):
    (tmp_path / "Makefile").write_text("test:\n\ttrue\n")
    doc = tmp_path / "doc.rst"
    doc.write_text("See ``docs/gone.rst`` and ``kaas broker --metrics-port 1``.\n")
    assert check_docs.main(["--root", str(tmp_path), str(doc)]) == 1
    assert "docs/gone.rst" in capsys.readouterr().err
    doc.write_text("See ``Makefile`` and ``kaas broker --metrics-port 1``.\n")
    assert check_docs.main(["--root", str(tmp_path), str(doc)]) == 0


def test_operations_lists_every_metric_family():
    served = {name for path in sorted((ROOT / "kaas" / "net").glob("*metrics*.py"))
              for name in re.findall(r'"(kaas_[a-z_]+)"', path.read_text())}
    assert len(served) > 25
    page = (ROOT / "docs" / "operations.rst").read_text()
    listed = set(re.findall(r"``(kaas_[a-z_]+)", page))
    # a counter family is exposed with the _total suffix
    missing = {m for m in served if m not in listed and f"{m}_total" not in listed}
    assert not missing, f"docs/operations.rst does not list {sorted(missing)}"
