"""One module per Kafka API. Each module defines API_KEY, VERSIONS = (min, max) and
``async def handle(ctx, req)`` returning a dict (built into the response class of the
request's version), a kio response object, or None (no response: Produce acks=0).

The registry built here is the one source of truth for ApiVersions and dispatch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from kaas.broker import Broker
from kaas.handlers.session import Session

_MODULES = (
    "produce", "fetch", "list_offsets", "metadata", "api_versions",
    "create_topics", "delete_topics", "create_partitions", "delete_records",
    "describe_configs", "alter_configs", "incremental_alter_configs", "describe_cluster",
    "offset_for_leader_epoch", "init_producer_id",
    "find_coordinator", "join_group", "sync_group", "heartbeat", "leave_group", "describe_groups",
    "list_groups", "delete_groups", "offset_commit", "offset_fetch", "offset_delete",
    "add_partitions_to_txn", "add_offsets_to_txn", "end_txn", "txn_offset_commit",
    "describe_transactions", "list_transactions", "describe_producers", "write_txn_markers",
    "describe_topic_partitions",
    "sasl_handshake", "sasl_authenticate", "describe_user_scram_credentials", "alter_user_scram_credentials",
    "describe_topic_partitions", "describe_acls", "create_acls", "delete_acls",
)


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    min_version: int
    max_version: int
    module: ModuleType

    @property
    def name(self) -> str:
        return self.module.__name__.rsplit(".", 1)[-1]

    @property
    def api_name(self) -> str:
        """Kafka's name of the API, e.g. ``ApiVersions``, ``AddPartitionsToTxn``."""
        return getattr(self.module, "API_NAME", None) or "".join(w.capitalize() for w in self.name.split("_"))


@dataclass(slots=True)
class Context:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    lapses: int = 0  # the broker's lease lapses when the connection was accepted
    session: Session = field(default_factory=Session)  # the connection's security state

    @property
    def principal(self) -> str:
        return self.session.principal


def _load() -> dict[int, Handler]:
    reg: dict[int, Handler] = {}
    for name in _MODULES:
        mod = importlib.import_module(f"kaas.handlers.{name}")
        lo, hi = mod.VERSIONS
        reg[mod.API_KEY] = Handler(mod.API_KEY, lo, hi, mod)
    return dict(sorted(reg.items()))


REGISTRY: dict[int, Handler] = _load()


def supported(api_key: int, version: int) -> bool:
    h = REGISTRY.get(api_key)
    return h is not None and h.min_version <= version <= h.max_version


def versions_table() -> list[dict[str, Any]]:
    return [{"api_key": h.api_key, "min_version": h.min_version, "max_version": h.max_version}
            for h in REGISTRY.values()]
