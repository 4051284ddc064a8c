"""DescribeClientQuotas (48): the client quotas matching a filter (KIP-546): each component
matches an entity type by exact name, by its default entity, or any name; ``strict``
leaves out entities of other types too. Needs DESCRIBE_CONFIGS on the cluster. Any
broker answers from its copy of ``__cluster/client_quotas.json`` (``broker.client_quotas``,
polled, and checked against the file before each describe); the filter is
``domain.client_quotas.describe``."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode

from kaas.domain import client_quotas
from kaas.errors import KaasError
from kaas.handlers._auth import CLUSTER, Op, authorize

if TYPE_CHECKING:
    from kio.schema.describe_client_quotas import v0, v1

    from kaas.handlers.context import Context

    DescribeClientQuotasRequest: TypeAlias = v0.DescribeClientQuotasRequest | v1.DescribeClientQuotasRequest

API_KEY = 48
VERSIONS = (0, 1)


def _error(code: ErrorCode, message: str | None) -> dict[str, object]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "entries": None}


async def handle(ctx: Context, req: DescribeClientQuotasRequest) -> dict[str, object]:
    if not authorize(ctx, Op.DESCRIBE_CONFIGS, CLUSTER):
        return _error(ErrorCode.cluster_authorization_failed, None)
    # the file as it is now (a stat; read again only if it changed): an alteration the
    # controller answered is in every describe after it, wherever the describe lands
    async with ctx.broker.client_quotas.lock:  # not across the controller's own write
        await ctx.broker.run_io(ctx.broker.client_quotas.reload)
    try:
        quotas = ctx.broker.client_quotas.quotas()
    except KaasError as exc:
        return _error(exc.code, exc.message)
    found = client_quotas.describe(quotas.entries, [(c.entity_type, c.match_type, c.match) for c in req.components],
                                   req.strict)
    if isinstance(found, client_quotas.Refusal):
        return _error(ErrorCode[found.error], found.message)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": "",
            "entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                         "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
                        for entity, values in found]}
