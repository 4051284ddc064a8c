"""The run's configuration (``HarnessConfig``), its names (topics, group, transactional
ids, users) and each role's client settings.

Imports nothing of the harness.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GROUP_PREFIX = "eos-harness"
GROUP_PROTOCOLS = ("classic", "consumer")  # librdkafka's group.protocol; consumer is KIP-848
SESSION_TIMEOUT_MS = 4000  # the copiers' session timeout (classic: theirs; consumer: the broker's)
HEARTBEAT_INTERVAL_MS = 1000


@dataclass(frozen=True, slots=True)
class HarnessConfig:
    """One run of the harness: where, how much, how the copiers behave, and (--secure)
    who each role connects as.

    Frozen: what changes during a run is a new value (``dataclasses.replace``), as
    ``grant_least_privilege`` does when it adds the users it made. It is pickled to every
    copier process (``multiprocessing`` spawn), so it holds plain values only. A new
    option is a field with a default here, read where it is used.
    """

    bootstrap: str
    input: str  # the seeded topic
    output: str  # the copiers' transactional output
    group: str  # the copiers' consumer group; also names the txn ids, users, verifier group
    seed: int
    messages: int = 10000
    copiers: int = 3
    commit_every: int = 100  # messages per transaction (max)
    abort_every: int = 10  # abort about one transaction in this many (0: never)
    input_partitions: int = 6
    output_partitions: int = 6
    rate: float = 0.0  # messages/s per copier, 0: as fast as it goes
    timeout: float = 300.0  # seconds for the copy, and again for the verifier's read
    secure: bool = False  # make least-privilege users and ACLs (needs security["admin"])
    keep_users: bool = False  # --secure: leave them on the cluster at the end
    # role ("admin", "copier", "producer", "verifier") -> confluent-kafka client settings
    # (security.protocol, ssl.ca.location, sasl.*); empty on a plaintext cluster
    security: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The copiers' client settings an Apache Kafka user would pick for fast failover: a
    # dead copier's partitions move after the session timeout (the broker allows down to
    # group.min.session.timeout.ms = 1 s); a request to a hung broker is given up after
    # socket.timeout.ms rather than librdkafka's 60 s; a dead copier's open transaction is
    # aborted by its coordinator after transaction.timeout.ms (unless its restart fences
    # it first), and librdkafka wants message.timeout.ms <= transaction.timeout.ms.
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    transaction_timeout_ms: int = 15000
    socket_timeout_ms: int = 10000
    # The copiers' group.protocol: "classic" (JoinGroup/SyncGroup, cooperative-sticky) or
    # "consumer" (KIP-848 ConsumerGroupHeartbeat). With "consumer" the session timeout and
    # heartbeat interval are the broker's (group.consumer.*; see ``consumer_broker_args``):
    # librdkafka refuses them, and partition.assignment.strategy, as client settings.
    group_protocol: str = "classic"

    @classmethod
    def new_run(cls, bootstrap: str, seed: int, *, prefix: str = "eos", group_prefix: str = GROUP_PREFIX,
                **options: Any) -> HarnessConfig:
        """A run with names of its own: topics ``PREFIX-in-ID`` and ``PREFIX-out-ID``, group
        ``GROUP_PREFIX-ID`` (ID random, 8 hex digits).

        Args:
            options: any other field.
        """
        run_id = uuid.uuid4().hex[:8]
        return cls(bootstrap=bootstrap, seed=seed, input=f"{prefix}-in-{run_id}", output=f"{prefix}-out-{run_id}",
                   group=f"{group_prefix}-{run_id}", **options)


def security(cfg: HarnessConfig, role: str = "admin") -> dict:
    """The client settings of ``role`` on this run's cluster (``cfg.security[role]``:
    security.protocol, ssl.ca.location, sasl.*), to merge into a confluent-kafka config;
    empty on a plaintext cluster. ``admin`` is the harness itself (topics, monitoring, the
    group's committed offsets); ``copier``, ``producer`` and ``verifier`` are the
    least-privilege users ``grant_least_privilege`` made."""
    return dict(cfg.security.get(role, {}))


def group_settings(cfg: HarnessConfig, group_protocol: str | None = None) -> dict:
    """A copier's consumer-group settings for ``group_protocol`` (default
    ``cfg.group_protocol``), to merge into its confluent-kafka config."""
    protocol = group_protocol or cfg.group_protocol
    if protocol not in GROUP_PROTOCOLS:
        raise ValueError(f"group protocol {protocol!r}: one of {', '.join(GROUP_PROTOCOLS)}")
    if protocol == "consumer":
        return {"group.protocol": "consumer"}
    return {"group.protocol": "classic", "session.timeout.ms": cfg.session_timeout_ms,
            "heartbeat.interval.ms": cfg.heartbeat_interval_ms,
            "partition.assignment.strategy": "cooperative-sticky"}


def consumer_broker_args(session_timeout_ms: int = SESSION_TIMEOUT_MS,
                         heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS) -> list[str]:
    """``kaas broker`` options that give consumer-protocol members the copiers' classic
    failover: a dead member's partitions move after ``session_timeout_ms`` (Kafka's
    defaults are 45 s, with the group minimum also 45 s). For a cluster the harness starts
    with ``--group-protocol consumer`` (and chaos's rolling upgrade)."""
    return ["--group-consumer-min-session-timeout-ms", str(min(1000, session_timeout_ms)),
            "--group-consumer-session-timeout-ms", str(session_timeout_ms),
            "--group-consumer-min-heartbeat-interval-ms", str(min(500, heartbeat_interval_ms)),
            "--group-consumer-heartbeat-interval-ms", str(heartbeat_interval_ms)]


def txn_id_prefix(cfg: HarnessConfig) -> str:
    """The copiers' transactional ids are this plus the copier's index."""
    return f"{cfg.group}-copier-"


def verify_group(cfg: HarnessConfig) -> str:
    """The verifier's consumer group (it reads by assignment and commits nothing, but
    librdkafka still looks its coordinator up)."""
    return f"{cfg.group}-verify"


def user_of(cfg: HarnessConfig, role: str) -> str:
    """The SCRAM user name of ``role`` in a --secure run."""
    return f"{cfg.group}-{role}"
