"""Topic administration on the shared volume: create, delete, add partitions, alter
configs, and the waits that let CreateTopics, CreatePartitions and DeleteTopics answer only
once every live broker serves the change (docs/control_plane.rst). Reached as
``broker.admin``; the topic files themselves are ``storage.topics``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas import configs
from kaas.domain import replicas
from kaas.storage.topics import TopicMeta, remove_topic_data, valid_topic_name

if TYPE_CHECKING:
    from kaas.broker.partition import Partition
    from kaas.broker.ports import AdminHost
    from kaas.storage.segment import LogConfig

log = structlog.get_logger()


class TopicAdmin:
    def __init__(self, broker: AdminHost[Partition]) -> None:
        self.broker = broker
        self._applied_meta: dict[str, object] = {}  # topic -> the TopicMeta its partitions' configs came from
        # names whose deletion this broker (the controller) is carrying out: it places none of
        # them until their data is set aside, so a topic re-created meanwhile under the same
        # name (an auto-create racing the deletion) gets its partitions only afterwards
        self.deleting: set[str] = set()

    async def ensure_topic(self, name: str, *, auto_create: bool) -> TopicMeta | None:
        meta = self.broker.topics.get(name)
        if meta is None:
            self.broker.topics.refresh()
            meta = self.broker.topics.get(name)
        if meta is None and auto_create and self.broker.settings.auto_create_topics and valid_topic_name(name):
            meta, _err = await self.create_topic(name, self.broker.settings.num_partitions, {})
            if meta is None:
                self.broker.topics.refresh()
                meta = self.broker.topics.get(name)
        return meta

    async def ensure_partitions(self, meta: TopicMeta, timeout: float = 5.0) -> bool:
        """Wait (bounded by ``timeout`` seconds) until every live broker serves the topic's
        ``meta.partitions`` partitions: the controller assigned them, each leader opened its
        own, and every live broker applied that assignment (so any broker's Metadata names
        the leaders and routes to them). Returns False when the time ran out first."""
        return await self.wait_served(lambda: self.serves_topic(meta.name, meta.partitions), timeout)

    async def wait_served(self, ready: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``ready()``, re-checked after every cluster tick (the doorbell makes
        those milliseconds apart on a local volume), for at most ``timeout`` seconds."""
        self.broker.cluster.wake()
        with trio.move_on_after(max(0.0, timeout)):
            while not ready():
                await self.broker.cluster.wait_changed()
            return True
        return ready()

    def serves_topic(self, name: str, partitions: int) -> bool:
        """Does the whole cluster serve partitions ``0..partitions-1`` of ``name``?"""
        a = self.broker.cluster.assignment
        row = a.partitions.get(name) if a is not None else None
        if row is None or len(row) < partitions or self.broker.topics.get(name) is None:
            return False
        version = 0
        for p in range(partitions):
            if self.broker.served_leader(name, p)[0] < 0:
                return False
            version = max(version, self.broker.cluster.since(name, p))
        return self.broker.cluster.applied_everywhere(version)

    def serves_without(self, name: str) -> bool:
        """Has every live broker applied an assignment without topic ``name``?"""
        a = self.broker.cluster.assignment
        return a is not None and name not in a.partitions and self.broker.cluster.applied_everywhere(a.version)

    async def create_topic(self, name: str, partitions: int, topic_configs: dict[str, str],
                           *, validate_only: bool = False, replication_factor: int = 1,
                           replica_assignment: dict[int, tuple[int, ...]] | None = None,
                           timeout: float = 5.0) -> tuple[TopicMeta | None, tuple[ErrorCode, str | None]]:
        """Create the topic file, then wait up to ``timeout`` seconds until the cluster
        serves the topic (``ensure_partitions``); REQUEST_TIMED_OUT if it did not by then
        (the topic exists and comes into service anyway, as with Apache)."""
        if not valid_topic_name(name):
            return None, (ErrorCode.invalid_topic_exception, f"invalid topic name {name!r}")
        if partitions == -1:
            partitions = self.broker.settings.num_partitions
        if partitions <= 0:
            return None, (ErrorCode.invalid_partitions, "partition count must be positive")
        for k, v in topic_configs.items():
            err = configs.validate(k, v)
            if err:
                return None, (ErrorCode.invalid_config, err)
        self.broker.topics.refresh()
        if self.broker.topics.get(name) is not None:
            return None, (ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        if validate_only:
            return None, (ErrorCode.none, None)
        meta = await trio.to_thread.run_sync(self.broker.topics.create, name, partitions, topic_configs,
                                             replication_factor, replica_assignment)
        if meta is None:
            return None, (ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        log.info("topic_created", topic=name, partitions=partitions, topic_id=str(meta.topic_id))
        if timeout > 0 and not await self.ensure_partitions(meta, timeout):
            return meta, (ErrorCode.request_timed_out, f"topic {name} created; not yet served by every broker")
        return meta, (ErrorCode.none, None)

    async def delete_topic(self, name: str, timeout: float = 5.0) -> ErrorCode:
        """``delete_topics`` of one topic."""
        return (await self.delete_topics([name], timeout))[name]

    async def delete_topics(self, names: list[str], timeout: float = 5.0) -> dict[str, ErrorCode]:
        """Delete the topic files, all of them first; wait up to ``timeout`` seconds until
        every live broker applied an assignment without them (their leaders closed their
        partitions); then set their partition directories aside. One wait for them all:
        one at a time, a DeleteTopics of a hundred topics took a cluster round trip each
        and ran out of time (librdkafka's 0045). REQUEST_TIMED_OUT for each topic when the
        wait ran out: the directories are set aside all the same (a leader that has not
        closed its files yet only writes into files set aside).

        Until its directories are set aside, the controller (this broker: deletions are
        forwarded to it) places no topic of a name being deleted (``deleting``): a topic
        re-created under the name meanwhile, say by a client's auto-create, would otherwise
        keep the old incarnation's row in the assignment, so its leaders would never close
        the old partitions, the wait would run out, and the new topic's records would go
        into the directories set aside.

        Returns:
            ``{name: error code}``: NONE, REQUEST_TIMED_OUT, or UNKNOWN_TOPIC_OR_PARTITION
            for a name with no topic.
        """
        self.broker.topics.refresh()
        out: dict[str, ErrorCode] = {}
        metas: dict[str, TopicMeta] = {}
        for name in names:
            meta = self.broker.topics.get(name)
            if meta is None:
                out[name] = ErrorCode.unknown_topic_or_partition
            else:
                metas[name] = meta
        if not metas:
            return out
        self.deleting |= metas.keys()
        try:
            for name in metas:
                await trio.to_thread.run_sync(self.broker.topics.delete, name)
            served = await self.wait_served(lambda: all(self.serves_without(n) for n in metas), timeout)
            for name, meta in metas.items():
                await self._set_aside(meta)
                log.info("topic_deleted", topic=name, served=served)
                out[name] = ErrorCode.none if served else ErrorCode.request_timed_out
        finally:
            self.deleting -= metas.keys()
            self.broker.cluster.wake()  # a topic re-created meanwhile is placed now
        return out

    async def _set_aside(self, meta: TopicMeta) -> None:
        """Close this broker's partitions of a deleted topic and set its directories aside."""
        for p in range(meta.partitions):
            part = self.broker.partitions.get((meta.name, p))
            if part is not None:
                await self.broker.relinquish(part)
        delay = int(configs.effective(self.broker.settings, meta.configs)["file.delete.delay.ms"][0])
        await trio.to_thread.run_sync(remove_topic_data, self.broker.layout.topic_dir(meta.name), meta, delay,
                                      self.broker.clock.wall_ms())

    async def add_partitions(self, name: str, count: int, *, validate_only: bool = False,
                             assignments: list[tuple[int, ...]] | None = None,
                             timeout: float = 5.0) -> tuple[ErrorCode, str | None]:
        """Grow the topic to ``count`` partitions; ``assignments``: the new partitions'
        manual replica lists (checked as Apache does, ``replicas.check_add``)."""
        self.broker.topics.refresh()
        meta = self.broker.topics.get(name)
        if meta is None:
            return ErrorCode.unknown_topic_or_partition, None
        if count <= meta.partitions:
            return ErrorCode.invalid_partitions, (f"The topic {name} currently has {meta.partitions} partition(s); "
                                                  f"{count} would not be an increase.")
        manual = dict(meta.replica_assignment)
        if assignments is not None:
            lists = replicas.check_add(assignments, meta.partitions, count, meta.replication_factor,
                                       self.broker.registered_brokers(), self.broker.alive_brokers())
            if isinstance(lists, replicas.AssignmentError):
                return ErrorCode[lists.error], lists.message
            manual.update({meta.partitions + i: r for i, r in enumerate(lists)})
        if validate_only:
            return ErrorCode.none, None
        new = replace(meta, partitions=count, replica_assignment=manual)
        await trio.to_thread.run_sync(self.broker.topics.update, new)
        log.info("partitions_created", topic=name, partitions=count)
        if timeout > 0 and not await self.ensure_partitions(new, timeout):
            return ErrorCode.request_timed_out, f"{count} partitions created; not yet served by every broker"
        return ErrorCode.none, None

    async def reassign(self, name: str, lists: dict[int, tuple[int, ...]], timeout: float) -> bool:
        """Replace the manual replica lists of partitions of ``name`` (checked before, by
        ``reassignment.check_target``) in its topic file, then wait up to ``timeout``
        seconds until each of them is led (and served: opened) by a broker of its new list.
        Returns False when the time ran out first (the reassignment is then ongoing).

        Raises:
            OSError: the topic file could not be written (nothing changed).
        """
        meta = self.broker.topics.get(name)
        assert meta is not None
        await trio.to_thread.run_sync(self.broker.topics.update,
                                      replace(meta, replica_assignment={**meta.replica_assignment, **lists}))
        log.info("partitions_reassigned", topic=name, partitions=sorted(lists))

        def moved() -> bool:
            alive = set(self.broker.alive_brokers())
            return all(self.broker.served_leader(name, p)[0] in r or not set(r) & alive for p, r in lists.items())

        return await self.wait_served(moved, timeout)

    async def alter_topic_configs(self, name: str, new_configs: dict[str, str]) -> None:
        meta = self.broker.topics.get(name)
        assert meta is not None
        new = replace(meta, configs=new_configs)
        await trio.to_thread.run_sync(self.broker.topics.update, new)
        self.apply_topic_configs()

    def apply_topic_configs(self, *, force: bool = False) -> None:
        """Give each partition this broker leads its topic's configs as the topic files say
        now. Any broker serves AlterConfigs and writes the topic file; the others find the
        change on their next membership tick (``TopicStore.refresh``) and apply it here.
        ``force``: the broker defaults changed (a dynamic broker config), so every topic."""
        if force:
            self._applied_meta.clear()
        fresh: dict[str, LogConfig] = {}
        for (name, _index), part in list(self.broker.partitions.items()):
            meta = self.broker.topics.get(name)
            if meta is None or self._applied_meta.get(name) is meta:
                continue  # (the cache replaces a topic's TopicMeta when its file changes)
            cfg = fresh.get(name)
            if cfg is None:
                cfg = fresh[name] = configs.log_config(self.broker.settings, meta.configs)
            if cfg != part.log.config:
                part.log.config = cfg
                log.info("topic_configs_applied", topic=name, partition=part.index)
        for name in fresh:
            self._applied_meta[name] = self.broker.topics.get(name)
