"""Answers with the authoriser on that ``make diff`` (its ``authz`` family, against Apache
Kafka 4.4 with StandardAuthorizer) found different, each as Apache gives it: a real
Broker, dispatch and handlers over memory streams, as in ``test_acls``."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.create_acls.v3.request import CreateAclsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_fetch.v1.request import OffsetFetchRequest, OffsetFetchRequestTopic
from kio.schema.read_share_group_state_summary.v1.request import (
    PartitionData,
    ReadShareGroupStateSummaryRequest,
    ReadStateSummaryData,
)
from kio.schema.share_fetch.v2.request import ShareFetchRequest

from kaas.domain.acl import Operation
from tests.component.test_acls import (
    ADMIN,
    ALICE,
    PRE,
    C,
    G,
    T,
    commit,
    create_topics,
    creation,
    describe_all,
    grant,
    open_broker,
    open_client,
)

CLUSTER_OPS_NOT_ASKED = -2147483648


def metadata_auto(*topics: str) -> MetadataRequest:
    return MetadataRequest(topics=tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
                           allow_auto_topic_creation=True, include_topic_authorized_operations=False)


async def test_auto_creation_without_create_is_a_topic_authorization_failure(tmp_path):
    async with open_broker(tmp_path, auto_create_topics=True) as (broker, nursery), \
            open_client(broker, nursery, ALICE) as alice, open_client(broker, nursery, ADMIN) as admin:
        await grant(admin, creation(T, "auto-", Operation.DESCRIBE, pt=PRE))
        r = await alice.call(metadata_auto("auto-1"))
        assert r.topics[0].error_code == ErrorCode.topic_authorization_failed  # was UNKNOWN_TOPIC_OR_PARTITION
        assert broker.topics.get("auto-1") is None
        await grant(admin, creation(T, "auto-", Operation.CREATE, pt=PRE))
        r = await alice.call(metadata_auto("auto-1"))
        assert r.topics[0].error_code in (ErrorCode.none, ErrorCode.leader_not_available)
        assert broker.topics.get("auto-1") is not None


async def test_describe_cluster_needs_no_acl_and_answers_operations_only_with_describe(tmp_path):
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ALICE) as alice, \
            open_client(broker, nursery, ADMIN) as admin:
        ask = DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1)
        r = await alice.call(ask)
        assert r.error_code == ErrorCode.none and r.brokers and r.cluster_authorized_operations == 0
        await grant(admin, creation(C, "kafka-cluster", Operation.IDEMPOTENT_WRITE))
        assert (await alice.call(ask)).cluster_authorized_operations == 0  # no DESCRIBE: none shown
        await grant(admin, creation(C, "kafka-cluster", Operation.DESCRIBE))
        ops = (await alice.call(ask)).cluster_authorized_operations
        assert ops == (1 << Operation.DESCRIBE) | (1 << Operation.IDEMPOTENT_WRITE)
        r = await alice.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1))
        assert r.cluster_authorized_operations == CLUSTER_OPS_NOT_ASKED


async def test_refusals_name_nothing_the_principal_may_not_see(tmp_path):
    """DeleteTopics by id answers a refused topic without its name; CreateTopics without
    DESCRIBE_CONFIGS answers neither layout nor configs."""
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ALICE) as alice, \
            open_client(broker, nursery, ADMIN) as admin:
        await create_topics(admin, "secret")
        tid = broker.topics.get("secret").topic_id
        r = await alice.call(DeleteTopicsRequest(topics=(DeleteTopicState(name=None, topic_id=tid),),
                                                 timeout=datetime.timedelta(seconds=5)))
        assert [(x.name, x.topic_id, x.error_code) for x in r.responses] == [
            (None, tid, ErrorCode.topic_authorization_failed)]
        await grant(admin, creation(T, "mine-", Operation.CREATE, pt=PRE))
        r = await alice.call(CreateTopicsRequest(topics=(
            CreatableTopic(name="mine-1", num_partitions=2, replication_factor=-1, assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=5), validate_only=False))
        t = r.topics[0]
        assert t.error_code == ErrorCode.none and t.topic_id is not None
        assert (t.topic_config_error_code, t.num_partitions, t.replication_factor, t.configs) == (
            ErrorCode.topic_authorization_failed, -1, -1, ())
        await grant(admin, creation(T, "mine-", Operation.DESCRIBE_CONFIGS, pt=PRE))
        r = await alice.call(CreateTopicsRequest(topics=(
            CreatableTopic(name="mine-2", num_partitions=2, replication_factor=-1, assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=5), validate_only=False))
        assert (r.topics[0].topic_config_error_code, r.topics[0].num_partitions) == (0, 2) and r.topics[0].configs


async def test_group_refusals_take_apaches_shape(tmp_path):
    """OffsetFetch v1 (no top-level error) puts the group's refusal on each partition;
    JoinGroup v9 answers a null protocol name; ListGroups shows a group that only has
    offsets with no protocol type."""
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ALICE) as alice, \
            open_client(broker, nursery, ADMIN) as admin:
        await create_topics(admin, "t")
        r = await alice.call(OffsetFetchRequest(group_id="g", topics=(
            OffsetFetchRequestTopic(name="t", partition_indexes=(0, 1)),)))
        assert [(p.partition_index, p.committed_offset, p.error_code) for p in r.topics[0].partitions] == [
            (0, -1, ErrorCode.group_authorization_failed), (1, -1, ErrorCode.group_authorization_failed)]
        r = await alice.call(JoinGroupRequest(
            group_id="g", session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
            protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),), reason=None))
        assert (r.error_code, r.protocol_name) == (ErrorCode.group_authorization_failed, None)
        assert (await admin.call(commit("g", "t"))).topics[0].partitions[0].error_code == ErrorCode.none
        r = await admin.call(ListGroupsRequest(states_filter=(), types_filter=()))
        assert [(g.group_id, g.protocol_type, g.group_type) for g in r.groups] == [("g", "", "classic")]


async def test_refused_before_the_coordinator_answers_schema_defaults(tmp_path):
    """Apache refuses these in its request layer, with the schema's defaults (0), where
    its coordinators answer -1: DescribeTransactions, ReadShareGroupStateSummary, and a
    ShareFetch refused as a whole has no lock duration."""
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ALICE) as alice, \
            open_client(broker, nursery, ADMIN) as admin:
        await create_topics(admin, "t")
        r = await alice.call(DescribeTransactionsRequest(transactional_ids=("x",)))
        s = r.transaction_states[0]
        assert s.error_code == ErrorCode.transactional_id_authorization_failed
        assert (s.producer_id, s.producer_epoch, s.transaction_start_time.timestamp()) == (0, 0, 0)
        tid = broker.topics.get("t").topic_id
        r = await alice.call(ReadShareGroupStateSummaryRequest(group_id="g", topics=(
            ReadStateSummaryData(topic_id=tid, partitions=(PartitionData(partition=0, leader_epoch=0),)),)))
        p = r.results[0].partitions[0]
        assert (p.error_code, p.leader_epoch, p.start_offset) == (ErrorCode.cluster_authorization_failed, 0, 0)
        r = await alice.call(ShareFetchRequest(
            group_id="g", member_id=str(uuid.uuid4()), share_session_epoch=0, max_wait=datetime.timedelta(0),
            min_bytes=1, max_bytes=1024, max_records=10, batch_size=10, topics=(), forgotten_topics_data=()))
        assert (r.error_code, r.acquisition_lock_timeout) == (ErrorCode.group_authorization_failed,
                                                              datetime.timedelta(0))
        r = await alice.call(DescribeUserScramCredentialsRequest(users=(UserName(name="bob"),)))
        assert r.error_code == ErrorCode.cluster_authorization_failed
        assert [(x.user, x.error_code) for x in r.results] == [("", ErrorCode.cluster_authorization_failed)]


async def test_acl_requests_apache_refuses_while_parsing_close_the_connection(tmp_path):
    async with open_broker(tmp_path) as (broker, nursery):
        async with open_client(broker, nursery, ADMIN) as admin:
            await admin.send(describe_all(resource_type_filter=0))
            assert await admin.wait_closed() == b""
        async with open_client(broker, nursery, ADMIN) as admin:
            await admin.send(DeleteAclsRequest(filters=(DeleteAclsFilter(
                resource_type_filter=2, resource_name_filter=None, pattern_type_filter=0, principal_filter=None,
                host_filter=None, operation=1, permission_type=1),)))
            assert await admin.wait_closed() == b""
        async with open_client(broker, nursery, ADMIN) as admin:
            await admin.send(CreateAclsRequest(creations=(creation(0, "g", Operation.READ),)))
            assert await admin.wait_closed() == b""
        async with open_client(broker, nursery, ADMIN) as admin:  # the broker serves on
            r = await admin.call(CreateAclsRequest(creations=(creation(G, "g", Operation.READ),)))
            assert r.results[0].error_code == ErrorCode.none
