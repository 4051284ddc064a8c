"""The log sink on a full or failing disk (issue 17): a line that cannot be written never
raises into the code that logged it; the dropped lines are counted and reported once the
sink can write again."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
import structlog

from kaas import log


class FlakyFile:
    """A text file whose writes fail with ENOSPC while ``full`` (no fileno: the sink uses
    write + flush, as for any file object)."""

    def __init__(self) -> None:
        self.full = False
        self.lines: list[str] = []
        self._pending = ""

    def write(self, s: str) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._pending += s
        return len(s)

    def flush(self) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        *done, self._pending = self._pending.split("\n")
        self.lines += done


@pytest.fixture(autouse=True)
def _structlog_defaults():
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def test_failed_writes_are_dropped_counted_and_reported_once_writable():
    f = FlakyFile()
    log.configure(json=True, stream=f, broker_id=3)
    logger = structlog.get_logger()
    logger.info("before", n=0)
    f.full = True
    for i in range(5):
        logger.info("during", n=i)  # must not raise
    logger.error("during_error")
    f.full = False
    logger.info("after", n=1)
    logger.info("later", n=2)
    events = [json.loads(line) for line in f.lines]
    assert [e["event"] for e in events] == ["before", "log_lines_dropped", "after", "later"]
    note = events[1]
    assert note["dropped"] == 6 and note["level"] == "warning" and note["broker_id"] == 3
    assert "timestamp" in note


def test_a_failing_note_keeps_the_count():
    f = FlakyFile()
    sink = log.LineLogger(f)
    f.full = True
    sink.msg("a")
    sink.msg("b")
    assert sink.dropped == 2
    f.full = False
    sink.msg("c")
    assert f.lines == ["log_lines_dropped dropped=2", "c"] and sink.dropped == 0


def test_real_fd_enospc_then_writable(tmp_path):
    """Through a real descriptor: /dev/full fails every write with ENOSPC (the kernel's
    answer on a full disk); then the same descriptor is pointed at a regular file."""
    path = tmp_path / "broker.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with os.fdopen(fd, "w") as f:
        sink = log.LineLogger(f, note=lambda n: f"NOTE dropped={n}")
        sink.msg("one")
        full = os.open("/dev/full", os.O_WRONLY)
        saved = os.dup(fd)
        os.dup2(full, fd)
        os.close(full)
        sink.msg("two")
        sink.msg("three")
        assert sink.dropped == 2
        os.dup2(saved, fd)
        os.close(saved)
        sink.msg("four")
        assert sink.dropped == 0
    assert path.read_text().splitlines() == ["one", "NOTE dropped=2", "four"]


_TORN = r"""
import os, resource, signal, sys
from kaas import log
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
path = sys.argv[1]
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
with open(path, "w") as f:
    sink = log.LineLogger(f, note=lambda n: f"NOTE dropped={n}")
    sink.msg("first")
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, hard))  # room for 10 more bytes
    sink.msg("y" * 30)  # a short write of 10 bytes, then EFBIG
    sink.msg("z")  # EFBIG at once
    assert sink.dropped == 2, sink.dropped
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    sink.msg("next")
    assert sink.dropped == 0
"""


def test_a_torn_line_is_ended_before_the_next(tmp_path):
    """A real short write (the kernel stops at RLIMIT_FSIZE, as at a full disk), then a
    failing one: the torn fragment is ended with a newline before the next line."""
    path = tmp_path / "torn.log"
    res = subprocess.run([sys.executable, "-c", _TORN, str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert path.read_text() == "first\n" + "y" * 10 + "\nNOTE dropped=2\nnext\n"


def test_broker_logging_to_a_full_device_does_not_raise():
    """A process configured as a broker is, with its stderr on /dev/full: logging returns."""
    code = ("import structlog\n"
            "from kaas import log\n"
            "log.configure(json=True, broker_id=0)\n"
            "for i in range(3): structlog.get_logger().warning('x', i=i)\n"
            "print('survived', flush=True)\n")
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=full, timeout=60)
    assert res.returncode == 0 and res.stdout == b"survived\n"
