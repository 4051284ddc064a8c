"""The build of kaas: pure Python, with the hot typed modules of ``kaas._native.COMPILED``
compiled by mypyc into C extension modules where a C compiler exists (docs/performance.rst,
"Compiled modules"). The metadata is in pyproject.toml.

``KAAS_COMPILE`` picks:

- unset: a regular build (``pip install .``, ``pip wheel .``) compiles when mypyc (a build
  requirement) and a C compiler are at hand, and otherwise, or when the compilation fails,
  installs pure Python with one warning: the same behaviour, slower. An editable install
  (``pip install -e .``, ``make install``) stays pure Python, so edits take effect at once;
  ``make native`` compiles in place;
- ``1``: compile, or fail the build;
- ``0``: pure Python.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def _compiled_modules() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location("_kaas_native", os.path.join(HERE, "kaas", "_native.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.COMPILED)


def _have_compiler() -> bool:
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()  # as distutils picks it
    return bool(cc) and shutil.which(cc[0]) is not None


def _warn(message: str) -> None:
    print(f"kaas setup.py: {message}", file=sys.stderr)


MODE = os.environ.get("KAAS_COMPILE") or "auto"
if MODE not in ("auto", "0", "1"):
    raise SystemExit(f"KAAS_COMPILE={MODE!r}: use 1 (compile or fail), 0 (pure Python) or leave it unset")


PLACEHOLDER = Extension("kaas._native__mypyc", sources=[])


class BuildNative(build_ext):
    """build_ext that runs mypyc when the build runs (not when pip only asks for metadata)
    and, unless ``KAAS_COMPILE=1``, falls back to pure Python when it cannot compile."""

    def finalize_options(self) -> None:
        if self.distribution.ext_modules == [PLACEHOLDER]:
            self.distribution.ext_modules = self._mypyc()
        super().finalize_options()

    def _mypyc(self) -> list[Extension]:
        if MODE == "auto" and getattr(self, "editable_mode", False):
            return []  # an editable install: pure unless KAAS_COMPILE=1 (make native)
        paths = [os.path.join("kaas", *name.split(".")[1:]) + ".py" for name in _compiled_modules()]
        try:
            from mypyc.build import mypycify

            return list(mypycify(
                # the build needs the types of the compiled modules and of what they call,
                # not make lint's strictness, nor every library the rest of kaas imports
                ["--config-file=", "--ignore-missing-imports", "--follow-imports=silent", *paths],
                opt_level="3", group_name="kaas._native",
                target_dir=os.path.join("build", f"mypyc-{sys.implementation.cache_tag}")))
        except (Exception, SystemExit) as exc:  # mypyc exits on a type error
            if MODE == "1":
                raise
            _warn(f"building pure Python: mypyc failed ({exc!r})")
            return []

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            if MODE == "1":
                raise
            for ext in self.extensions:  # nothing half built is installed
                path = self.get_ext_fullpath(ext.name)
                if os.path.exists(path):
                    os.remove(path)
            self.extensions = []
            _warn(f"building pure Python: the C compilation failed ({exc!r})")
            return
        if self.inplace:
            for ext in self.extensions:  # kaas._native.stale compares these times with the sources'
                path = self.get_ext_fullpath(ext.name)
                if os.path.exists(path):
                    os.utime(path)


if MODE == "1" or (MODE == "auto" and _have_compiler()):
    # a placeholder, replaced at build time: a wheel with extension modules is tagged for
    # this platform and Python
    EXT_MODULES = [PLACEHOLDER]
else:
    if MODE == "auto":
        _warn("no C compiler: building pure Python")
    EXT_MODULES = []

setup(ext_modules=EXT_MODULES, cmdclass={"build_ext": BuildNative})
