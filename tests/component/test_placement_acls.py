"""The authoriser on the APIs added for Apache 4.4's ranges: the placement admin APIs need
the cluster (DESCRIBE to look, ALTER to change), and the broker-to-broker forms
(AddPartitionsToTxn v4+, FindCoordinator's share keys) CLUSTER_ACTION, as in Apache's
KafkaApis. One broker in process, the principal set per connection (``test_acls``)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kaas.domain.acl import Operation
from kaas.wire import codec
from kaas.wire.build import build
from tests.component.test_acls import ADMIN, ALICE, C, create_topics, creation, grant, open_broker, open_client


def req(api_key: int, version: int, body: dict[str, Any]) -> Any:
    return build(codec.request_class(api_key, version), body)


LOG_DIRS = req(35, 4, {"topics": None})
ELECT = req(43, 2, {"election_type": 0, "timeout": 5000, "topic_partitions": [{"topic": "t", "partitions": [0]}]})
REASSIGN = req(45, 1, {"timeout": 5000, "allow_replication_factor_change": False,
                       "topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [0]}]}]})
LIST = req(46, 0, {"timeout": 5000, "topics": None})
VERIFY = req(24, 5, {"transactions": [{"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0,
                                       "verify_only": True, "topics": [{"name": "t", "partitions": [0]}]}]})
SHARE_KEY = req(10, 6, {"key_type": 2, "coordinator_keys": ["g:AAAAAAAAAAAAAAAAAAAAAA:0"]})


async def test_placement_apis_need_the_cluster(tmp_path):
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as admin, \
            open_client(broker, nursery, ALICE) as alice:
        await create_topics(admin, "t")
        denied = ErrorCode.cluster_authorization_failed
        r = await alice.call(LOG_DIRS)
        assert (r.error_code, r.results) == (denied, ())
        r = await alice.call(ELECT)
        assert r.error_code == denied
        assert [p.error_code for t in r.replica_election_results for p in t.partition_result] == [denied]
        r = await alice.call(REASSIGN)
        assert r.error_code == denied and r.responses[0].partitions[0].error_code == denied
        r = await alice.call(LIST)
        assert r.error_code == denied
        r = await alice.call(VERIFY)
        assert (r.error_code, r.results_by_transaction) == (denied, ())
        r = await alice.call(SHARE_KEY)
        assert r.coordinators[0].error_code == denied

        await grant(admin, creation(C, "kafka-cluster", Operation.DESCRIBE))
        r = await alice.call(LOG_DIRS)
        assert r.error_code == ErrorCode.none
        (d,) = r.results
        assert d.log_dir == str(broker.settings.data.resolve())
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in d.topics] == [("t", [0])]
        assert (await alice.call(LIST)).error_code == ErrorCode.none
        assert (await alice.call(ELECT)).error_code == denied  # changing needs ALTER

        await grant(admin, creation(C, "kafka-cluster", Operation.ALTER),
                    creation(C, "kafka-cluster", Operation.CLUSTER_ACTION))
        r = await alice.call(ELECT)
        assert [p.error_code for t in r.replica_election_results for p in t.partition_result] == [
            ErrorCode.election_not_needed]
        r = await alice.call(REASSIGN)
        assert r.responses[0].partitions[0].error_code == ErrorCode.none
        assert broker.topics.get("t").replica_assignment == {0: (0,)}
        r = await alice.call(VERIFY)
        assert r.error_code == ErrorCode.none
        r = await alice.call(SHARE_KEY)  # (a topic id no topic has: no coordinator)
        assert r.coordinators[0].error_code == ErrorCode.coordinator_not_available
