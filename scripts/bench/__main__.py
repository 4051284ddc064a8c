"""``python scripts/bench <command>``: the benchmark CLI (``bench.cli``).

Run as a directory, this file is ``__main__`` with ``scripts/bench`` first on ``sys.path``;
putting ``scripts/`` there instead makes ``bench`` the importable package its modules are.
"""

import sys
from pathlib import Path

if __package__ in (None, ""):
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != here]
    sys.path.insert(0, str(here.parent))

from bench.cli import cli  # noqa: E402

cli()
