"""The few admin requests a test cluster makes itself, over kaas's own wire client (no
Kafka client library needed): CreateTopics, Metadata, FindCoordinator; and the health
checks ``Cluster.wait_healthy`` runs.

Each request goes to the first of the given brokers that answers; a retriable answer (no
leader yet, a coordinator loading) is asked again with a short backoff until the deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kaas.testing.procs import Backoff

Wire = Callable[..., Any]
"""``wire(port, timeout=...)``: a connected ``kaas.client.WireClient`` (a context manager)."""

NONE = 0
RETRIABLE = {
    5,   # LEADER_NOT_AVAILABLE
    6,   # NOT_LEADER_OR_FOLLOWER
    7,   # REQUEST_TIMED_OUT
    14,  # COORDINATOR_LOAD_IN_PROGRESS
    15,  # COORDINATOR_NOT_AVAILABLE
    16,  # NOT_COORDINATOR
    41,  # NOT_CONTROLLER
}
UNKNOWN_TOPIC = 3


class AdminError(RuntimeError):
    """The cluster refused a request, with Kafka's error name."""

    def __init__(self, what: str, code: int, message: str | None = None) -> None:
        super().__init__(f"{what}: {_name(code)}" + (f" ({message})" if message else ""))
        self.code = code


def _name(code: int) -> str:
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"ERROR_{code}"


class _Retry(Exception):
    pass


def _ask(wire: Wire, ports: Sequence[int], timeout: float, what: str, fn: Callable[[Any], Any]) -> Any:
    """``fn(client)`` on the first broker of ``ports`` that answers; again (with backoff) while
    it raises ``_Retry`` or the connection fails, until ``timeout``.

    Raises:
        TimeoutError: never answered, naming ``what`` and the last problem.
    """
    deadline = time.monotonic() + timeout
    pause = Backoff(0.005, 0.2)
    last = "no answer"
    while True:
        for port in ports:
            try:
                with wire(port, timeout=max(1.0, min(10.0, deadline - time.monotonic()))) as wc:
                    return fn(wc)
            except _Retry as exc:
                last = str(exc)
            except OSError as exc:
                last = f"127.0.0.1:{port}: {exc}"
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: no answer within {timeout} s ({last})")
        pause.sleep(deadline)


def create_topic(wire: Wire, ports: Sequence[int], name: str, partitions: int, config: dict[str, str],
                 timeout: float) -> None:
    """CreateTopics v7, replication factor 1.

    Raises:
        AdminError: refused with a non-retriable error.
    """
    def call(wc: Any) -> None:
        r = wc.call(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                        "assignments": [], "configs": [{"name": k, "value": v}
                                                                       for k, v in config.items()]}],
                            "timeout": int(timeout * 1000), "validate_only": False})
        t = r.topics[0]
        if t.error_code in RETRIABLE:
            raise _Retry(_name(t.error_code))
        if t.error_code != NONE:
            raise AdminError(f"CreateTopics {name}", t.error_code, t.error_message)

    _ask(wire, ports, timeout, f"CreateTopics {name}", call)


def _metadata(wc: Any, topics: list[str] | None) -> Any:
    return wc.call(3, 12, {"topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
                           "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})


def leader_of(wire: Wire, ports: Sequence[int], topic: str, partition: int, timeout: float) -> int:
    """The leader id of ``topic``/``partition`` (waits while there is none).

    Raises:
        AdminError: the topic or partition does not exist.
    """
    def call(wc: Any) -> int:
        md = _metadata(wc, [topic])
        t = md.topics[0]
        if t.error_code == UNKNOWN_TOPIC:
            raise AdminError(f"Metadata {topic}", t.error_code)
        if t.error_code != NONE:
            raise _Retry(f"{topic}: {_name(t.error_code)}")
        for p in t.partitions:
            if p.partition_index == partition:
                if p.leader_id < 0 or p.error_code != NONE:
                    raise _Retry(f"{topic}/{partition}: no leader ({_name(p.error_code)})")
                return int(p.leader_id)
        raise AdminError(f"Metadata {topic}: no partition {partition}", UNKNOWN_TOPIC)

    return int(_ask(wire, ports, timeout, f"the leader of {topic}/{partition}", call))


def coordinator_of(wire: Wire, ports: Sequence[int], key: str, key_type: int, timeout: float) -> int:
    """FindCoordinator v3 (``key_type`` 0: group, 1: transaction): the coordinator's id."""
    def call(wc: Any) -> int:
        c = wc.call(10, 3, {"key_type": key_type, "key": key})
        if c.error_code != NONE:
            if c.error_code in RETRIABLE:
                raise _Retry(f"{key}: {_name(c.error_code)}")
            raise AdminError(f"FindCoordinator {key}", c.error_code, c.error_message)
        return int(c.node_id)

    return int(_ask(wire, ports, timeout, f"the coordinator of {key!r}", call))


def metadata_problem(wire: Wire, port: int, n: int) -> str | None:
    """What keeps the broker at ``port`` from being healthy in an ``n``-broker cluster: its
    Metadata must list ``n`` brokers and a controller among them, and a leader for every
    partition of every topic. None: healthy."""
    try:
        with wire(port, timeout=2.0) as wc:
            md = _metadata(wc, None)
    except OSError as exc:
        return f"no answer ({exc})"
    ids = {b.node_id for b in md.brokers}
    if len(ids) < n:
        return f"Metadata lists brokers {sorted(ids)}"
    if md.controller_id not in ids:
        return "no controller"
    for t in md.topics:
        for p in t.partitions:
            if p.leader_id not in ids:
                return f"{t.name}/{p.partition_index} has no leader"
    return None


def slots_problem(data: Path, n: int) -> str | None:
    """Whether the transaction coordinator slots of ``DATA/__cluster/assignment.json`` sit
    where the all-alive placement of ``n`` brokers puts them (a restarted broker took its
    share back). None: they do."""
    from kaas.domain import routing

    try:
        slots = json.loads((data / "__cluster" / "assignment.json").read_text()).get("txn_slots", {})
    except (OSError, ValueError):
        return "no assignment yet"
    ids = list(range(n))
    if {int(s): o for s, o in slots.items()} != routing.slot_owners(ids, ids):
        return "transaction coordinators not yet placed on every broker"
    return None
