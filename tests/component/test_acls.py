"""The authoriser end to end in one process: a real Broker with ``--authorizer`` on, a real
connection, dispatch and handlers over ``trio.testing.memory_stream_pair``, each client
connection with a Session whose principal the test sets (``User:admin`` is a super user).
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import structlog.testing
import trio
import trio.testing
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.join_group.v7.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from kaas.broker import Broker
from kaas.clock import TrioClock
from kaas.domain import scram
from kaas.domain.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from kaas.handlers.session import Session
from kaas.net.connection import serve_connection
from kaas.storage import credentials
from kaas.storage.acls import AclFile, acls_path
from tests.component.test_connection import Client, open_broker_in

ADMIN, ALICE = "User:admin", "User:alice"
T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def open_broker(tmp_path, **kw):
    """A started broker with the authoriser on and ADMIN a super user (unless ``kw`` says
    otherwise), and the nursery connections run in."""
    return open_broker_in(tmp_path, **{"authorizer": True, "super_users": ADMIN, **kw})


@asynccontextmanager
async def open_client(broker: Broker, nursery: trio.Nursery, principal: str) -> AsyncIterator[Client]:
    ours, theirs = trio.testing.memory_stream_pair()
    nursery.start_soon(partial(serve_connection, broker, theirs,
                               session=Session(principal=principal, peer_host="10.0.0.7")))
    async with ours:
        yield Client(ours)


def creation(rt, name, op, principal=ALICE, perm=ALLOW, pt=LIT, host="*") -> AclCreation:
    return AclCreation(resource_type=int(rt), resource_name=name, resource_pattern_type=int(pt), principal=principal,
                       host=host, operation=int(op), permission_type=int(perm))


async def grant(client: Client, *creations: AclCreation) -> None:
    r = await client.call(CreateAclsRequest(creations=creations))
    assert [x.error_code for x in r.results] == [ErrorCode.none] * len(creations)


def describe_all(**kw) -> DescribeAclsRequest:
    return DescribeAclsRequest(**{"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                                  "principal_filter": None, "host_filter": None, "operation": 1,
                                  "permission_type": 1, **kw})


def metadata(*topics: str) -> MetadataRequest:
    return MetadataRequest(topics=tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics) or None,
                           allow_auto_topic_creation=False, include_topic_authorized_operations=True)


async def create_topics(client: Client, *names: str) -> None:
    r = await client.call(CreateTopicsRequest(topics=tuple(
        CreatableTopic(name=n, num_partitions=1, replication_factor=-1, assignments=(), configs=()) for n in names),
        timeout=datetime.timedelta(seconds=10), validate_only=False))
    assert [t.error_code for t in r.topics] == [ErrorCode.none] * len(names)


def produce(topic: str, txn_id: str | None = None) -> ProduceRequest:
    """(no records: authorisation is decided before the batch is read)"""
    batch = b""
    return ProduceRequest(transactional_id=txn_id, acks=-1, timeout=datetime.timedelta(seconds=5),
                          topic_data=(TopicProduceData(name=topic, partition_data=(
                              PartitionProduceData(index=0, records=batch),)),))


def init_pid(txn_id: str | None) -> InitProducerIdRequest:
    return InitProducerIdRequest(transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60),
                                 producer_id=-1, producer_epoch=-1)


def join(group: str) -> JoinGroupRequest:
    return JoinGroupRequest(group_id=group, session_timeout=datetime.timedelta(seconds=10),
                            rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
                            protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),))


def commit(group: str, topic: str) -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                               topics=(OffsetCommitRequestTopic(name=topic, partitions=(
                                   OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                                committed_leader_epoch=-1,
                                                                committed_metadata=None),)),))


async def test_acl_apis_round_trip(tmp_path):
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as admin, \
            open_client(broker, nursery, ALICE) as alice:
        # alice may not administer ACLs
        r = await alice.call(CreateAclsRequest(creations=(creation(T, "t", Operation.READ),)))
        assert r.results[0].error_code == ErrorCode.cluster_authorization_failed
        assert (await alice.call(describe_all())).error_code == ErrorCode.cluster_authorization_failed
        # a filter-only value fails the whole request, as in Apache (make diff); other
        # invalid creations are refused one by one
        r = await admin.call(CreateAclsRequest(creations=(
            creation(T, "t", Operation.READ), creation(T, "x", Operation.ANY),
            creation(T, "m", Operation.READ, pt=PatternType.MATCH))))
        assert [x.error_code for x in r.results] == [ErrorCode.unknown_server_error] * 3
        r = await admin.call(CreateAclsRequest(creations=(
            creation(T, "t", Operation.READ), creation(C, "other", Operation.ALTER),
            creation(T, "app-", Operation.WRITE, pt=PRE))))
        assert [x.error_code for x in r.results] == [ErrorCode.none, ErrorCode.invalid_request, ErrorCode.none]
        d = await admin.call(describe_all())
        assert d.error_code == ErrorCode.none
        got = {(x.resource_type, x.resource_name, x.pattern_type, a.principal, a.operation)
               for x in d.resources for a in x.acls}
        assert got == {(T, "t", LIT, ALICE, Operation.READ), (T, "app-", PRE, ALICE, Operation.WRITE)}
        # MATCH: what applies to topic app-1
        d = await admin.call(describe_all(resource_type_filter=int(T), resource_name_filter="app-1",
                                          pattern_type_filter=int(PatternType.MATCH)))
        assert [(x.resource_name, x.pattern_type) for x in d.resources] == [("app-", PRE)]
        # an unknown operation code matches nothing (Apache reads it as UNKNOWN)
        d = await admin.call(describe_all(operation=99))
        assert d.error_code == ErrorCode.none and d.resources == ()
        # the file holds them
        assert b'"app-"' in acls_path(broker.layout.cluster).read_bytes()
        r = await admin.call(DeleteAclsRequest(filters=(
            DeleteAclsFilter(resource_type_filter=int(T), resource_name_filter="t", pattern_type_filter=int(LIT),
                             principal_filter=None, host_filter=None, operation=1, permission_type=1),)))
        assert r.filter_results[0].error_code == ErrorCode.none
        assert [(m.resource_name, m.operation) for m in r.filter_results[0].matching_acls] == [("t", Operation.READ)]
        d = await admin.call(describe_all())
        assert [x.resource_name for x in d.resources] == ["app-"]


async def test_security_disabled_without_authorizer(tmp_path):
    async with open_broker(tmp_path, authorizer=False) as (broker, nursery), \
            open_client(broker, nursery, ALICE) as alice:
        assert (await alice.call(describe_all())).error_code == ErrorCode.security_disabled
        r = await alice.call(CreateAclsRequest(creations=(creation(T, "t", Operation.READ),)))
        assert r.results[0].error_code == ErrorCode.security_disabled
        # and everything else is allowed, as before
        assert (await alice.call(init_pid("tx"))).error_code == ErrorCode.none


async def test_transactional_id_needs_write(tmp_path):
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as admin, \
            open_client(broker, nursery, ALICE) as alice:
        assert (await alice.call(init_pid("tx-1"))).error_code == ErrorCode.transactional_id_authorization_failed
        await grant(admin, creation(X, "tx-", Operation.WRITE, pt=PRE))
        assert (await alice.call(init_pid("tx-1"))).error_code == ErrorCode.none
        assert (await alice.call(init_pid("other"))).error_code == ErrorCode.transactional_id_authorization_failed
        # idempotent without a transactional id: IDEMPOTENT_WRITE on the cluster or WRITE on some topic
        assert (await alice.call(init_pid(None))).error_code == ErrorCode.cluster_authorization_failed
        await grant(admin, creation(T, "t", Operation.WRITE))
        assert (await alice.call(init_pid(None))).error_code == ErrorCode.none
        # a super user passes everywhere
        assert (await admin.call(init_pid("anything"))).error_code == ErrorCode.none


async def test_consumer_needs_read_on_group(tmp_path):
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as admin, \
            open_client(broker, nursery, ALICE) as alice:
        await create_topics(admin, "t")
        await grant(admin, creation(T, "t", Operation.READ))
        assert (await alice.call(join("g"))).error_code == ErrorCode.group_authorization_failed
        r = await alice.call(commit("g", "t"))
        assert r.topics[0].partitions[0].error_code == ErrorCode.group_authorization_failed
        await grant(admin, creation(G, "g", Operation.READ))
        r = await alice.call(commit("g", "t"))  # a simple (generation -1) commit
        assert r.topics[0].partitions[0].error_code == ErrorCode.none
        await create_topics(admin, "secret")
        r = await alice.call(commit("g", "secret"))
        assert r.topics[0].partitions[0].error_code == ErrorCode.topic_authorization_failed


async def test_metadata_hides_undescribable_topics_and_deny_wins(tmp_path):
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as admin, \
            open_client(broker, nursery, ALICE) as alice:
        await create_topics(admin, "a", "b", "c")
        await grant(admin, creation(T, "a", Operation.READ), creation(T, "*", Operation.ALL, principal="User:*"),
                    creation(T, "b", Operation.ALL, perm=DENY), creation(T, "c", Operation.WRITE, perm=DENY))
        md = await alice.call(metadata())
        assert sorted(t.name for t in md.topics) == ["a", "c"]  # DENY ALL on b beats the ALLOW on *
        md = await alice.call(metadata("b", "c"))
        assert [t.error_code for t in md.topics] == [ErrorCode.topic_authorization_failed, ErrorCode.none]
        ops = md.topics[1].topic_authorized_operations
        assert ops & (1 << Operation.READ) and not ops & (1 << Operation.WRITE)
        r = await alice.call(produce("c"))
        assert r.responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed
        # the super user sees everything
        md = await admin.call(metadata())
        assert sorted(t.name for t in md.topics) == ["a", "b", "c"]


async def test_corrupt_file_is_refused_and_last_good_kept(tmp_path):
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as admin, \
            open_client(broker, nursery, ALICE) as alice:
        await grant(admin, creation(X, "tx", Operation.WRITE))
        path = acls_path(broker.layout.cluster)
        path.write_text("{not json")
        assert not broker.acls.reload(force=True)
        assert broker.acls.bad is not None
        assert (await alice.call(init_pid("tx"))).error_code == ErrorCode.none  # last good ACLs kept
        r = await admin.call(CreateAclsRequest(creations=(creation(T, "t", Operation.READ),)))
        assert r.results[0].error_code == ErrorCode.unknown_server_error  # never overwrites a corrupt file
    # a broker that starts on a corrupt file denies all but super users
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ALICE) as alice, \
            open_client(broker, nursery, ADMIN) as admin:
        assert broker.acls.bindings is None
        assert (await alice.call(init_pid("tx"))).error_code == ErrorCode.transactional_id_authorization_failed
        assert (await admin.call(init_pid("tx"))).error_code == ErrorCode.none
        acls_path(broker.layout.cluster).unlink()
        broker.acls.reload()
        assert broker.acls.bindings == ()


async def test_allow_everyone_if_no_acl_found(tmp_path):
    async with open_broker(tmp_path, allow_everyone_if_no_acl_found=True) as (broker, nursery), \
            open_client(broker, nursery, ALICE) as alice:
        assert (await alice.call(init_pid("tx"))).error_code == ErrorCode.none
        await grant(alice, creation(X, "tx", Operation.WRITE, principal="User:bob"))  # no cluster ACL: open
        assert (await alice.call(init_pid("tx"))).error_code == ErrorCode.transactional_id_authorization_failed


async def test_group_authorized_operations_follow_the_principals_acls(tmp_path):
    """librdkafka 0081's DescribeConsumerGroups_with_authorized_ops, as Apache 4 answers it:
    with allow.everyone.if.no.acl.found, a user who is not a super user may do every group
    operation (DELETE, DESCRIBE, READ, and DESCRIBE_CONFIGS and ALTER_CONFIGS of the group
    configs) until an ACL names the group; a READ ACL of its own then leaves READ and the
    DESCRIBE it implies; removed, everything is open again."""
    group_ops = sum(1 << op for op in (Operation.DELETE, Operation.DESCRIBE, Operation.READ,
                                       Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS))

    async def ops(client: Client, include: bool = True) -> int:
        r = await client.call(DescribeGroupsRequest(groups=("g",), include_authorized_operations=include))
        assert [(g.error_code, g.group_id) for g in r.groups] == [(ErrorCode.none, "g")]
        return r.groups[0].authorized_operations

    async with open_broker(tmp_path, allow_everyone_if_no_acl_found=True) as (broker, nursery), \
            open_client(broker, nursery, ALICE) as alice:
        assert (await alice.call(join("g"))).error_code == ErrorCode.member_id_required
        assert await ops(alice) == group_ops
        assert await ops(alice, include=False) == -2147483648  # not asked: INT32_MIN, as Apache
        await grant(alice, creation(G, "g", Operation.READ))  # no cluster ACL: alice may ALTER it
        assert await ops(alice) == (1 << Operation.DESCRIBE) | (1 << Operation.READ)
        r = await alice.call(DeleteAclsRequest(filters=(
            DeleteAclsFilter(resource_type_filter=int(G), resource_name_filter="g", pattern_type_filter=int(LIT),
                             principal_filter=ALICE, host_filter="*", operation=int(Operation.READ),
                             permission_type=int(ALLOW)),)))
        assert len(r.filter_results[0].matching_acls) == 1
        assert await ops(alice) == group_ops


async def test_admin_requests_answer_denied_parts_and_do_the_rest(tmp_path):
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as admin, \
            open_client(broker, nursery, ALICE) as alice:
        await create_topics(admin, "mine-1", "mine-2", "theirs")
        await grant(admin, creation(T, "mine-", Operation.ALL, pt=PRE))
        r = await alice.call(CreatePartitionsRequest(topics=(
            CreatePartitionsTopic(name="mine-1", count=2, assignments=None),
            CreatePartitionsTopic(name="theirs", count=2, assignments=None)),
            timeout=datetime.timedelta(seconds=10), validate_only=False))
        assert {x.name: x.error_code for x in r.results} == {
            "mine-1": ErrorCode.none, "theirs": ErrorCode.topic_authorization_failed}
        assert broker.topics.get("mine-1").partitions == 2 and broker.topics.get("theirs").partitions == 1
        r = await alice.call(IncrementalAlterConfigsRequest(resources=(
            AlterConfigsResource(resource_type=2, resource_name="mine-2", configs=(
                AlterableConfig(name="retention.ms", config_operation=0, value="1000"),)),
            AlterConfigsResource(resource_type=2, resource_name="theirs", configs=(
                AlterableConfig(name="retention.ms", config_operation=0, value="1000"),)),
            AlterConfigsResource(resource_type=4, resource_name="0", configs=())), validate_only=False))
        assert {x.resource_name: x.error_code for x in r.responses} == {
            "mine-2": ErrorCode.none, "theirs": ErrorCode.topic_authorization_failed,
            "0": ErrorCode.cluster_authorization_failed}
        r = await alice.call(DeleteTopicsRequest(topics=(
            DeleteTopicState(name="mine-2", topic_id=None), DeleteTopicState(name="theirs", topic_id=None)),
            timeout=datetime.timedelta(seconds=10)))
        assert {x.name: x.error_code for x in r.responses} == {
            "mine-2": ErrorCode.none, "theirs": ErrorCode.topic_authorization_failed}
        broker.topics.refresh()
        assert broker.topics.get("mine-2") is None and broker.topics.get("theirs") is not None


async def test_file_written_elsewhere_is_reloaded_within_a_second(shm_path, autojump_clock):
    """The reload loop: a file replaced by another broker (here: by hand) is in force within a
    second, without inotify too; a corrupt one is refused with the last good ACLs kept. (On
    trio's MockClock: the seconds below take no real time.)"""
    async with open_broker(shm_path, inotify=False, clock=TrioClock(autojump_clock)) as (broker, nursery), \
            open_client(broker, nursery, ALICE) as alice:
        assert (await alice.call(init_pid("tx"))).error_code == ErrorCode.transactional_id_authorization_failed
        other = AclFile(acls_path(broker.layout.cluster), fsync=False)
        other.write((AclBinding(X, "tx", LIT, ALICE, "*", Operation.WRITE, ALLOW),))
        await trio.sleep(1.05)
        assert (await alice.call(init_pid("tx"))).error_code == ErrorCode.none
        reloads = broker.acls.reloads
        with structlog.testing.capture_logs() as logs:
            other.path.write_bytes(b'{"format": 1, "acls": [{"resource_type": "TOPIC"}]}')
            await trio.sleep(2.1)  # two forced reads at least: reported once
        assert [e["log_level"] for e in logs if e["event"] == "acl_file_refused"] == ["error"]
        assert broker.acls.bad is not None and broker.acls.reloads == reloads
        assert (await alice.call(init_pid("tx"))).error_code == ErrorCode.none
        other.write(())
        await trio.sleep(1.05)
        assert broker.acls.bad is None
        assert (await alice.call(init_pid("tx"))).error_code == ErrorCode.transactional_id_authorization_failed


def set_password(user: str, password: str) -> ScramCredentialUpsertion:
    salt = b"s4lt-" + user.encode()
    return ScramCredentialUpsertion(name=user, mechanism=2, iterations=4096, salt=salt,
                                    salted_password=scram.salted_password("SCRAM-SHA-512", password, salt, 4096))


async def test_scram_credential_apis_need_the_cluster(tmp_path):
    """Apache's KafkaApis: AlterUserScramCredentials needs ALTER on the cluster (each user
    answers CLUSTER_AUTHORIZATION_FAILED), DescribeUserScramCredentials DESCRIBE on it (a
    request-level CLUSTER_AUTHORIZATION_FAILED). Without the check any authenticated user,
    however few its ACLs, could reset a super user's password and log in as it."""
    async with open_broker(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as admin, \
            open_client(broker, nursery, ALICE) as alice:
        r = await admin.call(AlterUserScramCredentialsRequest(deletions=(), upsertions=(set_password("admin", "a"),)))
        assert [x.error_code for x in r.results] == [ErrorCode.none]
        before = credentials.read(broker.layout.scram_credentials)
        await create_topics(admin, "t")
        await grant(admin, creation(T, "t", Operation.ALL), creation(G, "g", Operation.ALL),
                    creation(X, "tx", Operation.ALL))
        r = await alice.call(AlterUserScramCredentialsRequest(
            deletions=(ScramCredentialDeletion(name="bob", mechanism=2),),
            upsertions=(set_password("admin", "taken-over"),)))
        assert [(x.user, x.error_code) for x in r.results] == [
            ("bob", ErrorCode.cluster_authorization_failed), ("admin", ErrorCode.cluster_authorization_failed)]
        assert credentials.read(broker.layout.scram_credentials) == before
        r = await alice.call(DescribeUserScramCredentialsRequest(users=None))
        assert (r.error_code, r.results) == (ErrorCode.cluster_authorization_failed, ())
        await grant(admin, creation(C, "kafka-cluster", Operation.DESCRIBE))
        r = await alice.call(DescribeUserScramCredentialsRequest(users=None))
        assert r.error_code == ErrorCode.none and [x.user for x in r.results] == ["admin"]
        r = await alice.call(AlterUserScramCredentialsRequest(deletions=(), upsertions=(set_password("bob", "b"),)))
        assert [x.error_code for x in r.results] == [ErrorCode.cluster_authorization_failed]
        await grant(admin, creation(C, "kafka-cluster", Operation.ALTER))
        r = await alice.call(AlterUserScramCredentialsRequest(deletions=(), upsertions=(set_password("bob", "b"),)))
        assert [x.error_code for x in r.results] == [ErrorCode.none]
