"""The membership files under ``__cluster`` (design sections 3 and 4).

=================================  =================  ======================================
file                               its one writer     how
=================================  =================  ======================================
``brokers/kaas-<id>.json``         broker ``<id>``    tmp + fsync + rename, every tick
``controller/epoch-<n>``           whoever creates    exclusive create (the election)
``assignment.json``                the controller     tmp + fsync + rename
``deaths/kaas-<id>.json``          its supervisor     ``storage.deaths``
=================================  =================  ======================================

Synchronous and trio-free; the membership tick (``tasks.membership``) runs these through
``broker.run_io``. Readers tolerate a file that vanished or is being replaced (a torn
heartbeat is skipped; the next tick reads it again). A corrupt ``assignment.json`` is
reported (``CorruptState``), never read as "no assignment".
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TypedDict

from kaas.domain.assignment import Assignment
from kaas.domain.membership import Heartbeat
from kaas.errors import CorruptState
from kaas.storage import atomic
from kaas.storage.paths import Layout


class EpochClaim(TypedDict):
    """``controller/epoch-<n>``, format 1: who won controller epoch ``n``."""

    format: int
    broker_id: int
    epoch: int


def read_heartbeats(layout: Layout) -> list[Heartbeat]:
    """Every broker's heartbeat that parses and names a ``broker_id`` (its other members
    unchecked: ``domain.membership.absorb_heartbeat`` reads them)."""
    try:
        names = os.listdir(layout.brokers)
    except FileNotFoundError:
        return []
    out: list[Heartbeat] = []
    for name in names:
        if not (name.startswith("kaas-") and name.endswith(".json")):
            continue
        try:
            obj = json.loads((layout.brokers / name).read_bytes())
            int(obj["broker_id"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append(obj)
    return out


def last_counter(layout: Layout, broker_id: int) -> int:
    """The counter of broker ``broker_id``'s last heartbeat file (0 when there is none)."""
    try:
        return int(json.loads(layout.broker_file(broker_id).read_bytes())["counter"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def write_heartbeat(layout: Layout, broker_id: int, obj: Heartbeat, *, fsync: bool) -> None:
    atomic.write_json(layout.broker_file(broker_id), obj, fsync=fsync)


def highest_epoch(layout: Layout) -> tuple[int, int | None]:
    """(the highest ``controller/epoch-<n>``, the broker that created it or None)."""
    best, owner = 0, None
    try:
        names = os.listdir(layout.controller)
    except FileNotFoundError:
        return 0, None
    for name in names:
        if name.startswith("epoch-"):
            try:
                n = int(name[6:])
            except ValueError:
                continue
            if n > best:
                best = n
    if best:
        try:
            owner = int(json.loads((layout.controller / f"epoch-{best}").read_bytes())["broker_id"])
        except (OSError, ValueError, KeyError, TypeError):
            owner = None
    return best, owner


def claim_epoch(layout: Layout, epoch: int, broker_id: int, *, fsync: bool) -> bool:
    """Race for controller epoch ``epoch``: True when this exclusive create won."""
    claim: EpochClaim = {"format": 1, "broker_id": broker_id, "epoch": epoch}
    data = json.dumps(claim).encode()
    return atomic.create_exclusive(layout.controller / f"epoch-{epoch}", data, fsync=fsync)


class AssignmentFile:
    """``assignment.json``, read afresh every time and parsed again only when its bytes
    changed (with 1,000 partitions the parse is the biggest part of an idle tick)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._raw: bytes | None = None
        self._parsed: Assignment | None = None

    def read(self) -> Assignment | None:
        """The assignment as last written, or None when none was.

        Raises:
            CorruptState: the file does not parse or is not an assignment.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        if data == self._raw and self._parsed is not None:
            return self._parsed
        obj = atomic.parse_json(self.path, data)
        try:
            parsed = Assignment.from_json(obj)
        except ValueError as exc:
            raise CorruptState(str(self.path), str(exc)) from None
        self._raw, self._parsed = data, parsed
        return parsed

    def write(self, assignment: Assignment, *, fsync: bool) -> None:
        atomic.write_json(self.path, assignment.to_json(), fsync=fsync)
