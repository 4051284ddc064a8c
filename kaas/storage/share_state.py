"""Share-partition state on the shared volume (KIP-932; docs/design.rst, "Share partitions").

Each (share group, partition) keeps, in the partition's directory::

    share/<group>.snapshot                         the window at one point: tmp + fsync + rename
    share/<group>.<epoch:010d>-<seq:06d>.journal   append-only deltas since (``domain.share_partition``)

``<group>`` is ``paths.encode_name`` of the group id (never holds a dot). The snapshot
names the first journal to replay, ``(epoch, seq)``; journals below it are history and are
removed once the snapshot naming a later one is durable.

A journal is a run of frames: a 4-byte length, the CRC-32C of the payload (4 bytes, big
endian), the payload (msgpack ``[start, end, [[first, last, state, count], ...]]``). The
snapshot file is ``KSS1``, the CRC-32C of the payload, and the payload (a msgpack map with
``format``).

Invariants:
    - one writer: the leader of the partition at epoch ``epoch`` writes only journals
      named with ``epoch`` (and the snapshot); a takeover starts at a sequence number past
      every journal of its epoch on the volume, so a restarted broker that leads at the
      same epoch again never appends to its predecessor's file;
    - the takeover writes a snapshot of everything it replayed naming its own first
      journal before it appends anything, so bytes a deposed leader might still append to
      an older journal are never read again;
    - only a torn tail is cut off a journal while loading (an incomplete frame, a bad last
      frame, or zeros to the end), and each cut is reported; a bad frame with good ones
      after it, or a snapshot that does not parse, is ``CorruptState``, never reset;
    - an append that failed leaves the writer failed (``failed``): nothing is appended
      after bytes that may be torn; the owner reloads from the files.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, cast

import crc32c
import msgpack

from kaas.domain.share_partition import Delta, Persisted, ShareLimits, SharePartition
from kaas.errors import CorruptState
from kaas.storage import atomic, fs
from kaas.storage.paths import decode_name, encode_name, is_digest_name

__all__ = ["DIR", "FORMAT", "ROLL_BYTES", "Loaded", "NewerWriter", "ShareJournal", "groups", "has_state", "load",
           "load_window", "remove", "replay"]

DIR = "share"
FORMAT = 1
ROLL_BYTES = 1 << 20  # a journal this long is folded into a new snapshot
_MAGIC = b"KSS1"
_FRAME = struct.Struct(">II")
_JOURNAL = re.compile(r"^(?P<group>[^.]+)\.(?P<epoch>\d{10})-(?P<seq>\d{6})\.journal$")


@dataclass(slots=True)
class Loaded:
    """What the files of one share partition hold: the snapshot (None: there is none) and
    the deltas after it, in order; ``cuts`` says which torn tails were left out."""

    snapshot: Persisted | None = None
    journal_from: tuple[int, int] = (-1, -1)
    deltas: list[Delta] = field(default_factory=list)
    cuts: list[str] = field(default_factory=list)
    journals: list[tuple[int, int]] = field(default_factory=list)


def snapshot_path(directory: Path, group: str) -> Path:
    return Path(directory) / f"{encode_name(group)}.snapshot"


def journal_path(directory: Path, group: str, epoch: int, seq: int) -> Path:
    return Path(directory) / f"{encode_name(group)}.{epoch:010d}-{seq:06d}.journal"


def journals(directory: Path, group: str) -> list[tuple[int, int]]:
    """(epoch, seq) of every journal of ``group`` in ``directory``, in order."""
    enc = encode_name(group)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = _JOURNAL.match(name)
        if m and m.group("group") == enc:
            out.append((int(m.group("epoch")), int(m.group("seq"))))
    return sorted(out)


def has_state(directory: Path, group: str) -> bool:
    """``group`` has a share partition here: a snapshot or a journal of it exists."""
    enc = encode_name(group)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return False
    return any(n == f"{enc}.snapshot" or ((m := _JOURNAL.match(n)) is not None and m.group("group") == enc)
               for n in names)


def groups(directory: Path) -> list[str]:
    """The ids of the groups with a share state in ``directory`` (``kaas inspect``):
    decoded from the file names, or, for a name too long to be reversible, read from its
    snapshot (a digest name whose snapshot cannot be read is given as it is)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    encoded = {n[:-len(".snapshot")] for n in names if n.endswith(".snapshot")}
    encoded |= {m.group("group") for n in names if (m := _JOURNAL.match(n)) is not None}
    out = []
    for enc in encoded:
        group = enc if is_digest_name(enc) else decode_name(enc)
        if is_digest_name(enc):
            path = Path(directory) / f"{enc}.snapshot"
            try:
                obj = _snapshot_object(path, path.read_bytes())
                group = obj["group"] if isinstance(obj.get("group"), str) else enc
            except (OSError, CorruptState):
                pass
        out.append(group)
    return sorted(out)


