"""The marker queue: ``__cluster/marker_queue/to-<broker>/`` (docs/transactions.rst, "EndTxn").

A transaction coordinator that owes a COMMIT/ABORT marker on a partition led by another
broker, and could not hand it over with WriteTxnMarkers (``kaas.peers``: the link failed,
the peer is declared dead, or it answered an error), or that owes the offset hook of a group
coordinated elsewhere, writes an entry into that broker's queue; the broker's marker
watcher applies it and deletes it.

File names all start with ``<pid>-<epoch>-<txn_seq>`` (the *base*) and end in ``.json``:

==============================  ======================================================
``<base>.json``                 markers, written by the coordinator; a retried EndTxn
                                rewrites the same file (idempotent by naming)
``<base>.groups.json``          the offset hook for groups coordinated by that broker,
                                written by the coordinator
``<base>.f<from>-<hex>.json``   a part forwarded by broker ``<from>`` (the partition or
                                group moved); unique, so it never overwrites an entry
``<base>.w<hex>.json``          *taken*: renamed by the queue's broker before it works
                                on it, or claimed from a dead broker's queue
==============================  ======================================================

Including ``txn_seq`` in the base keeps two transactions of the same pid and epoch apart.

Invariants:
    - every write is tmp + fsync + rename (``atomic``): nobody sees a torn entry;
    - a taken (``.w``) file is written (rewritten with fewer parts) and deleted only by the
      broker whose queue holds it; a coordinator's retry re-creates ``<base>.json`` beside
      it instead of changing an entry somebody is working on;
    - a claim is a ``rename`` of each file out of the dead broker's queue: of two racing
      claimants exactly one succeeds per file, the other gets ``FileNotFoundError``;
    - an entry is deleted only when every part of it is durable (the caller's duty);
    - an entry that does not parse raises ``CorruptState`` and stays where it is;
    - a failed write, take or claim (ENOSPC, EIO, ...) raises ``OSError`` and leaves every
      entry as it was: the caller keeps the parts it could not hand on and retries.
"""

from __future__ import annotations

import builtins
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypedDict, cast

from kaas.errors import CorruptState
from kaas.storage import atomic, fs

__all__ = ["ENTRY_FORMAT", "MarkerEntry", "MarkerQueue"]

ENTRY_FORMAT = 1
_SUFFIX = ".json"


class MarkerEntryFile(TypedDict):
    """A marker queue file, format 1 (``MarkerEntry``'s fields)."""

    format: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: list[list[str | int]]
    """Each ``[topic, partition]``."""
    groups: list[str]
    txn_seq: int


