"""GROUP config resources (type 32, KIP-848/KIP-932) in DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs, as Apache 4.2 answers them.

DescribeConfigs is answered by any broker from its copy of ``__cluster/group_configs.json``
(``broker.group_configs``, polled); an alteration runs on the controller, the file's one
writer (``_forward`` sends it there): read the file afresh, alter the group's configs,
validate them whole against the controller's ``group.*`` settings
(``domain.groups.configs.validate``), write (unless ``validate_only``) and apply at once.
A group needs not exist: its configs are kept apart from the group, as in Apache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kaas import broker_configs
from kaas.domain.groups import configs as group_configs
from kaas.errors import KaasError
from kaas.handlers._config_file import Compute, alter_file

if TYPE_CHECKING:
    from kaas.handlers.context import Context
    from kaas.storage.group_configs import GroupConfigs

GROUP = 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def describe(ctx: Context, name: str) -> tuple[ErrorCode, str | None, list[broker_configs.ConfigEntry]]:
    """(error, message, entries) of DescribeConfigs on the GROUP resource ``name``."""
    if not name:
        return ErrorCode.invalid_request, "Group name must not be empty", []
    store = ctx.broker.group_configs
    if store.error is not None:  # the file as it is now: report it, do not answer from an old copy
        return ErrorCode.kafka_storage_error, f"group config file unreadable: {store.error}", []
    try:
        overrides = store.overrides(name)
    except KaasError as exc:
        return exc.code, exc.message, []
    return ErrorCode.none, None, broker_configs.group_entries(ctx.broker.dynamic.static, overrides)


def incremental(ops: Sequence[tuple[str, int, str | None]]) -> Compute:
    """IncrementalAlterConfigs' ``compute`` for a GROUP resource: SET and DELETE; APPEND
    and SUBTRACT are refused as Apache refuses them on a config that is not a LIST (no
    group config is one)."""
    def compute(old: dict[str, str]) -> tuple[dict[str, str], str | None]:
        new = dict(old)
        for name, op, value in ops:
            if op == SET and value is None:
                return old, f"Null value not supported for group configs: {name}"
            if op == SET and value is not None:
                new[name] = value
            elif op == DELETE:
                new.pop(name, None)
            elif op in _OP_NAMES:
                return old, f"Can't {_OP_NAMES[op]} to key {name} because its type is not LIST."
            else:
                return old, f"Unknown config operation {op} for key {name}"
        return new, None
    return compute


async def alter(ctx: Context, res: dict[str, object], name: str, compute: Compute,
                validate_only: bool) -> dict[str, object]:
    """An alteration of the GROUP resource ``name`` on the controller; ``res`` is its answer."""
    broker = ctx.broker
    if not name:
        res["error_code"] = ErrorCode.invalid_request
        res["error_message"] = "Default group resources are not allowed."
        return res
    store = broker.group_configs

    def check(new: dict[str, str], err: str | None) -> group_configs.Refusal | None:
        if err is not None:
            return group_configs.Refusal("invalid_config", err)
        return group_configs.validate(new, broker.settings)

    def updated(f: GroupConfigs, new: dict[str, str]) -> GroupConfigs:
        return f.with_group(name, {k: group_configs.normalized(k, v) for k, v in new.items()})

    return await alter_file(ctx, res, what="group config", lock=store.lock, read=store.file.read,
                            write=store.file.write, apply=store.apply, configs_of=lambda f: f.of(name),
                            updated=updated, compute=compute, check=check, validate_only=validate_only, group=name)