class NewerWriter(Exception):
    """A later leader of the partition has written the share state: ours is not to touch."""


def remove(directory: Path, group: str, epoch: int, *, fsync: bool = True) -> None:
    """Remove ``group`` 's share state (its journals, then its snapshot), as the leader of
    ``epoch``. A crash part-way leaves the snapshot, which a retry removes.

    Raises:
        NewerWriter: a journal of a later epoch exists (nothing is removed).
        OSError: a removal failed; what is left is still a consistent state.
    """
    found = journals(directory, group)
    if any(e > epoch for e, _ in found):
        raise NewerWriter(f"{directory}: a journal of an epoch after {epoch}")
    for e, s in found:
        try:
            os.unlink(journal_path(directory, group, e, s))
        except FileNotFoundError:
            pass
    try:
        os.unlink(snapshot_path(directory, group))
    except FileNotFoundError:
        return
    if fsync:
        atomic.fsync_dir(directory, point="state.fsync")


def load(directory: Path, group: str) -> Loaded:
    """Read the snapshot and the journals it names (close-to-open: every file afresh).

    Raises:
        CorruptState: the snapshot does not parse, or a journal holds a bad frame that is
            not its torn tail.
    """
    out = Loaded()
    path = snapshot_path(directory, group)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = None
    if data is not None:
        out.snapshot, out.journal_from = _parse_snapshot(path, data, group)
    out.journals = [j for j in journals(directory, group) if j >= out.journal_from]
    for epoch, seq in out.journals:
        jpath = journal_path(directory, group, epoch, seq)
        try:
            raw = jpath.read_bytes()
        except FileNotFoundError:  # removed by a later snapshot meanwhile: nothing to miss
            continue
        deltas, cut = _parse_journal(jpath, raw)
        out.deltas += deltas
        if cut is not None:
            out.cuts.append(f"{jpath.name}: {len(raw) - cut} torn bytes at {cut} left out")
    return out


def load_window(directory: Path, group: str, limits: ShareLimits) -> tuple[SharePartition | None, Loaded]:
    """The share partition as its files hold it (None: it has no files: a fresh one),
    ACQUIRED records still marked so (the caller ``restore`` s them).

    Raises:
        CorruptState: see ``load``; journals without a snapshot; or deltas that do not
            replay over the snapshot.
    """
    loaded = load(directory, group)
    return replay(directory, group, limits, loaded), loaded


def replay(directory: Path, group: str, limits: ShareLimits, loaded: Loaded) -> SharePartition | None:
    """The share partition ``loaded`` (``load`` 's of ``group`` in ``directory``) holds;
    None when it has no files.

    Raises:
        CorruptState: journals without a snapshot, or deltas that do not replay over it.
    """
    where = str(Path(directory) / f"{encode_name(group)}.*")
    if loaded.snapshot is None:
        if loaded.deltas:
            raise CorruptState(where, "journals without a snapshot")
        return None
    try:
        return SharePartition.replayed(limits, loaded.snapshot, loaded.deltas)
    except ValueError as exc:
        raise CorruptState(where, f"state does not replay: {exc}") from None


class Snapshot(TypedDict):
    """The msgpack object of a snapshot file (after its magic and checksum), format
    ``FORMAT``: the group and leader epoch that wrote it, the first journal to replay after
    it as ``[epoch, seq]``, and the ``Persisted`` state (each range ``[first, last, state,
    delivery count]``)."""

    format: int
    group: str
    epoch: int
    journal: list[int]
    start: int
    end: int
    ranges: list[list[int]]


def _snapshot_object(path: Path, data: bytes) -> Snapshot:
    """The object a snapshot file holds (magic, checksum, msgpack, format checked; its
    members are checked by their readers).

    Raises:
        CorruptState: any of those checks failed.
    """
    if len(data) < 8 or data[:4] != _MAGIC:
        raise CorruptState(str(path), "not a share-state snapshot (bad magic)")
    (crc,) = struct.unpack_from(">I", data, 4)
    payload = data[8:]
    if crc32c.crc32c(payload) != crc:
        raise CorruptState(str(path), "checksum mismatch")
    try:
        obj = msgpack.unpackb(payload)
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise ValueError(f"format {obj.get('format') if isinstance(obj, dict) else None!r}")
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptState(str(path), f"unreadable snapshot: {exc}") from None
    return cast(Snapshot, obj)


