"""The modules ``setup.py`` compiles with mypyc, and the switch back to their Python source.

``pip install .`` (a wheel, the image) builds ``COMPILED`` into C extension modules where
a C compiler exists; an editable install (``make install``) stays pure Python unless built
with ``make native``, which puts the extension modules next to their sources. Python
imports an extension module before the ``.py`` of the same name, so ``use_source`` (run by
``import kaas``) loads every compiled module from its ``.py`` instead when

- ``KAAS_PURE=1`` is set (a comparison run: ``make test-pure``, a benchmark, a bug hunt), or
- in a source checkout, a compiled module is older than its ``.py``: one edited since
  ``make native`` (a stale build must never run in place of the code being edited; one
  line on standard error says so).

All of them or none: compiled modules call each other natively, so a mix would still run
the stale code. This module imports nothing from kaas (``setup.py`` reads ``COMPILED``).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["COMPILED", "compiled", "stale", "use_source"]

COMPILED = (
    "kaas.domain.producer_batches",
    "kaas.domain.producer_state",
    "kaas.domain.txn",
    "kaas.domain.txn_effects",
    "kaas.domain.txn_init",
    "kaas.domain.txn_records",
    "kaas.storage.txn_store",
    "kaas.wire.batch",
    "kaas.wire.framing",
    "kaas.wire.validate",
)
"""The modules compiled by mypyc (docs/performance.rst: each measured, each kept because it
pays). They may not be monkeypatched, nor their classes subclassed in Python."""

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def source_of(name: str, package_dir: str = _PACKAGE) -> str:
    """The ``.py`` file of the kaas module ``name``."""
    return os.path.join(package_dir, *name.split(".")[1:]) + ".py"


def compiled(name: str, package_dir: str = _PACKAGE) -> str | None:
    """The extension module built for the kaas module ``name``, or None."""
    base = source_of(name, package_dir)[: -len(".py")]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(base + suffix):
            return base + suffix
    return None


def stale(package_dir: str = _PACKAGE, names: Sequence[str] = COMPILED) -> str | None:
    """In a source checkout (``setup.py`` beside the package), the first module whose
    ``.py`` is newer than its extension module; None when every built one is current, or
    outside a checkout (an installed wheel's file times say nothing)."""
    if not os.path.exists(os.path.join(os.path.dirname(package_dir), "setup.py")):
        return None
    for name in names:
        built = compiled(name, package_dir)
        if built is not None and os.path.getmtime(source_of(name, package_dir)) > os.path.getmtime(built):
            return name
    return None


class _SourceFinder:
    """A meta path finder that loads ``names`` from their ``.py`` files."""

    def __init__(self, names: Sequence[str], package_dir: str) -> None:
        self.names = frozenset(names)
        self.package_dir = package_dir

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in self.names:
            return None
        return importlib.util.spec_from_file_location(name, source_of(name, self.package_dir))


def use_source() -> None:
    """Load the compiled modules from their sources when asked (``KAAS_PURE=1``) or when
    a build in a checkout is stale; nothing to do when none is built."""
    if any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        return
    if os.environ.get("KAAS_PURE", "") not in ("", "0"):
        sys.meta_path.insert(0, _SourceFinder(COMPILED, _PACKAGE))
        return
    old = stale()
    if old is not None:
        print(f"kaas: {source_of(old)} changed since it was compiled: running every compiled module "
              "from its source (make native rebuilds them, make pure removes them)", file=sys.stderr)
        sys.meta_path.insert(0, _SourceFinder(COMPILED, _PACKAGE))
