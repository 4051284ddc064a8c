"""The handler registry: the one source of truth for dispatch and ApiVersions. Each module
of ``_MODULES`` defines API_KEY, VERSIONS = (min, max) and ``async def handle(ctx:
Context, req: <the kio request classes of its versions>)`` returning an ``Answer``
(``handlers.context``); mypy checks each against ``HandlerModule``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Never, Protocol, TypeAlias, cast

from kaas.handlers import (
    _feature_gate,
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    alter_share_group_offsets,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_share_group_offsets,
    delete_share_group_state,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_share_group_offsets,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    initialize_share_group_state,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    read_share_group_state,
    read_share_group_state_summary,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    sync_group,
    txn_offset_commit,
    update_features,
    write_txn_markers,
)
from kaas.handlers.context import Answer, ApiRange, Context

if TYPE_CHECKING:
    from kio.static.protocol import RequestPayload


class HandlerModule(Protocol):
    """What dispatch needs of a handler module; mypy checks each module of ``_MODULES``."""

    __name__: str
    API_KEY: int
    VERSIONS: tuple[int, int]

    # ``req: Never``: no one request type suits every handler. Each module takes the union
    # of its versions' kio request classes, and dispatch hands it only those (``Handler``).
    def handle(self, ctx: Context, req: Never, /) -> Awaitable[Answer]: ...


Handle: TypeAlias = "Callable[[Context, RequestPayload], Awaitable[Answer]]"


@dataclass(frozen=True, slots=True)
class Handler:
    """A registry entry: the API's key, the version range its module serves, and its
    ``handle``, which dispatch calls only with a request of a version in that range
    (decoded by that key and version's kio class)."""

    api_key: int
    min_version: int
    max_version: int
    module: HandlerModule
    handle: Handle

    @property
    def name(self) -> str:
        return self.module.__name__.rsplit(".", 1)[-1]

    @property
    def api_name(self) -> str:
        """Kafka's name of the API, e.g. ``ApiVersions``, ``AddPartitionsToTxn``."""
        return "".join(w.capitalize() for w in self.name.split("_"))


_MODULES: tuple[HandlerModule, ...] = (
    produce, fetch, list_offsets, metadata, api_versions,
    create_topics, delete_topics, create_partitions, delete_records,
    describe_configs, alter_configs, incremental_alter_configs, describe_cluster,
    offset_for_leader_epoch, init_producer_id,
    find_coordinator, join_group, sync_group, heartbeat, leave_group, describe_groups,
    list_groups, delete_groups, offset_commit, offset_fetch, offset_delete,
    add_partitions_to_txn, add_offsets_to_txn, end_txn, txn_offset_commit,
    describe_transactions, list_transactions, describe_producers, write_txn_markers,
    describe_topic_partitions,
    sasl_handshake, sasl_authenticate, describe_user_scram_credentials, alter_user_scram_credentials,
    describe_acls, create_acls, delete_acls,
    consumer_group_heartbeat, consumer_group_describe,
    share_group_heartbeat, share_group_describe, share_fetch, share_acknowledge,
    initialize_share_group_state, read_share_group_state, delete_share_group_state, read_share_group_state_summary,
    describe_share_group_offsets, alter_share_group_offsets, delete_share_group_offsets,
    update_features, describe_client_quotas, alter_client_quotas,
    describe_log_dirs, elect_leaders, alter_partition_reassignments, list_partition_reassignments,
)


def _load() -> dict[int, Handler]:
    reg: dict[int, Handler] = {}
    for mod in _MODULES:
        lo, hi = mod.VERSIONS
        # the one cast of the seam: dispatch checks the version is in VERSIONS and decodes
        # the request with that key and version's kio class, so ``req`` is of the union
        # the module's ``handle`` names
        # (a feature-gated API answers UNSUPPORTED_VERSION while its feature is off: _feature_gate)
        handle = _feature_gate.gated(mod.API_KEY, cast("Handle", mod.handle))
        reg[mod.API_KEY] = Handler(mod.API_KEY, lo, hi, mod, handle)
    return dict(sorted(reg.items()))


REGISTRY: dict[int, Handler] = _load()


def supported(api_key: int, version: int) -> bool:
    h = REGISTRY.get(api_key)
    return h is not None and h.min_version <= version <= h.max_version


API_KEYS: tuple[ApiRange, ...] = tuple((h.api_key, h.min_version, h.max_version) for h in REGISTRY.values())
"""What ApiVersions advertises: dispatch hands it to the handler (``Context.api_keys``)."""


def versions_table() -> list[dict[str, object]]:
    """``API_KEYS`` as ApiVersions' ``api_keys`` entries."""
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in API_KEYS]
