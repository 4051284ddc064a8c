"""Death notices: ``__cluster/deaths/kaas-<id>.json``, one per broker id.

A notice says for certain that one incarnation of broker ``<id>`` is gone, seconds before
its peers could conclude it from a silent heartbeat, so every broker treats that
incarnation as dead at once (``tasks.membership``): its keys move without waiting out
``session_timeout``. Two writers, never at once:

- the broker itself, as the last act of a graceful shutdown (SIGTERM), after it gave up
  everything it owned (``kaas.net.server``);
- its supervisor, when it reaps the broker process (``cluster/``), which is after anything
  the broker wrote.

Both write tmp + fsync + rename (``storage.atomic``), whose tmp names carry the writer's
incarnation, so the two never share a tmp file.

A notice names the incarnation (``storage.incarnation``), never a pid: in containers every
broker is PID 1, so a pid would name the restarted broker too. It applies to the heartbeat
that names the same incarnation, and only until that heartbeat's counter moves. A notice
written before incarnations existed names only a pid and is read as the incarnation
``pid:<pid>`` (``domain.membership.incarnation_of``), which matches only a heartbeat of the
same age.

Format: ``{"format": 1, "broker_id": <id>, "incarnation": <hex>, "host_name": <name>,
"pid": <pid, information only>, "reaped_at": <unix seconds>, "exit": <returncode or null>,
"graceful": <true when the broker wrote it itself>}``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from kaas.clock import SYSTEM
from kaas.domain.membership import incarnation_of
from kaas.storage import atomic
from kaas.storage.incarnation import HOST_NAME

FORMAT = 1


class NoticeFile(TypedDict):
    """``deaths/kaas-<id>.json``, format 1 (older notices have a ``pid`` and no
    ``incarnation``: ``incarnation_of``)."""

    format: int
    broker_id: int
    incarnation: str
    host_name: str
    pid: int | None
    reaped_at: float
    exit: int | None
    """The return code the supervisor reaped (None: unknown)."""
    graceful: bool


@dataclass(frozen=True, slots=True)
class Notice:
    broker_id: int
    incarnation: str
    reaped_at: float
    graceful: bool = False


def encode(broker_id: int, incarnation: str, returncode: int | None, now: float | None = None, *,
           pid: int | None = None, host_name: str = HOST_NAME, graceful: bool = False) -> bytes:
    """The bytes of one notice."""
    notice: NoticeFile = {"format": FORMAT, "broker_id": broker_id, "incarnation": incarnation,
                          "host_name": host_name, "pid": pid,
                          "reaped_at": SYSTEM.wall_ms() / 1000 if now is None else now,
                          "exit": returncode, "graceful": graceful}
    return json.dumps(notice).encode()


def write(path: Path, body: bytes, *, points: atomic.Points = atomic.STATE) -> None:
    """Write one notice durably (tmp + fsync + rename), creating ``deaths/`` if needed.

    Raises:
        OSError: the write failed; the previous notice is as it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(path, body, fsync=True, points=points)


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
            n = Notice(int(obj["broker_id"]), incarnation_of(obj), float(obj.get("reaped_at", 0.0)),
                       bool(obj.get("graceful", False)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        out[n.broker_id] = n
    return out