@dataclass(frozen=True, slots=True)
class MarkerEntry:
    """One queued piece of a transaction's completion.

    Attributes:
        transactional_id: the transaction's id (for logs and tools).
        producer_id: the transaction's pid.
        producer_epoch: the marker epoch.
        commit: COMMIT (True) or ABORT (False).
        coordinator_epoch: written into the control record.
        partitions: partitions owed a marker.
        groups: groups whose staged offsets to commit (``commit``) or discard.
        txn_seq: the transaction's ``txn_seq``.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[tuple[str, int]]
    groups: frozenset[str]
    txn_seq: int

    @property
    def base(self) -> str:
        """``<pid>-<epoch>-<txn_seq>``: the start of every file name of this entry."""
        return f"{self.producer_id}-{self.producer_epoch}-{self.txn_seq}"

    @property
    def empty(self) -> bool:
        """True when nothing is left to do."""
        return not self.partitions and not self.groups

    def only(self, partitions: Iterable[tuple[str, int]], groups: Iterable[str]) -> MarkerEntry:
        """A copy holding just these partitions and groups."""
        return replace(self, partitions=frozenset(partitions), groups=frozenset(groups))

    def to_json(self) -> MarkerEntryFile:
        """The file content."""
        return {
            "format": ENTRY_FORMAT,
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "commit": self.commit,
            "coordinator_epoch": self.coordinator_epoch,
            "partitions": [[t, p] for t, p in sorted(self.partitions)],
            "groups": sorted(self.groups),
            "txn_seq": self.txn_seq,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, object], path: str) -> MarkerEntry:
        """Parse a file's content.

        Raises:
            CorruptState: wrong format or a malformed field.
        """
        obj = cast(MarkerEntryFile, raw)
        if obj.get("format") != ENTRY_FORMAT:
            raise CorruptState(path, f"unsupported marker entry format {obj.get('format')!r}")
        try:
            partitions = set()
            for item in obj["partitions"]:
                topic, partition = item
                if not isinstance(topic, str) or type(partition) is not int:
                    raise ValueError(f"bad partition {item!r}")
                partitions.add((topic, partition))
            groups = obj["groups"]
            if not all(isinstance(g, str) for g in groups):
                raise ValueError(f"bad groups {groups!r}")
            for k in ("producer_id", "producer_epoch", "coordinator_epoch", "txn_seq"):
                v = raw[k]
                if type(v) is not int:
                    raise ValueError(f"{k} must be an int, got {v!r}")
            if not isinstance(obj["commit"], bool) or not isinstance(obj["transactional_id"], str):
                raise ValueError("bad commit or transactional_id")
            return cls(
                transactional_id=obj["transactional_id"],
                commit=obj["commit"],
                partitions=frozenset(partitions),
                groups=frozenset(groups),
                producer_id=obj["producer_id"],
                producer_epoch=obj["producer_epoch"],
                coordinator_epoch=obj["coordinator_epoch"],
                txn_seq=obj["txn_seq"],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptState(path, f"bad marker entry: {exc!r}") from None


def _parts(name: str) -> tuple[str, str] | None:
    """(base, tag) of a queue file name, None for anything else (tmp files, strays)."""
    if name.startswith(".") or not name.endswith(_SUFFIX):
        return None
    stem = name[: -len(_SUFFIX)]
    base, _, tag = stem.partition(".")
    if base.count("-") < 2:
        return None
    return base, tag


def is_taken(path: Path) -> bool:
    """True for a ``<base>.w<hex>.json`` file (taken by its queue's broker)."""
    parts = _parts(path.name)
    return parts is not None and parts[1].startswith("w")


class MarkerQueue:
    """The ``marker_queue`` directory.

    Args:
        root: the ``marker_queue`` directory.
        fsync: fsync entries and directories (off only in tests).
    """

    def __init__(self, root: Path, *, fsync: bool = True) -> None:
        self.root = Path(root)
        self._root_str = str(self.root)
        self.fsync = fsync

    def dir(self, broker_id: int) -> Path:
        """The queue of ``broker_id``."""
        return self.root / f"to-{broker_id}"

    def _write(self, path: Path, entry: MarkerEntry) -> Path:
        try:
            atomic.write_json(path, entry.to_json(), fsync=self.fsync)
        except FileNotFoundError:  # the queue's first entry
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_json(path, entry.to_json(), fsync=self.fsync)
        return path

    def enqueue(self, broker_id: int, entry: MarkerEntry) -> Path:
        """The coordinator's write of an entry owing markers (``<base>.json``).

        A second enqueue of the same transaction to the same broker replaces the file.

        Returns:
            The path written.
        """
        return self._write(self.dir(broker_id) / f"{entry.base}{_SUFFIX}", entry)

    def enqueue_groups(self, broker_id: int, entry: MarkerEntry) -> Path:
        """The coordinator's write of an offset-hook entry (``<base>.groups.json``)."""
        return self._write(self.dir(broker_id) / f"{entry.base}.groups{_SUFFIX}", entry)

    def forward(self, broker_id: int, entry: MarkerEntry, from_broker: int) -> Path:
        """Write part of an entry into another broker's queue under a fresh unique name."""
        name = f"{entry.base}.f{from_broker}-{secrets.token_hex(4)}{_SUFFIX}"
        return self._write(self.dir(broker_id) / name, entry)

    def stamp(self, broker_id: int) -> tuple[int, int, int] | None:
        """(inode, mtime, size) of ``broker_id``'s queue directory, None when unreadable: a
        stat that changes when an entry lands (the marker watcher's cheap poll)."""
        try:
            st = os.stat(self.dir(broker_id))
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def list(self, broker_id: int, prefix: str = "") -> list[Path]:
        """Queue files of ``broker_id`` whose names start with ``prefix``, sorted by name
        (tmp files and strays left out)."""
        directory = self.dir(broker_id)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        return [directory / n for n in sorted(names) if n.startswith(prefix) and _parts(n) is not None]

    def read(self, path: Path) -> MarkerEntry | None:
        """Read one entry afresh; None when it is gone.

        Raises:
            CorruptState: the file does not parse.
        """
        obj = atomic.read_json(path)
        if obj is None:
            return None
        return MarkerEntry.from_json(obj, str(path))

    def take(self, path: Path) -> Path | None:
        """Rename ``path`` to a taken name in the same queue before working on it.

        Returns:
            The taken path (``path`` itself when already taken), or None when the file
            vanished (claimed by another broker).
        """
        parts = _parts(path.name)
        if parts is None:
            return None
        if parts[1].startswith("w"):
            return path
        dst = path.with_name(f"{parts[0]}.w{secrets.token_hex(4)}{_SUFFIX}")
        try:
            fs.replace(str(path), str(dst))  # dst is a fresh name: nothing is replaced
        except FileNotFoundError:
            return None
        if self.fsync:
            atomic.fsync_dir(path.parent)
        return dst

    def rewrite(self, path: Path, entry: MarkerEntry) -> bool:
        """Replace a taken entry with fewer parts.

        Returns:
            False when the file is gone (claimed away), and nothing was written.
        """
        if not path.exists():
            return False
        self._write(path, entry)
        return True

    def delete(self, path: Path) -> None:
        """Remove a finished entry (absent is fine)."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        if self.fsync:
            atomic.fsync_dir(path.parent)

    def queues(self) -> builtins.list[int]:
        """Broker ids that have a queue directory."""
        out: builtins.list[int] = []
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return out
        for n in names:
            if n.startswith("to-"):
                try:
                    out.append(int(n[3:]))
                except ValueError:
                    continue
        return sorted(out)

    def claim(self, dead_broker: int, self_broker: int) -> builtins.list[Path]:
        """Move every entry of a dead broker's queue into this broker's queue, taken.

        Each file moves with one ``rename``; when several brokers claim at once each file
        lands in exactly one queue.

        Returns:
            The paths this call won (already taken, ready to work on).

        Raises:
            OSError: a rename failed; the files moved before it are in this broker's
                queue (taken), the rest are where they were.
        """
        won: list[Path] = []
        dst_dir = self.dir(self_broker)
        dst_dir.mkdir(parents=True, exist_ok=True)
        try:
            for src in self.list(dead_broker):
                parts = _parts(src.name)
                assert parts is not None
                dst = dst_dir / f"{parts[0]}.w{secrets.token_hex(4)}{_SUFFIX}"
                try:
                    fs.replace(str(src), str(dst))  # dst is a fresh name: nothing is replaced
                except FileNotFoundError:
                    continue
                won.append(dst)
        finally:  # a failed rename stops the claim; what moved already is ours (taken)
            if won and self.fsync:
                atomic.fsync_dir(dst_dir)
                atomic.fsync_dir(self.dir(dead_broker))
        return won

    def pending_for_pid(self, producer_id: int) -> bool:
        """Is any file of any transaction of ``producer_id`` queued, in any queue?

        On every AddPartitionsToTxn (the begin guard), so string paths and the first match
        ends it: listing the queues through ``list`` (pathlib, sorting) cost 3-4 times the
        directory reads."""
        prefix = f"{producer_id}-"
        root = self._root_str
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            return False
        for d in names:
            if not d.startswith("to-"):
                continue
            try:
                entries = os.listdir(os.path.join(root, d))
            except FileNotFoundError:
                continue
            for n in entries:
                if n.startswith(prefix) and _parts(n) is not None:
                    return True
        return False
