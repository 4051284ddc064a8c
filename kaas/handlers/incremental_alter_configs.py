"""IncrementalAlterConfigs (44): SET, DELETE, APPEND, SUBTRACT on topic configs, a BROKER
resource's dynamic configs and a GROUP resource's configs (SET and DELETE only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias

from kaas import configs
from kaas.handlers import _forward, _group_configs
from kaas.handlers._auth import merge
from kaas.handlers._config_file import Compute
from kaas.handlers.alter_configs import alter, split

if TYPE_CHECKING:
    from kio.schema.incremental_alter_configs import v0, v1
    from kio.static.protocol import ResponsePayload

    from kaas.handlers.context import Context
    from kaas.settings import Settings

    IncrementalAlterConfigsRequest: TypeAlias = v0.IncrementalAlterConfigsRequest | v1.IncrementalAlterConfigsRequest

API_KEY = 44
VERSIONS = (0, 1)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _apply(ops: Sequence[tuple[str, int, str | None]], settings: Settings) -> Compute:
    def compute(old: dict[str, str]) -> tuple[dict[str, str], str | None]:
        new = dict(old)
        for name, op, value in ops:
            if op == SET:
                new[name] = value or ""
            elif op == DELETE:
                new.pop(name, None)
            elif op in (APPEND, SUBTRACT):
                # Like Apache, a list without an override starts from its default value.
                current = new.get(name)
                if current is None and name in configs.TOPIC_CONFIGS:
                    current = configs.default(settings, name)
                items = [x for x in (current or "").split(",") if x]
                for v in (value or "").split(","):
                    if op == APPEND and v not in items:
                        items.append(v)
                    elif op == SUBTRACT and v in items:
                        items.remove(v)
                new[name] = ",".join(items)
            else:
                return old, f"unknown config operation {op}"
        return new, None
    return compute


async def handle(ctx: Context, req: IncrementalAlterConfigsRequest) -> dict[str, object] | ResponsePayload:
    kept, denied = split(ctx, req)
    if kept is None:
        return {"throttle_time": 0, "responses": denied}
    return merge(await _alter_all(ctx, kept), "responses", denied)


async def _alter_all(ctx: Context, req: IncrementalAlterConfigsRequest) -> dict[str, object] | ResponsePayload:
    fwd = await _forward.configs_to_controller(ctx, req)
    if fwd is not None:
        return fwd
    out: list[dict[str, object]] = []
    for r in req.resources:
        ops = [(c.name, c.config_operation, c.value) for c in r.configs]
        compute = (_group_configs.incremental(ops) if r.resource_type == _group_configs.GROUP
                   else _apply(ops, ctx.broker.settings))
        out.append(await alter(ctx, r.resource_type, r.resource_name, compute, req.validate_only))
    return {"throttle_time": 0, "responses": out}
