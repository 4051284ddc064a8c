"""Committed offsets, one file per group: ``__cluster/consumer_offsets/<group>.json``.

Written only by the group's coordinator (tmp + fsync + rename). The file holds the
committed offsets and the pending layer of transactional offset commits, keyed by
producer id, which the transaction's COMMIT marker promotes and its ABORT marker drops,
and the group's membership: ``membership`` for a classic group (``Group.snapshot()``),
``consumer`` for a KIP-848 consumer group (``ConsumerGroup.snapshot()``), ``share`` for a
share group (``ShareGroup.snapshot()``). Files written before ``consumer`` existed read as
having none. The file's record is ``GroupFile``; each kind's snapshot is the kind's record
(``domain.groups``), whose fields the kind's ``restore`` checks.

Invariants:
    - a file that exists but does not parse is an error for that group, never a reset;
    - ``generation`` counts writes, so a reader can tell two versions apart;
    - a failed ``save`` (tmp + fsync + rename) leaves the previous file and the
      ``GroupOffsets`` it was given unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypeAlias, TypedDict, cast

from kaas.errors import CorruptState
from kaas.storage import atomic
from kaas.storage.paths import decode_name, encode_name, is_digest_name

if TYPE_CHECKING:  # (the kinds' records, for mypy: the store itself needs no group machine)
    from kaas.domain.groups.classic.records import ClassicSnapshot
    from kaas.domain.groups.consumer.persistence import ConsumerSnapshot
    from kaas.domain.groups.share.group import ShareSnapshot

TP = tuple[str, int]

FORMAT = 1
"""The ``"format"`` of a group's file."""

CommittedField: TypeAlias = list[int | str | None]
"""One committed offset on file: ``[offset, leader epoch, metadata, commit time]``, and the
expiry time when the commit gave one (``Committed``)."""

OffsetsField: TypeAlias = dict[str, dict[str, CommittedField]]
"""Committed offsets by topic, then partition (its number as a string)."""


class GroupFile(TypedDict):
    """``<group>.json``, format 1 (``GroupOffsets.to_json``). At most one kind's state:
    none for a group known only by its offsets. Files written before ``generation`` or
    ``pending`` read as 0 and none."""

    format: int
    group_id: str
    generation: int
    offsets: OffsetsField
    pending: dict[str, OffsetsField]
    """Staged transactional commits by producer id (as a string)."""
    membership: NotRequired[ClassicSnapshot]
    consumer: NotRequired[ConsumerSnapshot]
    share: NotRequired[ShareSnapshot]


@dataclass(slots=True)
class Committed:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    timestamp: int = -1  # the commit's time (the coordinator's wall clock, ms)
    # when the offset expires, if its commit said (OffsetCommit v2-v4 retention_time_ms);
    # -1: by offsets.retention.minutes (kaas.domain.groups.offset_expiry)
    expire_timestamp: int = -1

    def to_json(self) -> CommittedField:
        out: CommittedField = [self.offset, self.leader_epoch, self.metadata, self.timestamp]
        if self.expire_timestamp >= 0:
            out.append(self.expire_timestamp)
        return out

    @classmethod
    def from_json(cls, v: CommittedField) -> Committed:
        """One offset on file, checked: ``TypeError``, ``ValueError`` or ``IndexError``
        when it does not match ``CommittedField``."""
        metadata = v[2]
        if metadata is not None and not isinstance(metadata, str):
            raise TypeError(f"metadata {metadata!r} is not a string")
        return cls(_int(v[0]), _int(v[1]), metadata, _int(v[3]), _int(v[4]) if len(v) > 4 else -1)


def _int(v: object) -> int:
    """A number on file as ``int()`` reads it (an int, or a float or string of one)."""
    if isinstance(v, int | float | str):
        return int(v)
    raise TypeError(f"{v!r} is not a number")


