"""AlterClientQuotas (49): set and remove client quotas (KIP-546), each entry on its own:
a refused entry leaves the others to apply. Needs ALTER_CONFIGS on the cluster. The
controller writes ``__cluster/client_quotas.json`` (its one writer); another broker
forwards the request (``_forward``) and re-reads the file after a success. An ``ip``
entity's name is an address, or a host name that resolves (looked up here, before the
pure validation of ``domain.client_quotas``)."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, TypeAlias

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas.domain import client_quotas
from kaas.domain.client_quotas import IP, Entity, Op, Refusal
from kaas.errors import CorruptState
from kaas.handlers import _forward
from kaas.handlers._auth import CLUSTER, authorize
from kaas.handlers._auth import Op as AclOp

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kio.schema.alter_client_quotas import v0, v1
    from kio.static.protocol import ResponsePayload

    from kaas.handlers.context import Context

    AlterClientQuotasRequest: TypeAlias = v0.AlterClientQuotasRequest | v1.AlterClientQuotasRequest

API_KEY = 49
VERSIONS = (0, 1)
TIMEOUT_S = 30.0  # the request carries none
RESOLVE_S = 5.0

log = structlog.get_logger()


def _entry(pairs: Iterable[tuple[str, str | None]], code: ErrorCode, message: str | None) -> dict[str, object]:
    return {"error_code": code, "error_message": message,
            "entity": [{"entity_type": t, "entity_name": n} for t, n in pairs]}


def _all(req: AlterClientQuotasRequest, code: ErrorCode, message: str | None) -> dict[str, object]:
    return {"throttle_time": 0, "entries": [
        _entry([(e.entity_type, e.entity_name) for e in x.entity], code, message) for x in req.entries]}


async def _resolvable(req: AlterClientQuotasRequest) -> set[str]:
    """The ip names of ``req`` that are no address literal but resolve as host names."""
    names = {e.entity_name for x in req.entries for e in x.entity
             if e.entity_type == IP and e.entity_name and not client_quotas.is_ip_literal(e.entity_name)}
    ok = set()
    for name in names:
        with trio.move_on_after(RESOLVE_S):
            try:
                await trio.socket.getaddrinfo(name, None)
                ok.add(name)
            except (OSError, socket.gaierror, UnicodeError):
                pass
    return ok


def _plan(req: AlterClientQuotasRequest, resolvable: set[str],
          current: dict[Entity, dict[str, float]]) -> tuple[list[dict[str, object]], dict[Entity, dict[str, float]]]:
    """(the response entries, the entities' new quotas) of the request's entries."""
    parsed: list[tuple[list[tuple[str, str | None]], Entity | Refusal, list[Op]]] = []
    counts: dict[Entity, int] = {}
    for x in req.entries:
        pairs = [(e.entity_type, e.entity_name) for e in x.entity]
        entity = client_quotas.parse_entity(pairs, resolvable.__contains__)
        if not isinstance(entity, Refusal):
            counts[entity] = counts.get(entity, 0) + 1
        parsed.append((pairs, entity, [Op(o.key, float(o.value), o.remove) for o in x.ops]))
    out: list[dict[str, object]] = []
    changed: dict[Entity, dict[str, float]] = {}
    answered: set[Entity] = set()
    for pairs, entity, ops in parsed:
        if isinstance(entity, Refusal):
            out.append(_entry(pairs, ErrorCode[entity.error], entity.message))
            continue
        if entity in answered:
            continue
        answered.add(entity)
        if counts[entity] > 1:  # Apache answers an entity given twice once, refused
            out.append(_entry(entity, ErrorCode.invalid_request,
                              f"Ignoring duplicate entity {client_quotas.entity_text(entity)}"))
            continue
        new = client_quotas.alter_entry(current.get(entity, {}), entity, ops)
        if isinstance(new, Refusal):
            out.append(_entry(entity, ErrorCode[new.error], new.message))
            continue
        out.append(_entry(entity, ErrorCode.none, None))
        changed[entity] = new
    return out, changed


async def handle(ctx: Context, req: AlterClientQuotasRequest) -> dict[str, object] | ResponsePayload:
    broker = ctx.broker
    if not authorize(ctx, AclOp.ALTER_CONFIGS, CLUSTER):
        return _all(req, ErrorCode.cluster_authorization_failed, None)
    fwd = await _forward.to_controller_or(ctx, req, TIMEOUT_S, lambda why: _all(req, ErrorCode.not_controller, why))
    if fwd is not None:
        await broker.run_io(broker.client_quotas.reload, True)
        return fwd
    resolvable = await _resolvable(req)
    store = broker.client_quotas
    async with store.lock:
        try:
            current = await broker.run_io(store.file.read)
        except (CorruptState, OSError) as exc:
            log.error("client_quotas_unreadable", error=str(exc))
            return _all(req, ErrorCode.kafka_storage_error, f"client quota file unreadable: {exc}")
        entries, changed = _plan(req, resolvable, current.entries)
        changed = {e: q for e, q in changed.items() if q != current.entries.get(e, {})}
        if req.validate_only or not changed:
            return {"throttle_time": 0, "entries": entries}
        version = current.with_entries(changed)
        try:
            await broker.run_io(store.file.write, version)
        except OSError as exc:
            log.error("client_quotas_write_failed", error=str(exc))
            return _all(req, ErrorCode.kafka_storage_error, f"client quota file not written: {exc.strerror}")
        store.apply(version)
    log.info("client_quotas_altered", version=version.version, entities=len(changed), principal=ctx.principal)
    return {"throttle_time": 0, "entries": entries}
