"""The loop that keeps a broker's copy of one shared file current (the ACLs, the dynamic
broker configs): its writer is the controller, every broker reads.

The reader stats the file five times a second and reads it again when it changed, and
reads it once a second whatever the stat says (an NFS client may cache attributes); an
inotify doorbell on its directory, where the data directory is local, wakes the loop at
once. ``reload(force)`` does the reading: it reads when the file changed, or ``force``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from kaas import dirwatch

__all__ = ["FORCE_S", "POLL_S", "keep_current"]

POLL_S = 0.2  # stat period
FORCE_S = 1.0  # a read at least this often, whatever stat says


async def keep_current(reload: Callable[[bool], Awaitable[None]], directory: Path, *, inotify: bool,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Read the file (forced), report ready, then keep it current until cancelled."""
    await reload(True)
    watch = dirwatch.open_watch(directory) if inotify else None
    task_status.started()
    last_read = trio.current_time()
    try:
        while True:
            with trio.move_on_after(POLL_S):
                if watch is not None:
                    await watch.wait()
                    await trio.sleep(0.01)  # let a rename's events land together
                else:
                    await trio.sleep_forever()
            force = trio.current_time() - last_read >= FORCE_S
            if force:
                last_read = trio.current_time()
            await reload(force)
    finally:
        if watch is not None:
            watch.close()
