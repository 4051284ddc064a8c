"""glibc malloc settings for a broker process.

A broker allocates a large buffer for nearly every byte it receives: each ``recv`` of up
to 256 KiB, each request frame and each batch slice is a fresh ``bytes`` object of tens
to hundreds of KiB. With its default, self-adjusting thresholds glibc serves such sizes
with ``mmap`` or from the top of the heap and, depending on how allocations and frees
happen to interleave, hands them back to the kernel on ``free`` (``munmap``, or a trim of
the heap's top). The next buffer is then faulted in and zeroed page by page again: in
some produce runs the brokers took one minor page fault per 4 KiB produced, and their
kernel time per GiB nearly doubled.

A fixed high mmap threshold keeps such blocks on the heap, and a trim threshold of
``TRIM_THRESHOLD`` keeps freed memory mapped for reuse instead of returning it at once
(1 MiB already stops the faults in the unit test's pattern; 8 MiB leaves room for a few
1 MiB produce frames). The cost: up to ``TRIM_THRESHOLD`` of freed memory stays in the
broker's RSS after a burst.

A user who sets ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` in the
environment keeps their own settings; with a C library other than glibc nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import platform

import structlog

log = structlog.get_logger()

# mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's upper bound for this setting on 64-bit
TRIM_THRESHOLD = 8 * 1024 * 1024

_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune() -> bool:
    """Apply the settings above to this process. True when they were applied."""
    if any(name in os.environ for name in _ENV) or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # this process's C library
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok: bool = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not ok:
        log.warning("malloc_tuning_refused", mmap_threshold=MMAP_THRESHOLD, trim_threshold=TRIM_THRESHOLD)
    return ok
