"""Death notices: ``__cluster/deaths/kaas-<id>.json``, one per broker id.

A supervisor that reaps one of its broker processes knows for certain that the process is
gone, seconds before its peers could conclude it from a silent heartbeat. It records the
fact here (the supervisor of broker ``<id>`` is the file's only writer; tmp + fsync +
rename), so every broker can treat that incarnation as dead at once
(``tasks.membership``): its keys move without waiting out ``session_timeout``.

A notice names the reaped process by ``pid``. It applies to the heartbeat file that names
the same pid, and only until that heartbeat's counter moves: a restarted incarnation
writes a new pid (and, on pid reuse, a new counter), so an old notice never kills it.

Format: ``{"format": 1, "broker_id": <id>, "pid": <pid>, "reaped_at": <unix seconds>,
"exit": <returncode>}``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from kaas.clock import SYSTEM

FORMAT = 1


@dataclass(frozen=True, slots=True)
class Notice:
    broker_id: int
    pid: int
    reaped_at: float


def encode(broker_id: int, pid: int, returncode: int | None, now: float | None = None) -> bytes:
    """The bytes of one notice."""
    return json.dumps({"format": FORMAT, "broker_id": broker_id, "pid": pid,
                       "reaped_at": SYSTEM.wall_ms() / 1000 if now is None else now, "exit": returncode}).encode()


def read_all(directory: Path) -> dict[int, Notice]:
    """Every readable notice by broker id. A notice that cannot be read or parsed is left
    out (the heartbeat rule then decides, as without notices); a notice is an accelerator,
    never the only evidence of a death."""
    out: dict[int, Notice] = {}
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return out
    for name in names:
        if not (name.startswith("kaas-") and name.endswith(".json")):
            continue
        try:
            obj = json.loads((Path(directory) / name).read_bytes())
            n = Notice(int(obj["broker_id"]), int(obj["pid"]), float(obj.get("reaped_at", 0.0)))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out[n.broker_id] = n
    return out
