"""scripts/check_size.py (``make lint``): it finds a module over 600 lines and a function
over 80, nested and async ones and methods included, names each, and passes within the
limits."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import check_size  # noqa: E402  (scripts/check_size.py)


def _function(name: str, body_lines: int, indent: str = "", is_async: bool = False) -> str:
    head = f"{indent}{'async ' if is_async else ''}def {name}() -> None:\n"
    return head + "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines))


def test_within_the_limits_passes(tmp_path: Path, capsys) -> None:
    (tmp_path / "ok.py").write_text(_function("f", 79) + "\n" * (600 - 80))
    assert len((tmp_path / "ok.py").read_text().splitlines()) == 600
    assert check_size.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""


def test_a_long_module_and_long_functions_are_named(tmp_path: Path, capsys) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 601)
    (tmp_path / "pkg" / "funcs.py").write_text(
        _function("top", 80)  # 81 lines with its def
        + "class C:\n" + _function("method", 80, "    ", is_async=True)
        + "def outer() -> None:\n" + _function("inner", 80, "    ")
    )
    assert check_size.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"{tmp_path / 'pkg' / 'long.py'}: module has 601 lines (max 600)" in out
    funcs = tmp_path / "pkg" / "funcs.py"
    assert f"{funcs}:1: function top has 81 lines (max 80)" in out
    assert f"{funcs}:83: function C.method has 81 lines (max 80)" in out
    assert f"{funcs}:165: function outer.inner has 81 lines (max 80)" in out
    assert f"{funcs}:164: function outer has 82 lines (max 80)" in out
    assert len(out) == 5


def test_the_default_roots_are_kaas_and_cluster() -> None:
    assert check_size.ROOTS == ("kaas", "cluster")
