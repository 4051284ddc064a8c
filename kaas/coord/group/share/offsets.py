"""The admin side of share groups at their coordinator (KIP-932, KIP-1226):
DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets, and the
share state a DeleteGroups of a share group takes along.

A share group's state of a partition (its start offset, what is in flight) is written by
the partition's leader alone (design section 11), not by the group's coordinator. So the
coordinator asks each leader (``coord.share_partitions.admin.ShareStateAdmin``): itself directly, a
peer over a connection of its own with the share-state RPCs Apache's brokers send their
share coordinator (ReadShareGroupStateSummary v1, InitializeShareGroupState,
DeleteShareGroupState; the peer checks CLUSTER_ACTION), with ListOffsets for a peer's high
watermark (the lag). The coordinator writes nothing of the share state; it checks the
group (it exists, is a share group, has no members) under the group's lock, which it holds
until every leader answered, so no member joins half-way through.

Which share partitions a group has (DescribeShareGroupOffsets with all topics, DeleteGroups)
is read off the volume: every partition directory holding the group's snapshot or journal.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import structlog
import trio
from kio.schema.delete_share_group_state.v0 import request as dss
from kio.schema.errors import ErrorCode
from kio.schema.initialize_share_group_state.v0 import request as iss
from kio.schema.list_offsets.v7 import request as lo
from kio.schema.read_share_group_state_summary.v1 import request as rss
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from kaas.coord.group.entry import GroupEntry
from kaas.coord.group.share.runtime import ShareGroups
from kaas.coord.ports import Host, TopicCatalog
from kaas.coord.share_partitions.admin import ShareStateAdmin, share_lag
from kaas.errors import KaasError, PeerUnavailable
from kaas.storage import share_state
from kaas.storage.topics import TopicMeta

__all__ = ["Described", "ShareOffsets", "ShareOffsetsHost"]

log = structlog.get_logger()

T = TypeVar("T")
Key = tuple[str, int]  # (topic, partition)
Result = tuple[ErrorCode, str | None]
PEER_TIMEOUT_S = 10.0  # one leader's answer (an admin client waits 30 s for the whole request)
LATEST = -1


class Forwarder(Protocol):
    async def forward(self, broker_id: int, api_key: int, version: int, body: Any, timeout: float) -> Any:
        """A peer's decoded response to ``body``; raises ``PeerUnavailable`` (LinkFailed)."""


class ShareGroupsHolder(Protocol):
    """The group coordinator as the share-group admin sees it."""

    @property
    def groups(self) -> Mapping[str, GroupEntry]:
        """The groups this broker holds, by id."""

    @property
    def shares(self) -> ShareGroups: ...

    def check_owner(self, group_id: str) -> None: ...


class ShareOffsetsHost(Host, Protocol):
    """The broker as the share-group admin sees it (besides ``Host`` 's layout and file work)."""

    @property
    def id(self) -> int: ...

    @property
    def topics(self) -> TopicCatalog: ...

    @property
    def groups(self) -> ShareGroupsHolder: ...

    @property
    def share_state(self) -> ShareStateAdmin:
        """This broker's calls as a partition leader."""

    @property
    def peer_links(self) -> Forwarder: ...

    def leader(self, topic: str, index: int) -> tuple[int, int]:
        """(leader id, epoch); (-1, epoch) without a live leader."""


@dataclass(frozen=True, slots=True)
class Described:
    """One partition of DescribeShareGroupOffsets: -1 for what is not known (no state)."""

    start_offset: int = -1
    leader_epoch: int = -1
    lag: int = -1