def _parse_snapshot(path: Path, data: bytes, group: str) -> tuple[Persisted, tuple[int, int]]:
    obj = _snapshot_object(path, data)
    try:
        if obj.get("group") != group:
            raise ValueError(f"written for group {obj.get('group')!r}")
        je, js = obj["journal"]
        snap = Persisted(_int(obj["start"]), _int(obj["end"]), _ranges(obj["ranges"]))
        return snap, (_int(je), _int(js))
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptState(str(path), f"unreadable snapshot: {exc}") from None


def _parse_journal(path: Path, raw: bytes) -> tuple[list[Delta], int | None]:
    """The deltas of a journal and where its torn tail starts (None: it has none)."""
    out: list[Delta] = []
    pos = 0
    while pos < len(raw):
        bad = None
        end = len(raw)
        if pos + _FRAME.size > len(raw):
            bad = "incomplete frame header"
        else:
            length, crc = _FRAME.unpack_from(raw, pos)
            end = pos + _FRAME.size + length
            if length == 0:
                bad = "empty frame"
            elif end > len(raw):
                bad = "incomplete frame"
            elif crc32c.crc32c(raw[pos + _FRAME.size:end]) != crc:
                bad = "checksum mismatch"
        if bad is not None:
            if end >= len(raw) or not raw[pos:].strip(b"\0"):
                return out, pos
            raise CorruptState(str(path), f"{bad} at byte {pos} with more frames after it")
        try:
            start, stop, ranges = msgpack.unpackb(raw[pos + _FRAME.size:end])
            out.append(Delta(_int(start), _int(stop), _ranges(ranges)))
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise CorruptState(str(path), f"unreadable frame at byte {pos}: {exc}") from None
        pos = end
    return out, None


def _int(v: object) -> int:
    if type(v) is not int:
        raise ValueError(f"{v!r} is not an integer")
    return v


def _ranges(raw: object) -> tuple[tuple[int, int, int, int], ...]:
    if not isinstance(raw, list):
        raise ValueError("ranges are not a list")
    out = []
    for r in raw:
        if not isinstance(r, list) or len(r) != 4:
            raise ValueError(f"bad range {r!r}")
        out.append((_int(r[0]), _int(r[1]), _int(r[2]), _int(r[3])))
    return tuple(out)


def _encode_ranges(ranges: tuple[tuple[int, int, int, int], ...]) -> list[list[int]]:
    return [list(r) for r in ranges]


