"""FindCoordinator (10): the broker coordinating a group (key type 0) or a transactional
id (key type 1), placed by FNV-1a (design section 4), and, from v6, a share partition's
state (key type 2, ``group:topicId:partition``, KIP-932).

v4+ asks for several keys of one type at once (KIP-699) and is answered per key. kaas
keeps a share partition's state with the partition's leader (``storage.share_state``), so
the leader is the coordinator of a share key; as in Apache, that key type is for brokers
(CLUSTER_ACTION on the cluster) and v6+ only. v5 adds no semantics kaas uses (KIP-890's
TRANSACTION_ABORTABLE, which FindCoordinator never answers)."""

from __future__ import annotations

import base64
import binascii
import uuid
from typing import TYPE_CHECKING, TypeAlias

from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator import v0, v1, v2, v3, v4, v5, v6

from kaas.handlers import _auth
from kaas.handlers._auth import Op, authorize

if TYPE_CHECKING:
    from kaas.broker import Broker
    from kaas.handlers.context import Context

    FindCoordinatorRequest: TypeAlias = (v0.FindCoordinatorRequest | v1.FindCoordinatorRequest
                                         | v2.FindCoordinatorRequest | v3.FindCoordinatorRequest
                                         | v4.FindCoordinatorRequest | v5.FindCoordinatorRequest
                                         | v6.FindCoordinatorRequest)

API_KEY = 10
VERSIONS = (0, 6)
GROUP, TRANSACTION, SHARE = 0, 1, 2
SHARE_FROM = 6  # the share coordinator key type (KIP-932)
_BATCHED = (v4.FindCoordinatorRequest, v5.FindCoordinatorRequest, v6.FindCoordinatorRequest)  # KIP-699: v4+
_NONE: dict[str, object] = {"node_id": -1, "host": "", "port": -1}


def share_key(key: str) -> tuple[str, uuid.UUID, int] | None:
    """``group:topicId:partition`` split (the group id may hold colons), or None when the
    key does not parse."""
    group, _, rest = key.rpartition(":")
    group, _, topic_id = group.rpartition(":")
    try:
        parsed = uuid.UUID(topic_id) if len(topic_id) != 22 else _base64_uuid(topic_id)
        partition = int(rest)
    except ValueError:
        return None
    if not group or partition < 0:
        return None
    return group, parsed, partition


def _base64_uuid(text: str) -> uuid.UUID:
    """A topic id as Apache's ``Uuid.toString`` writes it (URL-safe base64, no padding)."""
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (ValueError, binascii.Error) as exc:
        raise ValueError(text) from exc
    if len(raw) != 16:
        raise ValueError(text)
    return uuid.UUID(bytes=raw)


def _owner(broker: Broker, key: str, key_type: int) -> int | None | ErrorCode:
    if key_type == GROUP:
        return broker.group_owner(key)
    if key_type == TRANSACTION:
        return broker.txn_owner(key)
    parsed = share_key(key)
    if parsed is None:
        return ErrorCode.invalid_request
    _group, topic_id, partition = parsed
    name = next((n for n, m in broker.topics.topics.items() if m.topic_id == topic_id), None)
    if name is None:
        return None
    leader, _epoch = broker.leader(name, partition)
    return leader if leader >= 0 else None


def locate(broker: Broker, key: str, key_type: int, listener: str | None = None) -> dict[str, object]:
    if key_type not in (GROUP, TRANSACTION, SHARE):
        return {"error_code": ErrorCode.invalid_request, "error_message": f"key type {key_type}", **_NONE}
    owner = _owner(broker, key, key_type)
    if isinstance(owner, ErrorCode):
        return {"error_code": owner, "error_message": f"malformed share coordinator key {key!r}", **_NONE}
    info = broker.broker_info(owner, listener) if owner is not None else None
    if owner is None or info is None or (owner != broker.id and broker.cluster.is_suspected(owner)):
        # none, or one whose process seems to have just exited: the client asks again
        # shortly and meets the new owner once its death is confirmed
        return {"error_code": ErrorCode.coordinator_not_available, "error_message": None, **_NONE}
    return {"error_code": ErrorCode.none, "error_message": None, "node_id": info.node_id,
            "host": info.host, "port": info.port}


def _one(ctx: Context, key: str, key_type: int) -> dict[str, object]:
    if key_type == GROUP and not authorize(ctx, Op.DESCRIBE, _auth.GROUP, key):
        return {"error_code": ErrorCode.group_authorization_failed, "error_message": None, **_NONE}
    if key_type == TRANSACTION and not authorize(ctx, Op.DESCRIBE, _auth.TXN_ID, key):
        return {"error_code": ErrorCode.transactional_id_authorization_failed, "error_message": None, **_NONE}
    if key_type == SHARE and not authorize(ctx, Op.CLUSTER_ACTION, _auth.CLUSTER):
        return {"error_code": ErrorCode.cluster_authorization_failed, "error_message": None, **_NONE}
    return locate(ctx.broker, key, key_type, ctx.session.listener)


async def handle(ctx: Context, req: FindCoordinatorRequest) -> dict[str, object]:
    key_type = GROUP if isinstance(req, v0.FindCoordinatorRequest) else req.key_type
    if key_type == SHARE and ctx.api_version < SHARE_FROM:
        key_type = -1  # (answered INVALID_REQUEST, as an unknown key type)
    if isinstance(req, _BATCHED):
        return {"throttle_time": 0, "coordinators": [{"key": k, **_one(ctx, k, key_type)}
                                                     for k in req.coordinator_keys]}
    return {"throttle_time": 0, **_one(ctx, req.key, key_type)}
