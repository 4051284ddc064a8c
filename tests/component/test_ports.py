"""The coordinators' ports (``kaas.coord.ports``) match what the real broker offers, and
the coordinators import no layer above them.

``Broker`` satisfies the Protocols structurally; a type checker sees that in
``_satisfied_statically``, and this test checks at run time that every member exists on
a real ``Broker`` (and its partition, links, cluster view, groups, topics), with the
same parameter names and the same sync/async kind.
"""

from __future__ import annotations

import inspect

import pytest

from kaas.broker import Broker, Partition
from kaas.coord import ports
from kaas.settings import Settings
from kaas.storage.partition_log import LogConfig, PartitionLog


def _satisfied_statically(b: Broker, p: Partition) -> None:
    """Never called: for a type checker (mypy), which verifies each assignment."""
    txn: ports.TxnBroker = b
    group: ports.GroupBroker = b
    led: ports.LedPartition = p
    links: ports.MarkerLinks = b.peer_links
    cluster: ports.ClusterView = b.cluster
    hooks: ports.OffsetHooks = b.groups
    topics: ports.TopicCatalog = b.topics
    del txn, group, led, links, cluster, hooks, topics


def _members(proto: type) -> dict[str, object]:
    out: dict[str, object] = {}
    for cls in reversed(proto.__mro__):
        if getattr(cls, "_is_protocol", False) and cls.__module__ == ports.__name__:
            out.update({k: v for k, v in vars(cls).items() if not k.startswith("_")})
    return out


def _params(fn: object) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values() if p.name != "self"]  # type: ignore[arg-type]


@pytest.fixture
def broker(tmp_path):
    b = Broker(Settings(broker_id=0, data=tmp_path, fsync=False))
    plog = PartitionLog(b.layout.partition_dir("t", 0), LogConfig(fsync=False))
    plog.open()
    part = Partition("t", 0, plog, b)
    yield b, part
    plog.close()


def test_the_broker_offers_every_member_of_the_ports(broker):
    b, part = broker
    pairs = [(ports.TxnBroker, b), (ports.GroupBroker, b), (ports.LedPartition, part),
             (ports.MarkerLinks, b.peer_links), (ports.ClusterView, b.cluster),
             (ports.OffsetHooks, b.groups), (ports.TopicCatalog, b.topics)]
    for proto, obj in pairs:
        members = _members(proto)
        assert members, proto
        for name, spec in members.items():
            where = f"{proto.__name__}.{name} on {type(obj).__name__}"
            assert hasattr(obj, name), where
            if isinstance(spec, property):
                assert not inspect.ismethod(getattr(obj, name)), where
                continue
            impl = getattr(obj, name)
            assert inspect.iscoroutinefunction(impl) == inspect.iscoroutinefunction(spec), where
            assert _params(impl) == _params(spec), where
