"""AlterConfigs (33): replace a topic's config overrides, a BROKER resource's dynamic
configs (KIP-226: a broker id, or ``""`` for the cluster-wide default), or a GROUP
resource's configs (KIP-848/932, ``_group_configs``), as a whole (on the controller:
another broker forwards the request, ``_forward``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, TypeVar

import structlog
from kio.schema.errors import ErrorCode

from kaas import broker_configs, configs
from kaas.domain import replicas
from kaas.handlers import _auth, _forward, _group_configs
from kaas.handlers._auth import Op, authorize, enabled, merge, without
from kaas.handlers._config_file import Compute, alter_file

if TYPE_CHECKING:
    from kio.schema.alter_configs import v0, v1, v2
    from kio.static.protocol import ResponsePayload

    from kaas.handlers._forward import ConfigsRequest
    from kaas.handlers.context import Context

    AlterConfigsRequest: TypeAlias = v0.AlterConfigsRequest | v1.AlterConfigsRequest | v2.AlterConfigsRequest

C = TypeVar("C", bound="ConfigsRequest")

API_KEY = 33
VERSIONS = (0, 2)
TOPIC, BROKER, GROUP = 2, 4, _group_configs.GROUP

log = structlog.get_logger()


async def alter(ctx: Context, resource_type: int, name: str, compute: Compute,
                validate_only: bool) -> dict[str, object]:
    """Shared by AlterConfigs and IncrementalAlterConfigs: ``compute(old) -> (new, error)``."""
    broker = ctx.broker
    res: dict[str, object] = {"error_code": ErrorCode.none, "error_message": None, "resource_type": resource_type,
           "resource_name": name}
    if resource_type == BROKER:
        return await _alter_broker(ctx, res, name, compute, validate_only)
    if resource_type == GROUP:
        return await _group_configs.alter(ctx, res, name, compute, validate_only)
    if resource_type != TOPIC:
        res["error_code"] = ErrorCode.invalid_request
        res["error_message"] = (f"resource type {resource_type} is not supported; only topic, broker and group "
                                "configs can be altered")
        return res
    broker.topics.refresh()
    meta = broker.topics.get(name)
    if meta is None:
        res["error_code"] = ErrorCode.unknown_topic_or_partition
        return res
    new, err = compute(dict(meta.configs))
    if err is None:
        for k, v in new.items():
            err = configs.validate(k, v)
            if err:
                break
    if err is None:
        err = replicas.min_insync_replicas_error(new.get("min.insync.replicas"))
    if err is not None:
        res["error_code"] = ErrorCode.invalid_config
        res["error_message"] = err
        return res
    if not validate_only:
        try:
            await broker.admin.alter_topic_configs(name, new)
        except OSError as exc:  # the topic file could not be written: the configs are unchanged
            log.error("topic_write_failed", topic=name, error=str(exc))
            res["error_code"] = ErrorCode.kafka_storage_error
            res["error_message"] = f"topic file not written: {exc.strerror}"
    return res


def broker_name_error(name: str) -> str | None:
    """Apache's check of a BROKER resource's name: empty (the cluster default) or a
    broker id."""
    if name == "":
        return None
    try:
        bid = int(name)
    except ValueError:
        return "Unable to parse broker name as a base 10 number."
    if bid < 0:
        return "Invalid negative broker ID."
    return None


async def _alter_broker(ctx: Context, res: dict[str, object], name: str, compute: Compute,
                        validate_only: bool) -> dict[str, object]:
    """A BROKER resource on the controller, the one writer of the dynamic broker configs
    (``__cluster/broker_configs.json``): read afresh, alter the resource's layer, validate
    it whole, write it (unless ``validate_only``) and apply it here at once; the other
    brokers read it within a poll (``tasks.broker_configs``)."""
    broker = ctx.broker
    why = broker_name_error(name)
    if why is not None:
        res["error_code"] = ErrorCode.invalid_request
        res["error_message"] = why
        return res
    dyn = broker.dynamic

    def check(new: dict[str, str], err: str | None) -> broker_configs.Refusal | None:
        if err is not None:
            return broker_configs.Refusal("invalid_request", err)
        return broker_configs.validate(new, per_broker=name != "")

    return await alter_file(ctx, res, what="broker config", lock=dyn.lock, read=dyn.file.read, write=dyn.file.write,
                            apply=dyn.apply, configs_of=lambda f: f.layer(name),
                            updated=lambda f, new: f.with_layer(name, new), compute=compute, check=check,
                            validate_only=validate_only, resource=name or "<default>")

def split(ctx: Context, req: C) -> tuple[C | None, list[dict[str, object]]]:
    """ALTER_CONFIGS on each topic (TOPIC_AUTHORIZATION_FAILED), on each group for a group
    resource (GROUP_AUTHORIZATION_FAILED) or on the cluster for a broker resource
    (CLUSTER_AUTHORIZATION_FAILED), checked before forwarding (the controller checks the
    forwarding broker again). (The request with only the allowed
    resources, None when none is left; the answers for the others.)"""
    if not enabled(ctx):
        return req, []
    keep: list[object] = []
    denied: list[dict[str, object]] = []
    for r in req.resources:
        if r.resource_type == TOPIC and not authorize(ctx, Op.ALTER_CONFIGS, _auth.TOPIC, r.resource_name):
            code = ErrorCode.topic_authorization_failed
        elif r.resource_type == BROKER and not authorize(ctx, Op.ALTER_CONFIGS, _auth.CLUSTER):
            code = ErrorCode.cluster_authorization_failed
        elif r.resource_type == GROUP and not authorize(ctx, Op.ALTER_CONFIGS, _auth.GROUP, r.resource_name):
            code = ErrorCode.group_authorization_failed
        else:
            keep.append(r)
            continue
        denied.append({"error_code": code, "error_message": None, "resource_type": r.resource_type,
                       "resource_name": r.resource_name})
    if not denied:
        return req, []
    return (without(req, "resources", tuple(keep)) if keep else None), denied


def _replace_all(entries: dict[str, str]) -> Compute:
    """AlterConfigs' ``compute``: the request's entries replace the resource's configs."""
    return lambda _old: (entries, None)


async def handle(ctx: Context, req: AlterConfigsRequest) -> dict[str, object] | ResponsePayload:
    kept, denied = split(ctx, req)
    if kept is None:
        return {"throttle_time": 0, "responses": denied}
    return merge(await _alter_all(ctx, kept), "responses", denied)


async def _alter_all(ctx: Context, req: AlterConfigsRequest) -> dict[str, object] | ResponsePayload:
    fwd = await _forward.configs_to_controller(ctx, req)
    if fwd is not None:
        return fwd
    out: list[dict[str, object]] = []
    for r in req.resources:
        entries: dict[str, str] = {c.name: c.value for c in r.configs if c.value is not None}
        out.append(await alter(ctx, r.resource_type, r.resource_name, _replace_all(entries), req.validate_only))
    return {"throttle_time": 0, "responses": out}
