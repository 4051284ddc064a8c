"""Deleted files that stay on the volume for ``file.delete.delay.ms`` (Apache renames a
deleted segment to ``*.deleted`` and removes it later; kaas does the same, with the time
it is due in the name, so whoever sweeps needs no memory of when it was deleted).

- a segment's files (``.log``, ``.idx``, ``.txnidx``) that retention, DeleteRecords or
  recovery drops are renamed ``<name>.<due_ms>.deleted`` in the partition directory; a
  segment the log cleaner replaces keeps its old inode under that name (a hard link made
  before the swap); readers list segments by their exact name and never see them;
- a deleted topic's directory is renamed ``.<topic>.deleted-<topic id>-<due_ms>`` in the
  data directory (one rename: a broker that looks afterwards never sees half a topic);
- ``sweep`` removes what is due. Its caller is the one writer of the directory: the
  partition's leader for segments, the controller for topic directories; a new leader or
  controller sweeps what its predecessor left (the due time is in the name, by the wall
  clock of the broker that deleted it). A name without a due time (written before the
  delay existed) is due at once.

Invariants:
    - with a delay of 0 nothing is renamed: the files are unlinked at once, as before;
    - only names this module wrote are ever removed by ``sweep``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

SUFFIX = ".deleted"
_FILE = re.compile(r"^(?P<name>.+)\.(?P<due>\d+)\.deleted$")
_TOPIC = re.compile(r"^\.(?P<topic>.+)\.deleted-(?P<id>[0-9a-f-]{36})(?:-(?P<due>\d+))?$")


def trash_name(path: Path, due_ms: int) -> Path:
    """Where ``path`` waits until ``due_ms``."""
    return path.with_name(f"{path.name}.{due_ms}{SUFFIX}")


def discard(paths: Iterable[Path], delay_ms: int, now_ms: int) -> None:
    """Delete ``paths`` now (delay 0) or set them aside until ``now_ms + delay_ms``.
    Missing files are skipped."""
    for p in paths:
        try:
            if delay_ms <= 0:
                os.unlink(p)
            else:
                os.rename(p, trash_name(Path(p), now_ms + delay_ms))
        except FileNotFoundError:
            pass


def keep(path: Path, delay_ms: int, now_ms: int) -> None:
    """Before ``path`` is replaced by a rename: keep its current inode until the delay
    passed (a hard link; nothing when the delay is 0 or the file is missing). Idempotent:
    an existing link of that name is kept."""
    if delay_ms <= 0:
        return
    try:
        os.link(path, trash_name(Path(path), now_ms + delay_ms))
    except (FileNotFoundError, FileExistsError):
        pass


def pending(directory: Path) -> list[tuple[str, int]]:
    """The set-aside files of a partition directory: (name, due_ms), by name."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        m = _FILE.match(n)
        if m:
            out.append((n, int(m.group("due"))))
    return sorted(out)


def sweep(directory: Path, now_ms: int) -> list[str]:
    """Remove the set-aside files of ``directory`` that are due. Returns their names."""
    gone = []
    for name, due in pending(directory):
        if due <= now_ms:
            try:
                os.unlink(Path(directory) / name)
            except FileNotFoundError:
                continue
            gone.append(name)
    return gone


def topic_trash_name(topic_dir: Path, topic_id: object, due_ms: int) -> Path:
    """Where a deleted topic's directory waits until ``due_ms``."""
    return topic_dir.with_name(f".{topic_dir.name}.deleted-{topic_id}-{due_ms}")


def pending_topics(data_dir: Path) -> list[tuple[str, int]]:
    """Deleted topics' directories waiting in ``data_dir``: (name, due_ms; 0 when the
    name carries none)."""
    try:
        names = os.listdir(data_dir)
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        m = _TOPIC.match(n)
        if m:
            out.append((n, int(m.group("due") or 0)))
    return sorted(out)


def sweep_topics(data_dir: Path, now_ms: int) -> list[str]:
    """Remove the deleted topics' directories that are due. Returns their names."""
    gone = []
    for name, due in pending_topics(data_dir):
        if due <= now_ms:
            shutil.rmtree(Path(data_dir) / name, ignore_errors=True)
            gone.append(name)
    return gone
