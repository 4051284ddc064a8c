"""The run's configuration: its names (topics, group, transactional ids, users) and each
role's client settings.

Imports nothing of the harness.
"""

from __future__ import annotations

GROUP_PREFIX = "eos-harness"

# Client settings an Apache Kafka user would pick for fast failover (cfg keys override):
# a dead copier's partitions move after the session timeout (the broker allows down to
# group.min.session.timeout.ms = 1 s); a request to a hung broker is given up after
# socket.timeout.ms rather than librdkafka's 60 s; a dead copier's open transaction is
# aborted by its coordinator after transaction.timeout.ms (unless its restart fences it
# first), and librdkafka wants message.timeout.ms <= transaction.timeout.ms.
COPIER_DEFAULTS = {"session_timeout_ms": 4000, "heartbeat_interval_ms": 1000, "transaction_timeout_ms": 15000,
                   "socket_timeout_ms": 10000}


def _knob(cfg: dict, key: str) -> int:
    return int(cfg.get(key) or COPIER_DEFAULTS[key])


def security(cfg: dict, role: str = "admin") -> dict:
    """The client settings of ``role`` on this run's cluster (``cfg["security"][role]``:
    security.protocol, ssl.ca.location, sasl.*), to merge into a confluent-kafka config;
    empty on a plaintext cluster. ``admin`` is the harness itself (topics, monitoring, the
    group's committed offsets); ``copier``, ``producer`` and ``verifier`` are the
    least-privilege users ``grant_least_privilege`` made."""
    return dict((cfg.get("security") or {}).get(role, {}))



def txn_id_prefix(cfg: dict) -> str:
    """The copiers' transactional ids are this plus the copier's index."""
    return f"{cfg['group']}-copier-"



def verify_group(cfg: dict) -> str:
    """The verifier's consumer group (it reads by assignment and commits nothing, but
    librdkafka still looks its coordinator up)."""
    return f"{cfg['group']}-verify"


def user_of(cfg: dict, role: str) -> str:
    """The SCRAM user name of ``role`` in a --secure run."""
    return f"{cfg['group']}-{role}"

