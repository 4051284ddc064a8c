"""A topic deleted and re-created under the same name while the deletion is under way (a
client's auto-create racing DeleteTopics, as librdkafka's 0033 does: its closed consumer
keeps refreshing the topics it knew, allowing auto-creation). The deletion must answer
at once, as Apache does, and the new topic must get partitions of its own, not the old
incarnation's, whose directories are set aside."""

from __future__ import annotations

import trio
from kio.schema.errors import ErrorCode

from kaas.storage import trash
from tests.component.test_connection import open_broker_in


async def test_a_topic_recreated_during_its_deletion_gets_fresh_partitions(tmp_path, monkeypatch):
    async with open_broker_in(tmp_path) as (broker, _nursery):
        meta, (err, _msg) = await broker.admin.create_topic("t", 2, {})
        assert err == ErrorCode.none and meta is not None
        old = {p: broker.partitions[("t", p)] for p in range(2)}
        delete = broker.topics.delete

        def delete_then_recreate(name: str) -> bool:
            gone = delete(name)
            assert broker.topics.create(name, 2) is not None  # the auto-create, before any tick
            return gone

        monkeypatch.setattr(broker.topics, "delete", delete_then_recreate)
        t0 = trio.current_time()
        code = await broker.admin.delete_topic("t", timeout=5.0)
        assert code == ErrorCode.none
        assert trio.current_time() - t0 < 2.0
        assert all(part.closed for part in old.values())  # the old incarnation's leader let go
        aside = trash.topic_trash_name(broker.layout.topic_dir("t"), meta.topic_id, 0).name.rsplit("-", 1)[0]
        assert [d.name for d in broker.layout.topic_dir("t").parent.iterdir() if d.name.startswith(aside)]

        new = broker.topics.get("t")
        assert new is not None and new.topic_id != meta.topic_id
        with trio.fail_after(5):
            while not broker.admin.serves_topic("t", 2):
                await broker.cluster.wait_changed()
        for p in range(2):
            part = broker.partitions[("t", p)]
            assert part is not old[p] and not part.closed
            assert part.log.path == broker.layout.partition_dir("t", p) and part.log.path.is_dir()


async def test_many_topics_in_one_delete_take_one_assignment_round(tmp_path):
    """A DeleteTopics of many topics deletes every file first and waits once: one
    assignment without them all, not one round per topic (a hundred rounds ran past the
    request's timeout in librdkafka's 0045)."""
    async with open_broker_in(tmp_path) as (broker, _nursery):
        names = [f"t{i}" for i in range(20)]
        for name in names:
            _meta, (err, _msg) = await broker.admin.create_topic(name, 2, {})
            assert err == ErrorCode.none
        before = broker.cluster.assignment.version
        codes = await broker.admin.delete_topics([*names, "never-was"], timeout=10.0)
        assert codes == {**dict.fromkeys(names, ErrorCode.none), "never-was": ErrorCode.unknown_topic_or_partition}
        assert broker.cluster.assignment.version - before <= 2
        assert not any(broker.topics.get(n) for n in names) and not broker.partitions
