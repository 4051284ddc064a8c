"""``python scripts/eos_harness <command>``: the exactly-once harness's CLI (``eos_harness.cli``).

Run as a directory, this file is ``__main__`` with ``scripts/eos_harness`` first on
``sys.path``. In its place go ``scripts/`` (so ``eos_harness`` is the package its modules
are, also in the copiers' spawned processes, which get this ``sys.path``) and the
repository (so this checkout's ``kaas`` is the one used, as in the other scripts).
"""

import sys
from pathlib import Path

if __package__ in (None, ""):
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != here]
    sys.path[:0] = [str(here.parent), str(here.parent.parent)]

from eos_harness.cli import cli  # noqa: E402
from eos_harness.run import interrupt_on_sigterm  # noqa: E402

if __name__ == "__main__":
    # the run's users and ACLs removed, the copiers and a --start-cluster cluster stopped
    interrupt_on_sigterm()
    cli()
