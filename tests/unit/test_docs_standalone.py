"""The repository stands alone, and its map of the code is true.

- Nothing tracked refers to material outside the repository (the steering folder a
  checkout once sat beside): a user who clones kaas has only what is here.
- Every ``module.attribute`` that ``docs/architecture.rst`` names exists in the code, so the
  page cannot drift from a rename unnoticed.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
from pathlib import Path

import pytest

import kaas

REPO = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"\.\./shared|/work/shared|DESIGN\.md|CLIENTS\.md|seed/")
SUBPACKAGES = {m.name for m in pkgutil.iter_modules(kaas.__path__)}
NAME = re.compile(r"``((?:kaas\.)?[a-z_]+(?:\.[A-Za-z_][A-Za-z_0-9]*)+)``")


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [REPO / p for p in out.decode().split("\0") if p]


def test_nothing_refers_outside_the_repository() -> None:
    offenders = []
    for path in _tracked():
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        offenders += [f"{path.relative_to(REPO)}:{i}" for i, line in enumerate(text.splitlines(), 1)
                      if OUTSIDE.search(line)]
    assert not offenders, f"references outside the repository: {offenders}"


def _resolve(dotted: str) -> object:
    """The object a dotted name in the docs means: the longest importable module prefix
    under ``kaas`` (or ``cluster``), then attributes."""
    parts = dotted.split(".")
    if parts[0] == "kaas":
        parts = parts[1:]
    root = "cluster" if parts[0] == "cluster" else "kaas"
    if root == "kaas":
        parts = ["kaas", *parts]
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def _named_in_architecture() -> list[str]:
    text = (REPO / "docs" / "architecture.rst").read_text()
    names = []
    for dotted in NAME.findall(text):
        head = dotted.removeprefix("kaas.").split(".")[0]
        if head in SUBPACKAGES or head == "cluster":
            names.append(dotted)
    return sorted(set(names))


def test_architecture_page_names_many_modules() -> None:
    assert len(_named_in_architecture()) > 30


@pytest.mark.parametrize("dotted", _named_in_architecture())
def test_every_name_on_the_architecture_page_exists(dotted: str) -> None:
    try:
        _resolve(dotted)
    except (ModuleNotFoundError, AttributeError) as exc:
        pytest.fail(f"docs/architecture.rst names {dotted}, which does not exist: {exc}")