class ShareOffsets:
    """The share-group admin calls of the group coordinator (``broker.share_offsets``)."""

    def __init__(self, host: ShareOffsetsHost) -> None:
        self.host = host

    # ------------------------------------------------------------------ the three APIs

    async def describe(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                       ) -> list[tuple[str, uuid.UUID | None, dict[int, Described]]]:
        """Each asked partition's start offset, leader epoch and lag (every share
        partition of the group when ``topics`` is None). As Apache, an unknown group or
        topic, or a partition with no state or whose leader could not be asked, is
        described with -1s, not an error.

        Raises:
            KaasError: NOT_COORDINATOR and the like (the group is not coordinated here).
        """
        self.host.groups.check_owner(group_id)
        if topics is None:
            keys = await self._with_state(group_id)
            topics = [(t, [p for tt, p in keys if tt == t]) for t in sorted({t for t, _ in keys})]
        asked = [(t, p) for t, ps in topics for p in ps if self._exists(t, p)]
        found = await self._each_leader(asked, lambda leader, keys: self._describe(leader, group_id, keys))
        out: list[tuple[str, uuid.UUID | None, dict[int, Described]]] = []
        for name, parts in topics:
            meta = self._topic(name)
            if meta is None:
                out.append((name, None, {p: Described() for p in parts}))
                continue
            out.append((name, meta.topic_id, {p: d if isinstance(d := found.get((name, p)), Described)
                                              else Described() for p in parts}))
        return out

    async def alter(self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]],
                    ) -> list[tuple[str, uuid.UUID | None, dict[int, Result]]]:
        """Give each partition's share state the new start offset (nothing in flight).

        Raises:
            KaasError: as ``empty_group``.
        """
        async with self.empty_group(group_id, create=True) as e:
            starts = {(t, p): s for t, ps in topics for p, s in ps if self._exists(t, p)}
            done = await self._each_leader(list(starts), lambda leader, keys: self._change(
                leader, group_id, keys, starts))
            ok = [k for k in starts if (r := done.get(k)) is not None and r[0] == ErrorCode.none]
            await self.host.groups.shares.mark_initialized(e, {str(tid): frozenset(p for t, p in ok if t == name)
                                                               for name, tid in self._names(ok).items()})
        return [(name, meta.topic_id if (meta := self._topic(name)) else None,
                 {p: _result(done.get((name, p)), self._exists(name, p)) for p, _ in ps}) for name, ps in topics]

    async def delete(self, group_id: str, topics: list[str]) -> list[tuple[str, uuid.UUID | None, Result]]:
        """Remove the group's share state of the topics, per topic: UNKNOWN_TOPIC_OR_PARTITION
        for a topic that does not exist or where the group has none (as Apache).

        Raises:
            KaasError: as ``empty_group``.
        """
        async with self.empty_group(group_id):
            keys = await self._with_state(group_id, set(topics))
            done = await self._each_leader(keys, lambda leader, ks: self._change(leader, group_id, ks, None))
        out: list[tuple[str, uuid.UUID | None, Result]] = []
        for name in topics:
            meta = self._topic(name)
            if meta is None:
                out.append((name, None, (ErrorCode.unknown_topic_or_partition, None)))
                continue
            mine = [done[k] for k in keys if k[0] == name]
            failed = next((r for r in mine if r[0] != ErrorCode.none), None)
            out.append((name, meta.topic_id, failed or ((ErrorCode.none, None) if mine else (
                ErrorCode.unknown_topic_or_partition, "There is no offset information to delete."))))
        return out

    async def delete_all(self, group_id: str) -> Result:
        """Remove every share state of the group (DeleteGroups, under the group's lock,
        before its file goes): the first failure, or NONE."""
        keys = await self._with_state(group_id)
        done = await self._each_leader(keys, lambda leader, ks: self._change(leader, group_id, ks, None))
        return next((r for r in done.values() if r[0] != ErrorCode.none), (ErrorCode.none, None))

    # ------------------------------------------------------------------ the group

    @asynccontextmanager
    async def empty_group(self, group_id: str, create: bool = False) -> AsyncIterator[GroupEntry]:
        """The share group, its lock held, while it has no members; with ``create``, made
        (empty) when no group has the id (AlterShareGroupOffsets, as Apache 4.2+).

        Raises:
            KaasError: NOT_COORDINATOR and the like; GROUP_ID_NOT_FOUND (no group, or one of
                another type); UNKNOWN_SERVER_ERROR (its state unreadable); NON_EMPTY_GROUP.
        """
        coord = self.host.groups
        e, _g = await coord.shares.entry_or_new(group_id) if create else coord.shares.entry(group_id)
        async with e.lock:
            if coord.groups.get(group_id) is not e or e.share is None:
                raise KaasError(ErrorCode.not_coordinator, "group moved")
            if not e.share.is_empty():
                raise KaasError(ErrorCode.non_empty_group, f"Share group {group_id} is not empty.")
            yield e

    # ------------------------------------------------------------------ the leaders

    def _topic(self, name: str) -> TopicMeta | None:
        return self.host.topics.get(name)

    def _exists(self, name: str, index: int) -> bool:
        meta = self._topic(name)
        return meta is not None and 0 <= index < meta.partitions

    async def _with_state(self, group_id: str, only: set[str] | None = None) -> list[Key]:
        """The partitions whose directory holds a share state of the group."""
        layout = self.host.layout
        dirs = [((m.name, p), layout.partition_dir(m.name, p) / share_state.DIR)
                for m in list(self.host.topics.topics.values()) if only is None or m.name in only
                for p in range(m.partitions)]

        def scan() -> list[Key]:
            return [k for k, d in dirs if share_state.has_state(Path(d), group_id)]
        return await self.host.run_io(scan)

    async def _each_leader(self, keys: list[Key], ask: Callable[[int, list[Key]], Awaitable[Mapping[Key, T]]],
                           ) -> dict[Key, T | Result]:
        """``ask(leader, its keys)`` of every leader at once; a key without a live leader
        maps to LEADER_NOT_AVAILABLE."""
        by_leader: dict[int, list[Key]] = {}
        out: dict[Key, T | Result] = {}
        for k in keys:
            leader, _epoch = self.host.leader(*k)
            if leader < 0:
                out[k] = (ErrorCode.leader_not_available, "the partition has no live leader")
            else:
                by_leader.setdefault(leader, []).append(k)

        async def one(leader: int, ks: list[Key]) -> None:
            try:
                out.update(await ask(leader, ks))
            except PeerUnavailable as exc:
                log.warning("share_state_peer_failed", leader=leader, error=str(exc))
                out.update(dict.fromkeys(ks, (ErrorCode.leader_not_available, f"leader {leader}: {exc}")))

        async with trio.open_nursery() as nursery:
            for leader, ks in by_leader.items():
                nursery.start_soon(one, leader, ks)
        return out

    async def _describe(self, leader: int, group_id: str, keys: list[Key]) -> dict[Key, Described | Result]:
        out: dict[Key, Described | Result] = {}
        if leader == self.host.id:
            for k in keys:
                try:
                    st = await self.host.share_state.read(group_id, *k)
                except KaasError as exc:
                    out[k] = (exc.code, exc.message)
                    continue
                out[k] = Described() if st is None else Described(st.start, st.leader_epoch, st.lag)
            return out
        ids = self._ids(keys)
        summary = await self._forward(leader, rss.ReadShareGroupStateSummaryRequest(group_id=group_id, topics=tuple(
            rss.ReadStateSummaryData(topic_id=tid, partitions=tuple(
                rss.PartitionData(partition=i32(p), leader_epoch=i32(-1)) for p in ps))
            for tid, ps in ids.items())))
        ends = await self._forward(leader, lo.ListOffsetsRequest(
            replica_id=BrokerId(-1), isolation_level=i8(0), topics=tuple(
                lo.ListOffsetsTopic(name=TopicName(t), partitions=tuple(lo.ListOffsetsPartition(
                    partition_index=i32(p), current_leader_epoch=i32(-1), timestamp=i64(LATEST)) for tt, p in keys
                    if tt == t)) for t in sorted({t for t, _ in keys}))))
        hw = {(t.name, p.partition_index): p.offset if p.error_code == ErrorCode.none else -1
              for t in ends.topics for p in t.partitions}
        names = {tid: name for name, tid in self._names(keys).items()}
        for r in summary.results:
            for p in r.partitions:
                k = (names.get(r.topic_id, ""), p.partition)
                if p.error_code != ErrorCode.none:
                    out[k] = (p.error_code, p.error_message)
                elif p.start_offset >= 0:
                    out[k] = Described(p.start_offset, p.leader_epoch,
                                       share_lag(hw.get(k, -1), p.start_offset, p.delivery_complete_count))
                else:
                    out[k] = Described()
        return out

    async def _change(self, leader: int, group_id: str, keys: list[Key],
                      starts: Mapping[Key, int] | None) -> dict[Key, Result]:
        """At the leader: each key's state starts afresh at ``starts[key]``, or (None) is
        removed."""
        out: dict[Key, Result] = {}
        if leader == self.host.id:
            admin = self.host.share_state
            for k in keys:
                try:
                    if starts is None:
                        await admin.delete(group_id, *k)
                    else:
                        await admin.initialize(group_id, *k, starts[k])
                    out[k] = (ErrorCode.none, None)
                except KaasError as exc:
                    out[k] = (exc.code, exc.message)
            return out
        ids = self._ids(keys)
        names = {tid: name for name, tid in self._names(keys).items()}
        req: Any
        if starts is None:
            req = dss.DeleteShareGroupStateRequest(group_id=group_id, topics=tuple(dss.DeleteStateData(
                topic_id=tid, partitions=tuple(dss.PartitionData(partition=i32(p)) for p in ps))
                for tid, ps in ids.items()))
        else:
            req = iss.InitializeShareGroupStateRequest(group_id=group_id, topics=tuple(iss.InitializeStateData(
                topic_id=tid, partitions=tuple(iss.PartitionData(
                    partition=i32(p), state_epoch=i32(0), start_offset=i64(starts[(names[tid], p)])) for p in ps))
                for tid, ps in ids.items()))
        resp = await self._forward(leader, req)
        for r in resp.results:
            for p in r.partitions:
                out[(names.get(r.topic_id, ""), p.partition)] = (p.error_code, p.error_message)
        for k in keys:
            out.setdefault(k, (ErrorCode.unknown_server_error, "the leader did not answer for the partition"))
        return out

    def _names(self, keys: list[Key]) -> dict[str, uuid.UUID]:
        """Topic ids of the keys' topics (one deleted meanwhile is left out)."""
        return {t: meta.topic_id for t in {t for t, _ in keys} if (meta := self._topic(t)) is not None}

    def _ids(self, keys: list[Key]) -> dict[uuid.UUID, list[int]]:
        names = self._names(keys)
        out: dict[uuid.UUID, list[int]] = {}
        for t, p in keys:
            if t in names:
                out.setdefault(names[t], []).append(p)
        return out

    async def _forward(self, leader: int, req: Any) -> Any:
        return await self.host.peer_links.forward(leader, req.__api_key__, req.__version__, req, PEER_TIMEOUT_S)


def _result(done: object, exists: bool) -> Result:
    if not exists:
        return ErrorCode.unknown_topic_or_partition, None
    if isinstance(done, tuple):
        return done
    return ErrorCode.unknown_server_error, "no answer"
