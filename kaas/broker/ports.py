"""What a led partition and the topic administration need of the broker, as Protocols.

``Broker`` (``core.py``) builds ``Partition``s and a ``TopicAdmin`` and hands itself to
them; they see it only through these narrow views, so neither imports ``core.py`` and the
package has no import cycle (an import-linter contract checks it). mypy checks that
``Broker`` satisfies both wherever it is passed. ``coord/ports.py`` does the same for the
coordinators.

Both are generic in the partition type (``Partition``, which its module supplies), so this
module imports neither ``partition.py`` nor ``core.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

from kaas.coord.ports import GroupConfigSource, Host

if TYPE_CHECKING:
    from kaas.aio import Wakeup
    from kaas.broker.cluster_view import ClusterView
    from kaas.clock import Clock
    from kaas.settings import Settings
    from kaas.storage.topics import TopicStore
    from kaas.wire.batch import BatchHeader


P = TypeVar("P")
P_contra = TypeVar("P_contra", contravariant=True)


class PartitionHost(GroupConfigSource, Protocol[P_contra]):
    """The broker as one of its led partitions sees it (``group_config``: a share group's
    record lock duration, delivery count limit and isolation level, KIP-932)."""

    @property
    def clock(self) -> Clock:
        """The broker's time (append times, marker timestamps)."""

    @property
    def cluster(self) -> ClusterView:
        """Its lease: a partition writes only while the broker holds it."""

    @property
    def memory_backed(self) -> bool:
        """The data directory is on tmpfs: fsync inline, no worker thread."""

    def take_offline(self, part: P_contra) -> None:
        """The partition's log failed: KAFKA_STORAGE_ERROR until recovery reopens it."""

    def notify_data(self) -> None:
        """Wake long-polling fetches: something was appended."""

    @property
    def flush_wakeup(self) -> Wakeup:
        """Set when a partition's flush.messages asks for an fsync (``tasks.flush``)."""

    def stats_fsync(self, seconds: float) -> None:
        """Count one group-commit fsync for /metrics."""

    def check_before_ack(self, part: P_contra) -> None:
        """Raise NOT_LEADER_OR_FOLLOWER when another broker took the partition over
        (the manifest's epoch moved) before an append is acknowledged."""

    async def verify_txn_partition(self, part: P_contra, transactional_id: str | None,
                                   header: BatchHeader) -> None:
        """KIP-890: the first transactional batch of a producer epoch on the partition is
        accepted only if the partition is in that producer's transaction."""


class AdminHost(Host, Protocol[P]):
    """The broker as the topic administration sees it: a coordinators' ``Host`` (settings,
    the clock, the volume) with its topics, cluster view and led partitions."""

    @property
    def topics(self) -> TopicStore: ...

    @property
    def cluster(self) -> ClusterView: ...

    @property
    def partitions(self) -> dict[tuple[str, int], P]:
        """The partitions this broker leads."""

    def served_leader(self, topic: str, index: int) -> tuple[int, int]:
        """(leader id, epoch) as Metadata answers it; (-1, epoch) while none serves it."""

    def leader(self, topic: str, index: int) -> tuple[int, int]:
        """(leader id, epoch) as the assignment places it; (-1, epoch) while it has no live leader."""

    async def relinquish(self, part: P) -> None:
        """Stop leading ``part``: persist, close, forget."""

    def registered_brokers(self) -> list[int]:
        """Every broker that ever wrote a heartbeat (manual replica assignments name them)."""

    def alive_brokers(self) -> list[int]: ...


class TopicConfigs(Protocol):
    def apply_topic_configs(self, *, force: bool = False) -> None:
        """Give every led partition its topic's log config as it is now."""


class ConfigHost(Protocol):
    """The broker as its dynamic configs (``dynamic.py``) see it: settings they replace,
    and the topic administration that re-applies the topics' log configs."""

    settings: Settings

    @property
    def admin(self) -> TopicConfigs: ...