class ShareJournal:
    """The writer of one share partition's files, for the partition's leader at ``epoch``.

    Synchronous (storage); the owner serialises calls, runs ``begin``, ``write_snapshot``
    and ``fsync_fds`` where blocking file work may run, and calls ``append`` without an
    await between the machine's transition and the append, so the journal's order is the
    machine's. Durability is a group commit: ``take_dirty`` / ``fsync_fds`` /
    ``mark_durable`` over cumulative byte positions, as ``PartitionLog`` does.

    Args:
        directory: the partition's ``share`` directory.
        group: the share group id.
        epoch: the partition's leader epoch of this writer.
        fsync: fsync appends and snapshots (off only in tests).
    """

    def __init__(self, directory: Path, group: str, epoch: int, *, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.group = group
        self.epoch = epoch
        self.fsync = fsync
        self.seq = -1
        self.fd = -1
        self.size = 0  # bytes of the current journal
        self.written = 0  # bytes appended by this writer, over all its journals
        self.durable = 0
        self.failed: str | None = None
        self._dirty: set[int] = set()
        self._retired: set[int] = set()  # fds of journals rolled away, closed once synced

    @property
    def path(self) -> Path:
        return journal_path(self.directory, self.group, self.epoch, self.seq)

    def begin(self, state: Persisted) -> list[str]:
        """Start writing: a snapshot of ``state`` (everything replayed, and what the load
        changed) naming this writer's first journal, then that journal, created empty.
        Older journals are removed. Returns what could not be removed (reported, harmless:
        no reader replays them).

        Raises:
            OSError: the snapshot or the journal could not be written; nothing may be
                appended (the owner reports the partition unavailable and retries later).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        mine = [s for e, s in journals(self.directory, self.group) if e == self.epoch]
        self.seq = (max(mine) + 1) if mine else 0
        self._open_journal()
        self.write_snapshot(state, (self.epoch, self.seq))
        return self.remove_older()

    def _open_journal(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if self.fsync:
            try:
                atomic.fsync_dir(self.directory, point="state.fsync")
            except OSError:
                os.close(fd)
                raise
        if self.fd >= 0:
            self._retired.add(self.fd)  # closed after the next fsync (one may be running on it)
        self.fd = fd
        self.size = 0

    def write_snapshot(self, state: Persisted, journal_from: tuple[int, int]) -> None:
        """Replace the snapshot with ``state``, naming ``journal_from`` as the first
        journal to replay after it (tmp + fsync + rename).

        Raises:
            OSError: the write failed; the previous snapshot is in place.
        """
        snapshot: Snapshot = {"format": FORMAT, "group": self.group, "epoch": self.epoch,
                              "journal": list(journal_from), "start": state.start, "end": state.end,
                              "ranges": _encode_ranges(state.ranges)}
        payload = msgpack.packb(snapshot)
        data = _MAGIC + struct.pack(">I", crc32c.crc32c(payload)) + payload
        atomic.write_bytes(snapshot_path(self.directory, self.group), data, fsync=self.fsync)

    def remove_older(self) -> list[str]:
        """Remove the journals before the current one (after a snapshot naming it is
        durable). Returns the failures, as text."""
        failures = []
        for epoch, seq in journals(self.directory, self.group):
            if (epoch, seq) < (self.epoch, self.seq):
                try:
                    os.unlink(journal_path(self.directory, self.group, epoch, seq))
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    failures.append(f"{epoch}-{seq}: {exc}")
        return failures

    def append(self, delta: Delta) -> int:
        """Append one delta (not yet durable). Returns the position to wait for.

        Raises:
            OSError: the write failed: the writer is failed (``failed``) and appends no
                more; what reached the file is a torn tail for the next load.
        """
        if self.failed is not None:
            raise OSError(f"share journal {self.path.name} failed earlier: {self.failed}")
        payload = msgpack.packb([delta.start, delta.end, _encode_ranges(delta.ranges)])
        frame = _FRAME.pack(len(payload), crc32c.crc32c(payload)) + payload
        try:
            fs.write_all(self.fd, (frame,), point="state.write", path=str(self.path))
        except OSError as exc:
            self.failed = f"append failed: {exc}"
            raise
        self.size += len(frame)
        self.written += len(frame)
        self._dirty.add(self.fd)
        return self.written

    def take_dirty(self) -> tuple[int, list[int]]:
        """(position every byte before which the fsync of the returned fds makes durable,
        those fds)."""
        fds = list(self._dirty)
        self._dirty.clear()
        return self.written, fds

    def fsync_fds(self, fds: list[int]) -> None:
        """fsync ``fds`` (a worker thread may run this); retired journals are closed after.

        Raises:
            OSError: an fsync failed: the writer is failed; never retried as success.
        """
        try:
            if self.fsync:
                for fd in fds:
                    fs.fsync(fd, point="state.fsync", path=str(self.path))
        except OSError as exc:
            self.failed = f"fsync failed: {exc}"
            raise
        finally:
            # one fsync runs at a time (the owner's group commit): a retired journal nobody
            # wrote to since it was taken is done with
            for fd in list(self._retired):
                if fd not in self._dirty:
                    self._retired.discard(fd)
                    os.close(fd)

    def mark_durable(self, end: int) -> None:
        self.durable = max(self.durable, end)

    def should_roll(self) -> bool:
        return self.size >= ROLL_BYTES

    def roll(self) -> tuple[int, int]:
        """Start the next journal (synchronous, with the machine: every later append goes
        there). Returns its (epoch, seq), which the owner's next snapshot names.

        Raises:
            OSError: the new journal could not be created; appends go on in the old one.
        """
        seq = self.seq
        self.seq += 1
        try:
            self._open_journal()
        except OSError:
            self.seq = seq
            raise
        return self.epoch, self.seq

    def close(self) -> None:
        """Close the files (after the last fsync the owner waited for)."""
        for fd in (self.fd, *self._retired):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fd = -1
        self._retired.clear()
        self._dirty.clear()
