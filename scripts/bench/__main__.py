"""``python scripts/bench <command>``: the benchmark CLI (``bench.cli``).

Run as a directory, this file is ``__main__`` with ``scripts/bench`` first on ``sys.path``.
In its place go ``scripts/`` (so ``bench`` is the package its modules are) and the
repository (so this checkout's ``kaas`` is the one used, as in the other scripts).
"""

import sys
from pathlib import Path

if __package__ in (None, ""):
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != here]
    sys.path[:0] = [str(here.parent), str(here.parent.parent)]

from bench.cli import cli  # noqa: E402

cli()
