"""Topic metadata files ``__cluster/topics/<topic>.json``.

Created by exclusive create (any broker may win the race, exactly one does); later edits
(partition count, configs) are whole-file rewrites by the controller.

Invariants:
    - a topic's ``topic_id`` never changes while its file exists; a re-created topic gets a
      new id (names are not identities);
    - the partition count only grows;
    - the replication factor is at least 1 and set once, at creation;
    - a manual replica list (``replica_assignment``) is never empty, and has the
      replication factor's length.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from kaas.errors import CorruptState
from kaas.storage import atomic, trash

VALID_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class TopicFile(TypedDict):
    """``<topic>.json``, format 1. Files written before ``replication_factor`` read as 1."""

    format: int
    name: str
    topic_id: str
    partitions: int
    configs: dict[str, str]
    replication_factor: int
    replica_assignment: NotRequired[dict[str, list[int]]]
    """Manual replica lists by partition (its number as a string), when any."""


@dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False
    replication_factor: int = 1
    """How many brokers Metadata names as the partition's replicas (see
    ``kaas.domain.replicas``): the data is one copy on the shared volume either way.
    Files written before the field existed read as 1."""
    replica_assignment: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Manual replica lists (CreateTopics/CreatePartitions ``assignments``) by partition;
    the first live broker of a list is the partition's preferred leader. Partitions
    without one use the ring of ``kaas.domain.replicas``."""

    def to_json(self) -> TopicFile:
        out: TopicFile = {"format": 1, "name": self.name, "topic_id": str(self.topic_id),
                          "partitions": self.partitions, "configs": dict(self.configs),
                          "replication_factor": self.replication_factor}
        if self.replica_assignment:
            out["replica_assignment"] = {str(p): list(r) for p, r in sorted(self.replica_assignment.items())}
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, object], path: str = "") -> TopicMeta:
        """A topic file's JSON object (its members whatever the file holds: checked here)."""
        obj = cast(TopicFile, raw)
        try:
            rf = int(obj.get("replication_factor", 1))
            if rf < 1:
                raise ValueError(f"replication_factor {rf} below 1")
            manual = {int(p): tuple(int(b) for b in r) for p, r in obj.get("replica_assignment", {}).items()}
            if any(not r for r in manual.values()):
                raise ValueError("empty replica list")
            return cls(obj["name"], uuid.UUID(obj["topic_id"]), int(obj["partitions"]),
                       {str(k): str(v) for k, v in obj.get("configs", {}).items()},
                       replication_factor=rf, replica_assignment=manual)
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise CorruptState(path, f"bad topic file: {exc}") from None


def valid_topic_name(name: str) -> bool:
    return bool(VALID_NAME.match(name)) and name not in (".", "..")


class TopicStore:
    """Reads and writes the topic files; keeps a cache refreshed by ``refresh``."""

    def __init__(self, topics_dir: Path, *, fsync: bool = True) -> None:
        self.dir = Path(topics_dir)
        self.fsync = fsync
        self._cache: dict[str, TopicMeta] = {}
        self._stamps: dict[str, tuple[int, int, int]] = {}  # (mtime ns, size, inode) as read
        self.errors: dict[str, str] = {}
        self.version = 0  # rises whenever the cached topics change (readers recompute then)
        self._ids: tuple[int, dict[uuid.UUID, str]] = (-1, {})  # (version, topic id -> name)

    @property
    def topics(self) -> dict[str, TopicMeta]:
        return self._cache

    def get(self, name: str) -> TopicMeta | None:
        return self._cache.get(name)

    def name_of(self, topic_id: uuid.UUID | None) -> str | None:
        """The name of the cached topic with this id (KIP-516 requests name topics so), or
        None when no topic has it. The id index is rebuilt once per ``version``."""
        version, ids = self._ids
        if version != self.version:
            ids = {m.topic_id: n for n, m in self._cache.items()}
            self._ids = (self.version, ids)
        return ids.get(topic_id) if topic_id is not None else None

    def refresh(self) -> bool:
        """Re-read changed topic files. Returns True if the set of topics or any topic changed."""
        changed = False
        seen = set()
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            entries = []
        for entry in entries:
            if not entry.name.endswith(".json") or entry.name.startswith("."):
                continue
            name = entry.name[:-5]
            seen.add(name)
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if self._stamps.get(name) == stamp:
                continue
            try:
                obj = atomic.read_json(Path(entry.path))
            except CorruptState as exc:
                self.errors[name] = str(exc)
                continue
            if obj is None:
                continue
            meta = TopicMeta.from_json(obj, entry.path)
            self._stamps[name] = stamp
            self.errors.pop(name, None)
            if self._cache.get(name) != meta:
                self._cache[name] = meta
                changed = True
        for name in list(self._cache):
            if name not in seen:
                del self._cache[name]
                self._stamps.pop(name, None)
                changed = True
        if changed:
            self.version += 1
        return changed

    def create(self, name: str, partitions: int, configs: dict[str, str] | None = None,
               replication_factor: int = 1,
               replica_assignment: dict[int, tuple[int, ...]] | None = None) -> TopicMeta | None:
        """Exclusive-create the topic file. Returns the new meta, or None if it already exists."""
        meta = TopicMeta(name, uuid.uuid4(), partitions, dict(configs or {}),
                         replication_factor=replication_factor, replica_assignment=dict(replica_assignment or {}))
        data = json.dumps(meta.to_json(), sort_keys=True).encode()
        if not atomic.create_exclusive(self.dir / f"{name}.json", data, fsync=self.fsync):
            return None
        self._cache[name] = meta
        self.version += 1
        return meta

    def update(self, meta: TopicMeta) -> None:
        atomic.write_json(self.dir / f"{meta.name}.json", meta.to_json(), fsync=self.fsync)
        self._cache[meta.name] = meta
        self._stamps.pop(meta.name, None)
        self.version += 1

    def delete(self, name: str) -> bool:
        try:
            os.unlink(self.dir / f"{name}.json")
        except FileNotFoundError:
            return False
        self._cache.pop(name, None)
        self._stamps.pop(name, None)
        self.version += 1
        return True


def remove_topic_data(topic_dir: Path, meta: TopicMeta, delay_ms: int = 0, now_ms: int = 0) -> None:
    """Remove a deleted topic's partition directories: renamed aside first (one rename, so
    a broker that looks afterwards never sees half a topic), then removed at once (delay
    0) or, after ``delay_ms`` (file.delete.delay.ms), by the controller's sweep
    (``storage.trash.sweep_topics``)."""
    if not topic_dir.exists():
        return
    aside = trash.topic_trash_name(topic_dir, meta.topic_id, now_ms + max(0, delay_ms))
    os.rename(topic_dir, aside)
    if delay_ms <= 0:
        shutil.rmtree(aside, True)
