"""The one authorisation helper the handlers call (issue 21): Apache's operation table is
spelled out in each handler as ``authorize(ctx, op, resource_type, name)``; the decision is
``kaas.domain.acl.Authorizer`` over the broker's current ACLs (``broker.acls``). With the
authoriser off (the default) everything is allowed, as before.

The principal is the session's (``ctx.principal``), the host the client's address. Peer
brokers are not trusted by their client id: until they authenticate (the SASL/TLS
listeners) they are principals like any other, and get through as super users or by ACL.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, TypeVar, cast

from kaas.domain.acl import CLUSTER_NAME, Authorizer, Operation, ResourceType
from kaas.wire.build import shallow_dict

if TYPE_CHECKING:
    from collections.abc import Iterable

    from _typeshed import DataclassInstance
    from kio.static.protocol import ResponsePayload

    from kaas.handlers.context import Context

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TXN_ID = ResourceType.TRANSACTIONAL_ID
Op = Operation

E = TypeVar("E", bound="DataclassInstance")

# the ``*_authorized_operations`` value of a request that did not ask (Apache: INT32_MIN)
OPS_NOT_ASKED = -2147483648

_OPEN = Authorizer(allow_if_no_acl=True)  # what the authoriser off allows: everything


def enabled(ctx: Context) -> bool:
    return ctx.broker.acls.enabled


def authorize(ctx: Context, op: Operation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> bool:
    """Whether the request's principal may do ``op`` on the resource (always, with the
    authoriser off). ``name`` defaults to the cluster's."""
    acls = ctx.broker.acls
    if not acls.enabled:
        return True
    return acls.authorizer.authorize(ctx.principal, ctx.session.peer_host, op, resource_type, name)


def authorize_any(ctx: Context, op: Operation, resource_type: ResourceType) -> bool:
    """Whether the principal may do ``op`` on some resource of the type (Apache's
    ``authorizeByResourceType``)."""
    acls = ctx.broker.acls
    if not acls.enabled:
        return True
    return acls.authorizer.authorize_any(ctx.principal, ctx.session.peer_host, op, resource_type)


def authorized_operations(ctx: Context, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """The bit field of operations the principal may do on the resource (every operation
    of the type with the authoriser off)."""
    acls = ctx.broker.acls
    authorizer = acls.authorizer if acls.enabled else _OPEN
    return authorizer.authorized_operations(ctx.principal, ctx.session.peer_host, resource_type, name)


def cluster_operations(ctx: Context) -> int:
    """``cluster_authorized_operations`` as Apache answers it (Metadata, DescribeCluster):
    the operations on the cluster for a principal that may DESCRIBE it, else 0."""
    if not authorize(ctx, Operation.DESCRIBE, CLUSTER):
        return 0
    return authorized_operations(ctx, CLUSTER)


def without(req: E, field: str, kept: tuple[object, ...]) -> E:
    """``req`` with its list ``field`` cut to ``kept``, entries of its own: the part of a
    request left to handle or forward once the refused part is answered (``merge``)."""
    return dataclasses.replace(req, **{field: kept})


def merge(result: dict[str, object] | ResponsePayload, field: str,
          extra: list[dict[str, object]]) -> dict[str, object] | ResponsePayload:
    """``result`` (a response dict, or a kio response a controller sent back) with the
    answers ``extra`` appended to its list ``field``: the answers for the part of a request
    that was refused before the rest was handled or forwarded. Clients match those answers
    by name, not by position."""
    if not extra:
        return result
    if not isinstance(result, dict):  # dispatch builds the dict into the request's version
        result = shallow_dict(result)
    answered = cast("Iterable[object]", result[field])  # the response's list: dicts, or kio entities
    return {**result, field: [*answered, *extra]}
