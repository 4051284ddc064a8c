"""DescribeUserScramCredentials (50): the mechanisms and iterations of users' SCRAM
credentials (never a key), from this broker's copy of the credentials file. Every user
when the request names none; RESOURCE_NOT_FOUND for an unknown user, DUPLICATE_RESOURCE
for a user named twice (Apache). A corrupt file is a request-level error, and so, with the
authoriser on, is a principal without DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED,
as Apache's KafkaApis)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from kio.schema.errors import ErrorCode

from kaas.domain import scram_users
from kaas.errors import CorruptState
from kaas.handlers._auth import CLUSTER, Op, authorize

if TYPE_CHECKING:
    from kio.schema.describe_user_scram_credentials.v0 import DescribeUserScramCredentialsRequest

    from kaas.handlers.context import Context

API_KEY = 50
VERSIONS = (0, 0)

log = structlog.get_logger()


async def handle(ctx: Context, req: DescribeUserScramCredentialsRequest) -> dict[str, object]:
    if not authorize(ctx, Op.DESCRIBE, CLUSTER):
        # Apache's error response: one result per user asked, its name left empty
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
                "results": [{"user": "", "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
                             "credential_infos": []} for _ in req.users or ()]}
    try:
        users = ctx.broker.credentials.snapshot()
    except CorruptState as exc:
        log.error("scram_credentials_corrupt", error=str(exc))
        return {"throttle_time": 0, "error_code": ErrorCode.unknown_server_error,
                "error_message": "the SCRAM credentials file is corrupt", "results": ()}
    names = None if req.users is None else [u.name for u in req.users]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "results": [
        {"user": d.user, "error_code": d.error_code, "error_message": d.error_message,
         "credential_infos": [{"mechanism": m, "iterations": i} for m, i in d.credentials]}
        for d in scram_users.describe(users, names)]}
