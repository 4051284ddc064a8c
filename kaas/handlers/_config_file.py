"""The controller's read-alter-write of a config file it is the one writer of (the dynamic
broker configs, the group configs): read the file afresh, alter one resource's configs,
validate the result whole, write it (unless ``validate_only``) and apply it at once; the
other brokers read it within a poll. A file that cannot be read is never overwritten."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas.domain.broker_configs import Refusal
from kaas.errors import CorruptState

if TYPE_CHECKING:
    from kaas.handlers.context import Context

log = structlog.get_logger()


class Versioned(Protocol):
    """A version of a config file: its number counts the writes."""

    @property
    def version(self) -> int: ...


F = TypeVar("F", bound=Versioned)

Compute = Callable[[dict[str, str]], tuple[dict[str, str], str | None]]
"""``compute(old) -> (new, error)``: a resource's configs as a request alters them."""


async def alter_file(ctx: Context, res: dict[str, object], *, what: str, lock: trio.Lock,
                     read: Callable[[], F], write: Callable[[F], None], apply: Callable[[F], object],
                     configs_of: Callable[[F], dict[str, str]], updated: Callable[[F, dict[str, str]], F],
                     compute: Compute, check: Callable[[dict[str, str], str | None], Refusal | None],
                     validate_only: bool, **about: object) -> dict[str, object]:
    """Alter one resource of the config file ``what`` (``"broker config"``, ``"group
    config"``); ``res`` is the resource's answer, filled in and returned.

    Args:
        read, write: the file's (blocking: run through ``broker.run_io``).
        apply: make a written version the one in force on this broker.
        configs_of: the resource's configs in a version of the file.
        updated: a version with the resource's new configs (and the next version number).
        check: the refusal of the new configs (or of ``compute``'s error), else None.
        about: what the log line says of the resource.
    """
    broker = ctx.broker
    async with lock:
        try:
            current = await broker.run_io(read)
        except (CorruptState, OSError) as exc:
            log.error(f"{what.replace(' ', '_')}s_unreadable", error=str(exc), **about)
            res["error_code"] = ErrorCode.kafka_storage_error
            res["error_message"] = f"{what} file unreadable: {exc}"
            return res
        new, err = compute(configs_of(current))
        refusal = check(new, err)
        if refusal is not None:
            res["error_code"] = ErrorCode[refusal.error]
            res["error_message"] = refusal.message
            return res
        if validate_only:
            return res
        version = updated(current, new)
        try:
            await broker.run_io(write, version)
        except OSError as exc:
            log.error(f"{what.replace(' ', '_')}s_write_failed", error=str(exc), **about)
            res["error_code"] = ErrorCode.kafka_storage_error
            res["error_message"] = f"{what} file not written: {exc.strerror}"
            return res
        log.info(f"{what.replace(' ', '_')}s_altered", version=version.version,
                 configs=sorted(new), **about)
        apply(version)
    return res
