"""The compiled build's switches (``kaas._native``, ``setup.py``): which modules load from
their source, and the pure Python fallback of a build without a C compiler."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from kaas import _native

REPO = Path(__file__).resolve().parents[2]
NAME = "kaas.wire.batch"


def _package(tmp_path: Path, *, checkout: bool) -> tuple[Path, Path, Path]:
    """A package directory with one module's source and its (fake) extension module."""
    package = tmp_path / "kaas"
    (package / "wire").mkdir(parents=True)
    source = package / "wire" / "batch.py"
    source.write_text("")
    built = package / "wire" / f"batch{EXTENSION_SUFFIXES[0]}"
    built.write_bytes(b"")
    if checkout:
        (tmp_path / "setup.py").write_text("")
    return package, source, built


def test_a_source_newer_than_its_build_is_stale_in_a_checkout(tmp_path):
    package, source, built = _package(tmp_path, checkout=True)
    os.utime(source, (1_000, 1_000))
    os.utime(built, (2_000, 2_000))
    assert _native.compiled(NAME, str(package)) == str(built)
    assert _native.stale(str(package), [NAME]) is None
    os.utime(source, (3_000, 3_000))  # edited since make native
    assert _native.stale(str(package), [NAME]) == NAME
    built.unlink()  # make pure
    assert _native.compiled(NAME, str(package)) is None and _native.stale(str(package), [NAME]) is None


def test_an_installed_build_is_never_taken_for_stale(tmp_path):
    package, source, built = _package(tmp_path, checkout=False)  # site-packages: no setup.py beside it
    os.utime(built, (1_000, 1_000))
    os.utime(source, (2_000, 2_000))  # pip wrote the files in any order
    assert _native.stale(str(package), [NAME]) is None


def _loaded(env: dict[str, str]) -> list[str]:
    """The file each compiled module loads from, each imported first in an interpreter of its
    own: a compiled module that another one of the group imported first carries a wrong
    ``__file__`` (mypyc sets it from the group's package path), though it loaded right."""
    probe = "import importlib, sys; print(importlib.import_module(sys.argv[1]).__file__)"
    procs = [subprocess.Popen([sys.executable, "-c", probe, m], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, **env}) for m in _native.COMPILED]
    out = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs), out
    return out


def test_kaas_pure_loads_every_compiled_module_from_its_source():
    assert _loaded({"KAAS_PURE": "1"}) == [_native.source_of(m) for m in _native.COMPILED]
    # as built otherwise: the extension module where there is one (make native), else the source
    want = [_native.compiled(m) or _native.source_of(m) for m in _native.COMPILED]
    if _native.stale() is not None:
        want = [_native.source_of(m) for m in _native.COMPILED]
    assert _loaded({"KAAS_PURE": ""}) == want


def test_without_a_c_compiler_the_build_is_pure_python(tmp_path):
    run = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
                          "--build-temp", str(tmp_path / "tmp")], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "CC": str(tmp_path / "no-cc"), "KAAS_COMPILE": ""})
    assert run.returncode == 0, run.stderr
    assert "no C compiler: building pure Python" in run.stderr
    assert not list(tmp_path.rglob("*.so"))
