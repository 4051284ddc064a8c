"""Named failpoints (design section 9), armed at runtime for one broker through
``DATA/run/failpoints-<broker id>.json``::

    {"endtxn.after_prepare": {"action": "crash"},
     "append.after_write_before_fsync": {"action": "pause", "ms": 2000},
     "marker.after_apply_before_delete": {"action": "error", "count": 1},
     "marker.before_append": {"action": "drop", "match": {"commit": false}}}

Actions: ``crash`` (``os._exit(137)``, as abrupt as SIGKILL), ``pause`` (sleep N ms; in trio
code use ``await hit_async``), ``error`` (raise OSError, like a failing disk; ``"errno":
"ENOSPC"`` picks the error, EIO by default), ``short`` (at the I/O points of
``storage.fs``: write the first ``fraction`` of the bytes, default 0.5, then fail with
ENOSPC, as a write that runs out of space does), ``drop`` (``hit`` returns True and the
caller skips the operation as if it had succeeded: a deliberately broken broker, for
showing that the checkers catch it; only points whose caller honours it, see
``DROPPABLE``). ``count`` limits how many hits fire (default: unlimited); ``match`` fires
only when the point's context (keyword arguments of ``hit``) has those values; ``path``
fires only when the context's ``path`` contains that string (the I/O points pass the file
they touch, so ``{"state.write": {"action": "error", "errno": "ENOSPC", "path": "slot-"}}``
fails the slot files' writes alone); ``once`` (a token) fires on one broker of the cluster
only, the first to claim ``once-<token>`` in the run directory (a failpoint armed on every
broker so that it is sure to fire, and that must not fire twice). A crash failpoint is
consumed by the
process that dies, so the restarted broker does not crash again: the file is renamed to
``.fired`` before exiting.

Zero cost when nothing is armed: ``hit`` is one dict lookup on an empty dict.
"""

from __future__ import annotations

import errno as _errno
import json
import os
import time
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger()

Spec = dict[str, Any]
"""One failpoint's JSON object (``action``, ``count``, ``match``, ``path``, ``ms``, ``fraction``,
``errno``): test-time configuration, read as written."""

ARMED: dict[str, Spec] = {}
"""The armed failpoints by name, changed in place only: hot I/O paths test ``if
failpoints.ARMED:`` before calling in (a call costs more than the I/O wrapper itself)."""
_path: Path | None = None
_claimed: set[str] = set()  # the ``once`` tokens this process claimed
_stamp: tuple[int, int] | None = None

NAMES = (
    "endtxn.after_prepare",
    "endtxn.after_local_markers",
    "endtxn.after_enqueue",
    "endtxn.before_complete",
    "marker.after_apply_before_delete",
    "append.after_write_before_fsync",
    "snapshot.before_write",
    "slot.before_write",
    # after a slot file's write and before any request whose change it carried is
    # answered (context: entries, the number of transactional ids it carried)
    "slot.after_write",
    "takeover.after_manifest",
    "marker.before_append",
    "marker.before_send",
    # I/O points of storage.fs (context: path): every segment append, every fsync of a
    # segment, every whole-file state write (tmp + fsync + rename) and append-only log
    "append.write",
    "append.fsync",
    "state.write",
    "state.fsync",
    "state.rename",
    # the log cleaner's pass: copies written, commit file written, segments swapped
    "cleaner.before_copy",
    "cleaner.after_commit_file",
    "cleaner.after_swap",
    # the supervisor's own files (context: path): pid files, broker logs, the run directory
    "supervisor.write",
    # a ShareGroupHeartbeat handled, its answer not yet sent (context: member_epoch, the
    # request's; moved, whether the answer hands out a new epoch): ``drop`` closes the
    # connection instead, an answer lost on the way
    "share_heartbeat.before_response",
    # a Produce with transactional batches, held before anything of it is checked or
    # appended (context: topic, partition, transactional_id): a request delayed on its way
    "produce.before_txn_check",
)
DROPPABLE = ("marker.before_append", "marker.before_send", "share_heartbeat.before_response")


def configure(run_dir: Path, broker_id: int | str) -> None:
    global _path
    _path = Path(run_dir) / f"failpoints-{broker_id}.json"
    reload()


