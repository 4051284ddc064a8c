"""Small trio helpers for the request path.

A trio checkpoint is a pass through the scheduler (an epoll poll and a task switch): on a
busy broker about 20 us, more than most of what a transactional request does on tmpfs.
These helpers skip it where nothing has to wait.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["held"]


@asynccontextmanager
async def held(lock: trio.Lock) -> AsyncIterator[None]:
    """Hold ``lock``; take it without a checkpoint when it is free."""
    try:
        lock.acquire_nowait()
    except trio.WouldBlock:
        await lock.acquire()
    try:
        yield
    finally:
        lock.release()
