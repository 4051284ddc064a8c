"""``python scripts/chaos <command>``: the chaos scenarios' CLI (``chaos.cli``).

Run as a directory, this file is ``__main__`` with ``scripts/chaos`` first on ``sys.path``.
In its place go ``scripts/`` (so ``chaos`` is the package its modules are, and
``eos_harness`` and ``timeline`` are found, also in the harness's spawned copiers) and the
repository (so this checkout's ``kaas`` is the one used, as in the other scripts).
"""

import sys
from pathlib import Path

if __package__ in (None, ""):
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != here]
    sys.path[:0] = [str(here.parent), str(here.parent.parent)]

from eos_harness import interrupt_on_sigterm  # noqa: E402

from chaos.cli import cli  # noqa: E402

if __name__ == "__main__":
    interrupt_on_sigterm()  # killed, it still stops its cluster (``runner._run_in``'s finally)
    cli()
