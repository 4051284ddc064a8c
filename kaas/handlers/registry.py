"""The handler registry: the one source of truth for dispatch and ApiVersions. Each module
of ``_MODULES`` defines API_KEY, VERSIONS = (min, max) and ``async def handle(ctx:
Context, req: <the kio request classes of its versions>)`` returning an ``Answer``
(``handlers.context``); mypy checks each against ``HandlerModule``.

The table ``TABLE`` names each module with its key and version range, so that importing
the registry imports no handler: a handler module (with the kio classes of all its
versions, most of a broker's import time) is imported when its API's first request
arrives (``Handler.handle``), and a broker starts serving without the modules of the APIs
nobody has asked for yet. ``load_all`` imports them all (a fork server that forks many
brokers); a unit test checks the table against every module's API_KEY and VERSIONS.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Never, Protocol, TypeAlias, cast

from kaas.handlers.context import Answer, ApiRange, Context

if TYPE_CHECKING:
    from kio.static.protocol import RequestPayload

    from kaas.handlers import (
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


class HandlerModule(Protocol):
    """What dispatch needs of a handler module; mypy checks each module of ``_MODULES``."""

    __name__: str
    API_KEY: int
    VERSIONS: tuple[int, int]

    # ``req: Never``: no one request type suits every handler. Each module takes the union
    # of its versions' kio request classes, and dispatch hands it only those (``Handler``).
    def handle(self, ctx: Context, req: Never, /) -> Awaitable[Answer]: ...


Handle: TypeAlias = "Callable[[Context, RequestPayload], Awaitable[Answer]]"


class Handler:
    """A registry entry: the API's key, the version range its module serves, and its
    ``handle``, which dispatch calls only with a request of a version in that range
    (decoded by that key and version's kio class). The module is imported on the first
    use of ``module`` or ``handle``.

    Raises (``module``, ``handle``):
        AssertionError: the module's API_KEY or VERSIONS differ from the table's (a bug,
            also caught by the registry's unit test).
    """

    __slots__ = ("api_key", "min_version", "max_version", "name", "_module", "_handle")

    def __init__(self, api_key: int, name: str, min_version: int, max_version: int) -> None:
        self.api_key = api_key
        self.name = name
        self.min_version = min_version
        self.max_version = max_version
        self._module: HandlerModule | None = None
        self._handle: Handle | None = None

    def __repr__(self) -> str:
        return f"Handler({self.api_key}, {self.name!r}, {self.min_version}, {self.max_version})"

    def _load(self) -> HandlerModule:
        from kaas.handlers import _feature_gate

        mod = cast("HandlerModule", importlib.import_module(f"kaas.handlers.{self.name}"))
        assert (mod.API_KEY, mod.VERSIONS) == (self.api_key, (self.min_version, self.max_version)), self
        # the one cast of the seam: dispatch checks the version is in VERSIONS and decodes
        # the request with that key and version's kio class, so ``req`` is of the union
        # the module's ``handle`` names
        # (a feature-gated API answers UNSUPPORTED_VERSION while its feature is off: _feature_gate)
        self._handle = _feature_gate.gated(mod.API_KEY, cast("Handle", mod.handle))
        self._module = mod
        return mod

    @property
    def module(self) -> HandlerModule:
        return self._module if self._module is not None else self._load()

    @property
    def handle(self) -> Handle:
        if self._handle is None:
            self._load()
            assert self._handle is not None
        return self._handle

    @property
    def api_name(self) -> str:
        """Kafka's name of the API, e.g. ``ApiVersions``, ``AddPartitionsToTxn``."""
        return "".join(w.capitalize() for w in self.name.split("_"))


if TYPE_CHECKING:  # mypy checks every module against HandlerModule; nothing is imported here
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


# (api key, module of kaas.handlers, min version, max version): each row is its module's
# API_KEY and VERSIONS (tests/unit/test_registry.py checks them)
TABLE: tuple[tuple[int, str, int, int], ...] = (
    (0, "produce", 3, 13), (1, "fetch", 4, 18), (2, "list_offsets", 1, 11), (3, "metadata", 0, 13),
    (8, "offset_commit", 2, 10), (9, "offset_fetch", 1, 10), (10, "find_coordinator", 0, 6), (11, "join_group", 0, 9),
    (12, "heartbeat", 0, 4), (13, "leave_group", 0, 5), (14, "sync_group", 0, 5), (15, "describe_groups", 0, 6),
    (16, "list_groups", 0, 5), (17, "sasl_handshake", 0, 1), (18, "api_versions", 0, 4), (19, "create_topics", 2, 7),
    (20, "delete_topics", 1, 6), (21, "delete_records", 0, 2), (22, "init_producer_id", 0, 5),
    (23, "offset_for_leader_epoch", 2, 4), (24, "add_partitions_to_txn", 0, 5), (25, "add_offsets_to_txn", 0, 4),
    (26, "end_txn", 0, 5), (27, "write_txn_markers", 1, 1), (28, "txn_offset_commit", 0, 5),
    (29, "describe_acls", 1, 3), (30, "create_acls", 1, 3), (31, "delete_acls", 1, 3), (32, "describe_configs", 1, 4),
    (33, "alter_configs", 0, 2), (35, "describe_log_dirs", 1, 5), (36, "sasl_authenticate", 0, 2),
    (37, "create_partitions", 0, 3), (42, "delete_groups", 0, 2), (43, "elect_leaders", 0, 2),
    (44, "incremental_alter_configs", 0, 1), (45, "alter_partition_reassignments", 0, 1),
    (46, "list_partition_reassignments", 0, 0), (47, "offset_delete", 0, 0), (48, "describe_client_quotas", 0, 1),
    (49, "alter_client_quotas", 0, 1), (50, "describe_user_scram_credentials", 0, 0),
    (51, "alter_user_scram_credentials", 0, 0), (57, "update_features", 0, 2), (60, "describe_cluster", 0, 2),
    (61, "describe_producers", 0, 0), (65, "describe_transactions", 0, 0), (66, "list_transactions", 0, 2),
    (68, "consumer_group_heartbeat", 0, 1), (69, "consumer_group_describe", 0, 1),
    (75, "describe_topic_partitions", 0, 0), (76, "share_group_heartbeat", 1, 1), (77, "share_group_describe", 1, 1),
    (78, "share_fetch", 1, 2), (79, "share_acknowledge", 1, 2), (83, "initialize_share_group_state", 0, 0),
    (84, "read_share_group_state", 0, 0), (86, "delete_share_group_state", 0, 0),
    (87, "read_share_group_state_summary", 0, 1), (90, "describe_share_group_offsets", 0, 1),
    (91, "alter_share_group_offsets", 0, 0), (92, "delete_share_group_offsets", 0, 0),
)


REGISTRY: dict[int, Handler] = {k: Handler(k, name, lo, hi) for k, name, lo, hi in TABLE}


def load_all(keys: Iterable[int] | None = None) -> None:
    """Import the handler modules of ``keys`` (None: every one) now, in a process that
    forks brokers: each fork has them, copy-on-write, instead of importing them again."""
    for key in REGISTRY if keys is None else keys:
        REGISTRY[key].module  # noqa: B018 - imports it


def supported(api_key: int, version: int) -> bool:
    h = REGISTRY.get(api_key)
    return h is not None and h.min_version <= version <= h.max_version


API_KEYS: tuple[ApiRange, ...] = tuple((h.api_key, h.min_version, h.max_version) for h in REGISTRY.values())
"""What ApiVersions advertises: dispatch hands it to the handler (``Context.api_keys``)."""


def versions_table() -> list[dict[str, object]]:
    """``API_KEYS`` as ApiVersions' ``api_keys`` entries."""
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in API_KEYS]
