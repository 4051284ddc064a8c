"""Incarnations: who wrote a file on the shared volume, independent of process ids.

Every start of a broker (every process, in fact) draws a random incarnation id, a UUID in
hex. It names the process wherever a process id used to:

- the heartbeat (``brokers/kaas-<id>.json``: ``incarnation``, with ``host_name`` beside it
  for people reading logs and ``pid`` as information only);
- death notices (``storage.deaths``), which kill exactly the incarnation they name;
- the presence connection's suspicion (``ClusterView.suspect``);
- temporary file names (``storage.atomic``), so two writers of one file never share a tmp.

Process ids cannot do this. In a container every broker is PID 1, a restarted container is
PID 1 again, and so are two hosts' containers: a deposed zombie and the new owner of a file
would differ only by a thread ident, which is an address, and a death notice of the previous
incarnation would name the new one.

A supervisor draws the id of each broker it spawns and passes it with ``--incarnation``,
so the death notice it writes after reaping names that broker. A forked child draws a new
id (``os.register_at_fork``): it is another process.

Files written before incarnations existed name only a pid; ``domain.membership.incarnation_of``
reads such a file as the incarnation ``pid:<pid>``, so old heartbeats and death notices stay
readable and still match each other.
"""

from __future__ import annotations

import os
import re
import socket
import uuid

HOST_NAME = socket.gethostname()
_ID = re.compile(r"[0-9a-f]{32}")

_current: str | None = None


def draw() -> str:
    """A new random incarnation id (32 hex digits)."""
    return uuid.uuid4().hex


def valid(value: str) -> bool:
    return _ID.fullmatch(value) is not None


def current() -> str:
    """This process's incarnation id (drawn at first use, or ``adopt``ed)."""
    global _current
    if _current is None:
        _current = draw()
    return _current


def adopt(value: str) -> str:
    """Make ``value`` (drawn by a supervisor) this process's incarnation.

    Raises:
        ValueError: ``value`` is not 32 lowercase hex digits.
    """
    global _current
    if not valid(value):
        raise ValueError(f"an incarnation id is 32 lowercase hex digits, not {value!r}")
    _current = value
    return value


def short(value: str) -> str:
    """The first 8 digits, for log lines."""
    return value[:8] if valid(value) else value


def _forked() -> None:
    global _current
    _current = None


os.register_at_fork(after_in_child=_forked)
