"""AlterUserScramCredentials (51): upsert (salt and salted password computed by the
client, as Apache's admin client does) and delete users' SCRAM credentials.

The credentials file has one writer, the controller: another broker forwards the request
to it (``_forward``) and answers NOT_CONTROLLER per user when no live controller answers.
The controller reads the file afresh, applies Apache's rules (``domain.scram_users``),
writes it (tmp + fsync + rename) and takes the result as its own copy; the other brokers
see it within a second (``tasks.credentials``). A corrupt file is not overwritten.

With the authoriser on it needs ALTER on the cluster (Apache's KafkaApis), checked before
forwarding; without it every user answers CLUSTER_AUTHORIZATION_FAILED (else any
authenticated user could reset a super user's password and become it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
from kio.schema.errors import ErrorCode

from kaas.domain import scram_users
from kaas.errors import CorruptState
from kaas.handlers import _forward
from kaas.handlers._auth import CLUSTER, Op, authorize
from kaas.storage import credentials

if TYPE_CHECKING:
    from kio.schema.alter_user_scram_credentials.v0 import AlterUserScramCredentialsRequest
    from kio.static.protocol import ResponsePayload

    from kaas.handlers.context import Context

API_KEY = 51
VERSIONS = (0, 0)
TIMEOUT_S = 30.0  # the request carries no timeout of its own

log = structlog.get_logger()


def _all_users(req: AlterUserScramCredentialsRequest) -> list[str]:
    return list(dict.fromkeys([*(d.name for d in req.deletions), *(u.name for u in req.upsertions)]))


def _every_user(req: AlterUserScramCredentialsRequest, code: ErrorCode, message: str) -> dict[str, object]:
    return {"throttle_time": 0, "results": [
        {"user": u, "error_code": code, "error_message": message} for u in _all_users(req)]}


async def handle(ctx: Context, req: AlterUserScramCredentialsRequest) -> dict[str, object] | ResponsePayload:
    if not authorize(ctx, Op.ALTER, CLUSTER):
        return _every_user(req, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    fwd = await _forward.to_controller_or(ctx, req, TIMEOUT_S,
                                          lambda why: _every_user(req, ErrorCode.not_controller, why))
    if fwd is not None:
        return fwd
    async with ctx.broker.credentials_lock:  # one read-alter-write at a time in this broker
        return await _alter(ctx, req)


async def _alter(ctx: Context, req: AlterUserScramCredentialsRequest) -> dict[str, object]:
    store = ctx.broker.credentials
    try:
        users = await ctx.broker.run_io(credentials.read, store.path)
    except CorruptState as exc:
        log.error("scram_credentials_corrupt", error=str(exc))
        return _every_user(req, ErrorCode.unknown_server_error, "the SCRAM credentials file is corrupt")
    after, results = scram_users.alter(
        users,
        [scram_users.Deletion(d.name, d.mechanism) for d in req.deletions],
        [scram_users.Upsertion(u.name, u.mechanism, u.iterations, u.salt, u.salted_password)
         for u in req.upsertions])
    if after != users:
        try:
            await ctx.broker.run_io(store.replace, after)
        except OSError as exc:
            log.error("scram_credentials_write_failed", error=str(exc))
            return _every_user(req, ErrorCode.kafka_storage_error, f"credentials not written: {exc.strerror}")
        log.info("scram_credentials_altered", users=[r.user for r in results if r.error_code == ErrorCode.none])
    return {"throttle_time": 0, "results": [
        {"user": r.user, "error_code": r.error_code, "error_message": r.error_message} for r in results]}