def reload() -> None:
    """Re-read the failpoint file if it changed (called from a poll loop)."""
    global _stamp
    if _path is None:
        return
    try:
        st = os.stat(_path)
    except FileNotFoundError:
        if ARMED:
            log.info("failpoints_cleared")
        ARMED.clear()
        _stamp = None
        return
    stamp = (st.st_mtime_ns, st.st_size)
    if stamp == _stamp:
        return
    _stamp = stamp
    try:
        obj = json.loads(_path.read_text())
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        armed = {str(k): dict(v) for k, v in obj.items()}
        ARMED.clear()
        ARMED.update(armed)
        log.warning("failpoints_armed", names=sorted(ARMED))
    except (OSError, ValueError, TypeError) as exc:
        log.error("failpoints_unreadable", path=str(_path), error=str(exc))


def _take(name: str, context: dict[str, object]) -> Spec | None:
    spec = ARMED.get(name)
    if spec is None:
        return None
    match = spec.get("match")
    if match and any(context.get(k) != v for k, v in match.items()):
        return None
    part = spec.get("path")
    if part is not None and part not in str(context.get("path", "")):
        return None
    count = spec.get("count")
    if count is not None and count <= 0:
        return None
    once = spec.get("once")
    if once is not None and not _claim(str(once)):
        spec["count"] = 0  # another broker fired it: never again here
        return None
    if count is not None:
        spec["count"] = count - 1
    return spec


def _claim(token: str) -> bool:
    """Create ``once-<token>`` beside the failpoint file, exclusively: True for the one
    broker that created it (the file's one writer; it remembers its claim across reloads),
    False for every other."""
    if _path is None or token in _claimed:
        return True
    try:
        os.close(os.open(_path.parent / f"once-{token}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    except OSError as exc:
        log.error("failpoint_once_unclaimable", token=token, error=str(exc))
        return False
    _claimed.add(token)
    return True


def io_fault(name: str, **context: object) -> float | None:
    """Fire the I/O failpoint ``name`` if armed. Returns the fraction of the bytes to write
    before failing with ENOSPC for a ``short`` action (the caller writes them: torn bytes
    on the file, as a real short write leaves), None otherwise.

    Raises:
        OSError: an ``error`` action.
    """
    if not ARMED:
        return None
    spec = _take(name, context)
    if spec is None:
        return None
    if spec.get("action") == "short":
        log.warning("failpoint_hit", name=name, action="short", path=str(context.get("path", "")))
        return float(spec.get("fraction", 0.5))
    _fire(name, spec)
    if spec.get("action") == "pause":
        time.sleep(spec.get("ms", 1000) / 1000)
    return None


def oserror(code: int | str, what: str) -> OSError:
    """An OSError as the kernel raises it (errno set), for failpoints and fault seams."""
    num = getattr(_errno, code, _errno.EIO) if isinstance(code, str) else int(code)
    return OSError(num, os.strerror(num), what)


def hit(name: str, **context: object) -> bool:
    """Fire the failpoint ``name`` if armed (synchronous code). True: drop the operation."""
    if not ARMED:
        return False
    spec = _take(name, context)
    if spec is None:
        return False
    _fire(name, spec)
    if spec.get("action") == "pause":
        time.sleep(spec.get("ms", 1000) / 1000)
    return spec.get("action") == "drop"


async def hit_async(name: str, **context: object) -> None:
    """Fire the failpoint ``name`` if armed (trio code: a pause does not block the loop)."""
    if not ARMED:
        return
    spec = _take(name, context)
    if spec is None:
        return
    _fire(name, spec)
    if spec.get("action") == "pause":
        import trio

        await trio.sleep(spec.get("ms", 1000) / 1000)


def _fire(name: str, spec: Spec) -> None:
    action = spec.get("action", "crash")
    log.warning("failpoint_hit", name=name, action=action)
    if action == "crash":
        if _path is not None:
            try:
                os.replace(_path, _path.with_suffix(".fired"))
            except OSError:
                pass
        os._exit(137)
    if action == "error":
        raise oserror(spec.get("errno", "EIO"), f"failpoint {name}")


def arm(run_dir: Path, broker_id: int, specs: dict[str, Spec]) -> Path:
    """Write the failpoint file for a broker (tools and tests)."""
    path = Path(run_dir) / f"failpoints-{broker_id}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(specs))
    os.replace(tmp, path)
    return path


def set_in_process(specs: dict[str, Spec]) -> None:
    """Arm ``specs`` in this process at once, replacing what is armed (component tests
    that drive storage directly, many times a second; brokers read their file instead)."""
    armed = {str(k): dict(v) for k, v in specs.items()}
    ARMED.clear()
    ARMED.update(armed)


def disarm(run_dir: Path, broker_id: int) -> None:
    try:
        (Path(run_dir) / f"failpoints-{broker_id}.json").unlink()
    except FileNotFoundError:
        pass
