"""UpdateFeatures (57): change the finalized feature levels (KIP-584): upgrade, safe and
unsafe downgrade, validate-only. Needs ALTER on the cluster. The controller writes
``__cluster/features.json`` (its one writer); another broker forwards the request to it
(``_forward``) and re-reads the file at once after a success, so that its own ApiVersions
shows the new levels. Validation is ``domain.features.plan``: the first bad update refuses
the whole request with INVALID_UPDATE_VERSION and Apache's message.

v0's AllowDowngrade is not read, as Apache 4.4's controller does not read it: every v0
update is an upgrade."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import structlog
from kio.schema.errors import ErrorCode
from kio.schema.update_features import v0, v1, v2

from kaas.domain import features
from kaas.domain.features import Refusal, Update, UpgradeType
from kaas.errors import CorruptState
from kaas.handlers import _forward
from kaas.handlers._auth import CLUSTER, Op, authorize

if TYPE_CHECKING:
    from kio.static.protocol import ResponsePayload

    from kaas.handlers.context import Context

    UpdateFeaturesRequest: TypeAlias = v0.UpdateFeaturesRequest | v1.UpdateFeaturesRequest | v2.UpdateFeaturesRequest

API_KEY = 57
VERSIONS = (0, 2)
_RESPONSES = (v0.UpdateFeaturesResponse, v1.UpdateFeaturesResponse, v2.UpdateFeaturesResponse)  # the controller's

log = structlog.get_logger()


def _answer(req: UpdateFeaturesRequest, code: ErrorCode, message: str | None) -> dict[str, object]:
    """The response: v0-v1 list each update (Apache's "NONE" message) when all succeeded."""
    results = [{"feature": u.feature, "error_code": ErrorCode.none, "error_message": "NONE"}
               for u in req.feature_updates] if code == ErrorCode.none else []
    return {"throttle_time": 0, "error_code": code, "error_message": message, "results": results}


def _updates(req: UpdateFeaturesRequest) -> list[Update]:
    if isinstance(req, v0.UpdateFeaturesRequest):
        return [Update(u.feature, u.max_version_level, UpgradeType.UPGRADE) for u in req.feature_updates]
    return [Update(u.feature, u.max_version_level, u.upgrade_type) for u in req.feature_updates]


async def handle(ctx: Context, req: UpdateFeaturesRequest) -> dict[str, object] | ResponsePayload:
    broker = ctx.broker
    if not authorize(ctx, Op.ALTER, CLUSTER):
        return _answer(req, ErrorCode.cluster_authorization_failed, None)
    fwd = await _forward.to_controller_or(ctx, req, req.timeout.total_seconds(),
                                          lambda why: _answer(req, ErrorCode.not_controller, why))
    if fwd is not None:
        if isinstance(fwd, _RESPONSES) and fwd.error_code == ErrorCode.none:  # (not the NOT_CONTROLLER dict)
            await broker.run_io(broker.features.reload, True)
        return fwd
    validate_only = not isinstance(req, v0.UpdateFeaturesRequest) and req.validate_only
    store = broker.features
    async with store.lock:
        try:
            current = await broker.run_io(store.file.read)
        except (CorruptState, OSError) as exc:
            log.error("features_unreadable", error=str(exc))
            return _answer(req, ErrorCode.kafka_storage_error, f"features file unreadable: {exc}")
        levels = features.plan(current.levels, _updates(req), broker.id)
        if isinstance(levels, Refusal):
            return _answer(req, ErrorCode[levels.error], levels.message)
        if validate_only or levels == current.levels:
            return _answer(req, ErrorCode.none, None)
        version = current.with_levels(levels)
        try:
            await broker.run_io(store.file.write, version)
        except OSError as exc:
            log.error("features_write_failed", error=str(exc))
            return _answer(req, ErrorCode.kafka_storage_error, f"features file not written: {exc.strerror}")
        store.apply(version)
    log.info("features_updated", epoch=version.epoch, levels=levels, principal=ctx.principal)
    return _answer(req, ErrorCode.none, None)
