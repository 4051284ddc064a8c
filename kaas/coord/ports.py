"""What the coordinators need from the broker, as ``typing.Protocol`` classes.

The coordinators never import ``kaas.broker``, ``kaas.net`` or ``kaas.tasks``: they are
handed the broker and see it through these ports. ``kaas.broker.Broker`` satisfies
``TxnBroker`` and ``GroupBroker`` structurally (without naming them), its ``Partition``
satisfies ``LedPartition``, its ``peer_links`` ``MarkerLinks``, its ``cluster``
``ClusterView`` and its ``groups`` ``OffsetHooks``. mypy (``make lint``) checks it where the
broker hands itself over (``GroupCoordinator(self)``, ``TxnCoordinator(broker)``): a member
a port declares and the broker lacks, or with another signature, fails the lint. Test fakes
provide what a test needs.

Each port lists exactly what the coordinators use; everything is read-only to them
(properties), except what they call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker

from kaas.clock import Clock
from kaas.domain.groups.configs import GroupConfig
from kaas.settings import Settings
from kaas.storage.partition_log import AppendResult, PartitionLog
from kaas.storage.paths import Layout
from kaas.storage.topics import TopicMeta

__all__ = ["ClusterView", "GroupBroker", "GroupConfigSource", "Host", "LedPartition", "MarkerLinks", "MarkerResult",
           "OffsetHooks", "TopicCatalog", "TxnBroker"]

T = TypeVar("T")

MarkerResult = dict[tuple[str, int], ErrorCode]
"""The error code of each (topic, partition) of one marker, as a peer answered it."""


class LedPartition(Protocol):
    """A partition this broker leads (``broker.partitions``' values)."""

    @property
    def topic(self) -> str: ...

    @property
    def index(self) -> int: ...

    @property
    def closed(self) -> bool:
        """True once relinquished, deposed or taken offline."""

    @property
    def log(self) -> PartitionLog:
        """Its log: producer state (fencing, verification) and end offset."""

    def append_control(self, producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int) -> AppendResult | None:
        """Append a COMMIT/ABORT marker; None when it is stale."""

    async def wait_durable(self, offset: int) -> None:
        """Return once every byte below ``offset`` is fsynced."""


class TopicCatalog(Protocol):
    """The topic files (``broker.topics``): does a partition still exist?"""

    def get(self, name: str) -> TopicMeta | None: ...

    def refresh(self) -> object:
        """Re-read the topic files."""

    @property
    def topics(self) -> Mapping[str, TopicMeta]:
        """Every topic, by name, as last read."""

    @property
    def version(self) -> int:
        """Rises whenever ``topics`` changes."""


class MarkerLinks(Protocol):
    """The links to the peers (``broker.peer_links``), for WriteTxnMarkers."""

    async def write_markers(self, broker_id: int, markers: Sequence[WritableTxnMarker]) -> list[MarkerResult] | None:
        """Per marker, the code of each partition; None when the link failed."""


class OffsetHooks(Protocol):
    """The group coordinator (``broker.groups``) as the transaction coordinator sees it."""

    async def complete_txn(self, group_id: str, producer_id: int, commit: bool) -> None:
        """Commit or discard the offsets ``producer_id`` staged in the group."""


class ClusterView(Protocol):
    """The membership runtime (``broker.cluster``) as the group coordinator sees it."""

    def lease_valid(self) -> bool:
        """This broker holds a write lease."""

    def has_peers(self) -> bool:
        """Another broker is registered."""

    def acknowledged(self) -> bool:
        """Every live peer has read a heartbeat of this incarnation."""

    def coordinators_settled(self) -> bool:
        """Every live broker has applied the coordinators list in force."""


class Host(Protocol):
    """What every coordinator uses: settings, the time, the volume, file work, group placement."""

    @property
    def clock(self) -> Clock:
        """The broker's one clock (session and transaction timeouts, commit times)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def layout(self) -> Layout: ...

    async def run_io(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking file work (a worker thread, or inline on tmpfs)."""

    def owns_group(self, group_id: str) -> bool:
        """This broker coordinates the group."""


class GroupConfigSource(Protocol):
    """A group's configs (KIP-848/932) as the broker resolves them."""

    def group_config(self, group_id: str) -> GroupConfig:
        """What ``group_id`` runs with: its group configs (IncrementalAlterConfigs on a
        GROUP resource) over the broker's ``group.consumer.*`` / ``group.share.*``
        settings. Cheap enough for every heartbeat and fetch.

        Raises:
            KaasError: KAFKA_STORAGE_ERROR, the group config file was never readable.
        """


class GroupBroker(Host, GroupConfigSource, Protocol):
    """The broker as the group coordinator (``kaas.coord.group``) sees it."""

    @property
    def cluster(self) -> ClusterView: ...

    @property
    def topics(self) -> TopicCatalog:
        """The topics consumer groups subscribe to (KIP-848 assignments, regexes)."""


class TxnBroker(Host, Protocol):
    """The broker as the transaction coordinator (``kaas.coord.txn``) sees it."""

    @property
    def id(self) -> int: ...

    @property
    def memory_backed(self) -> bool:
        """The data directory is on tmpfs (no stat poll of the marker queue needed)."""

    @property
    def controller_epoch(self) -> int:
        """Written into markers as the coordinator epoch."""

    @property
    def partitions(self) -> Mapping[tuple[str, int], LedPartition]:
        """The partitions this broker leads, by (topic, index)."""

    @property
    def topics(self) -> TopicCatalog: ...

    @property
    def groups(self) -> OffsetHooks: ...

    @property
    def peer_links(self) -> MarkerLinks: ...

    def owns_slot(self, slot: int) -> bool:
        """This broker coordinates the transaction slot and may write its file."""

    def txn_owner(self, transactional_id: str) -> int | None:
        """The broker that coordinates ``transactional_id``."""

    def group_owner(self, group_id: str) -> int | None:
        """The broker that coordinates the group."""

    def leader(self, topic: str, index: int) -> tuple[int, int]:
        """(leader id, leader epoch) from the assignment; (-1, epoch) without a live leader."""

    def alive_brokers(self) -> list[int]:
        """The live brokers (a dead one's marker queue is claimed)."""

    def allocate_pid(self) -> int:
        """A new producer id.

        Raises:
            OSError: the PID block file could not be written.
        """