@dataclass(slots=True)
class GroupOffsets:
    group_id: str
    offsets: dict[TP, Committed] = field(default_factory=dict)
    pending: dict[int, dict[TP, Committed]] = field(default_factory=dict)  # pid -> staged
    generation: int = 0
    # the group's membership as its coordinator last wrote it (Group.snapshot())
    membership: ClassicSnapshot | None = None
    # a consumer-protocol group's state as its coordinator last wrote it (ConsumerGroup.snapshot())
    consumer: ConsumerSnapshot | None = None
    # a share group's state as its coordinator last wrote it (ShareGroup.snapshot())
    share: ShareSnapshot | None = None
    file_id: tuple[int, int] | None = field(default=None, compare=False)  # atomic.content_id read/written

    def copy(self) -> GroupOffsets:
        """A copy to change and write: the coordinator swaps it in only once it is on
        file, so a failed write leaves the group's state in memory as it was. (Committed
        values are replaced, never changed in place, so they are shared.)"""
        return GroupOffsets(self.group_id, dict(self.offsets),
                            {pid: dict(staged) for pid, staged in self.pending.items()},
                            self.generation, self.membership, self.consumer, self.share, self.file_id)

    def to_json(self) -> GroupFile:
        def enc(d: dict[TP, Committed]) -> OffsetsField:
            out: OffsetsField = {}
            for (t, p), c in sorted(d.items()):
                out.setdefault(t, {})[str(p)] = c.to_json()
            return out
        out: GroupFile = {"format": FORMAT, "group_id": self.group_id, "generation": self.generation,
                          "offsets": enc(self.offsets),
                          "pending": {str(pid): enc(d) for pid, d in sorted(self.pending.items())}}
        if self.membership is not None:
            out["membership"] = self.membership
        if self.consumer is not None:
            out["consumer"] = self.consumer
        if self.share is not None:
            out["share"] = self.share
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, object], path: str) -> GroupOffsets:
        """A group file's JSON object (its fields whatever the file holds: checked here; a
        kind's state only to be an object, its fields by the kind's ``restore``).

        Raises:
            CorruptState: a member does not match ``GroupFile``.
        """
        def dec(d: OffsetsField) -> dict[TP, Committed]:
            return {(t, int(p)): Committed.from_json(v) for t, parts in d.items() for p, v in parts.items()}
        obj = cast(GroupFile, raw)
        try:
            for kind in ("membership", "consumer", "share"):
                if raw.get(kind) is not None and not isinstance(raw[kind], dict):
                    raise TypeError(f"{kind} is not an object")
            if not isinstance(obj["group_id"], str):
                raise TypeError(f"group_id {obj['group_id']!r} is not a string")
            return cls(obj["group_id"], dec(obj.get("offsets", {})),
                       {int(pid): dec(d) for pid, d in obj.get("pending", {}).items()},
                       _int(obj.get("generation", 0)), obj.get("membership"), obj.get("consumer"), obj.get("share"))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise CorruptState(path, f"bad offsets file: {exc!r}") from None


class StaleOffsets(Exception):
    """A group's file changed under a coordinator holding it in memory."""

    def __init__(self, path: str, expected: object, found: object) -> None:
        super().__init__(f"{path}: expected file {expected}, found {found}")
        self.path = path


_PATHS_MAX = 1 << 16


class OffsetStore:
    def __init__(self, directory: Path, *, fsync: bool = True) -> None:
        self.dir = Path(directory)
        self.fsync = fsync
        # group id -> its file: encoding the name and building the Path was a seventh of a
        # transactional offset commit's file write (two per EOS transaction)
        self._paths: dict[str, Path] = {}

    def path(self, group_id: str) -> Path:
        p = self._paths.get(group_id)
        if p is None:
            if len(self._paths) >= _PATHS_MAX:
                self._paths.clear()
            p = self._paths[group_id] = self.dir / f"{encode_name(group_id)}.json"
        return p

    def load(self, group_id: str) -> GroupOffsets:
        """Read a group's file afresh. Missing → empty. Raises CorruptState when unreadable."""
        p = self.path(group_id)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            return GroupOffsets(group_id)
        g = GroupOffsets.from_json(atomic.parse_json(p, data), str(p))
        if g.group_id != group_id:
            raise CorruptState(str(p), f"holds group {g.group_id!r}, expected {group_id!r}")
        g.file_id = atomic.content_id(data)
        return g

    def save(self, g: GroupOffsets) -> None:
        """Write ``g`` over the version it was read from (or last written as); its
        ``generation`` and ``file_id`` advance only once the file holds it.

        Raises:
            StaleOffsets: the file was replaced (or removed) since: another broker
                coordinated the group meanwhile, so ``g`` is a stale copy and must be
                re-read, not written over that broker's changes.
            OSError: the write failed (ENOSPC, EIO, ...): the file is as it was, and so
                is ``g``.
        """
        path = self.path(g.group_id)
        current = atomic.file_content_id(path)
        if current != g.file_id:
            raise StaleOffsets(str(path), g.file_id, current)
        obj = g.to_json()
        obj["generation"] = g.generation + 1
        data = atomic.json_bytes(obj)
        atomic.write_bytes(path, data, fsync=self.fsync)
        g.generation += 1
        g.file_id = atomic.content_id(data)

    def delete(self, group_id: str) -> None:
        try:
            self.path(group_id).unlink()
        except FileNotFoundError:
            pass

    def list_groups(self) -> list[str]:
        out: list[str] = []
        try:
            names = [p.name for p in self.dir.iterdir()]
        except FileNotFoundError:
            return out
        for n in names:
            if n.endswith(".json") and not n.startswith("."):
                if is_digest_name(n[:-5]):
                    try:
                        obj = atomic.read_json(self.dir / n)
                        if obj is not None:
                            out.append(str(obj["group_id"]))
                    except (CorruptState, KeyError):
                        continue
                else:
                    out.append(decode_name(n[:-5]))
        return out
