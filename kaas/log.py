"""One structlog setup per process.

A broker's log goes to stderr, which the supervisor points at a file on the data volume.
When that volume is full or failing, writing a line fails; the sink (``LineLogger``) never
lets that failure reach the code that logged: it drops the line, counts it, and before the
first line it writes again it writes one ``log_lines_dropped`` event with the count.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import IO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _plain_note(dropped: int) -> str:
    return f"log_lines_dropped dropped={dropped}"


class LineLogger:
    """A structlog logger writing one line per event to a file, where a failed write never
    raises: the line is dropped and counted (``dropped``). Before the next line that can
    be written, ``note(dropped)`` is written (the ``log_lines_dropped`` event) and the count
    starts again from zero.

    A file with a file descriptor (stderr) is written with one ``os.write`` per line,
    bypassing its Python buffers, so that a failed line is gone rather than left in a
    buffer to be retried half-written later; a short write is finished, and a line torn by
    a failure is ended before the next one. Other file objects (a test's capture) get
    ``write`` + ``flush``. Healthy cost: one lock, one encode, one system call per line.

    Args:
        file: where lines go (default: ``sys.stderr`` at construction).
        note: renders the ``log_lines_dropped`` line (without the newline) for a count.
    """

    def __init__(self, file: IO[str] | None = None, note: Callable[[int], str] = _plain_note) -> None:
        self._file = sys.stderr if file is None else file
        self._note = note
        self._lock = threading.Lock()
        self._torn = False
        self.dropped = 0
        self._fd: int | None = None
        try:
            self._fd = self._file.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            pass
        self._encoding = getattr(self._file, "encoding", None) or "utf-8"

    def msg(self, message: str) -> None:
        with self._lock:
            if self.dropped:
                try:
                    note = self._note(self.dropped)
                except Exception:  # noqa: BLE001  rendering the note must not lose the count
                    note = _plain_note(self.dropped)
                if not self._write(note):
                    self.dropped += 1
                    return
                self.dropped = 0
            if not self._write(message):
                self.dropped += 1

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg

    def _write(self, line: str) -> bool:
        """Write ``line`` and a newline; False if it failed (then maybe partly written)."""
        if self._fd is None:
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except (OSError, ValueError):
                return False
            return True
        data = (line + "\n").encode(self._encoding, "backslashreplace")
        if self._torn:
            data = b"\n" + data  # end the torn line first
        try:
            n = os.write(self._fd, data)
        except OSError:
            return False
        if n == len(data):
            self._torn = False
            return True
        view = memoryview(data)[n:]
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            self._torn = True
            return False
        self._torn = False
        return True


DEBUG = True
"""Whether debug events are written (``configure``'s level; structlog's default writes
them): the transactional request path tests it before building a debug event's fields,
which cost more than the event is worth when it is dropped."""


def configure(*, json: bool = False, level: str = "info", stream: IO[str] | None = None, **bind: object) -> None:
    """Configure structlog for this process: key-value console output, or JSON lines.

    Args:
        json: render JSON lines instead of key-value console lines.
        level: the lowest level written.
        stream: where lines go (default: stderr), through a ``LineLogger``.
        bind: context variables bound for every event (``broker_id``).
    """
    global DEBUG
    DEBUG = _LEVELS.get(level, logging.INFO) <= logging.DEBUG
    renderer: structlog.typing.Processor
    if json:
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        renderer,
    ]

    def note(dropped: int) -> str:
        event: object = {"event": "log_lines_dropped", "dropped": dropped}
        for proc in processors:
            event = proc(None, "warning", event)  # type: ignore[arg-type]
        return str(event)

    sink = LineLogger(stream, note)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=lambda *_args: sink,
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.clear_contextvars()
    if bind:
        structlog.contextvars.bind_contextvars(**bind)


def get(name: str | None = None) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name) if name else structlog.get_logger()
    return logger
