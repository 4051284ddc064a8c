"""The wall clock, as one seam: storage and the domain never read it themselves; they are
handed ``wall_ms`` (or a test's stepped clock) by whoever creates them."""

from __future__ import annotations

import time


def wall_ms() -> int:
    """Milliseconds since the Unix epoch (record timestamps, segment ages, retention)."""
    return int(time.time() * 1000)
