"""GROUP config resources (KIP-848/932) end to end in one process: a real Broker (the
controller of its one-broker cluster, so it writes ``__cluster/group_configs.json`` itself),
real connections, dispatch and handlers over ``trio.testing.memory_stream_pair``.

DescribeConfigs lists every group config with its source; IncrementalAlterConfigs and
AlterConfigs set and delete them with Apache's refusals; a group's configs make no group
appear; they survive a restart; a corrupt file is reported, refused and left as it is; the
authoriser asks DESCRIBE_CONFIGS / ALTER_CONFIGS on the GROUP.
"""

from __future__ import annotations

from typing import Any

import pytest
import structlog.testing
from kio.schema.alter_configs.v2.request import AlterableConfig as LegacyConfig
from kio.schema.alter_configs.v2.request import AlterConfigsRequest
from kio.schema.alter_configs.v2.request import AlterConfigsResource as LegacyResource
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_groups.v5.request import ListGroupsRequest

from kaas.domain.acl import Operation
from kaas.errors import KaasError
from tests.component.test_acls import ADMIN, ALICE, G, commit, create_topics, creation, grant, open_client
from tests.component.test_connection import open_broker_in

GROUP, GROUP_CONFIG, STATIC, DEFAULT = 32, 8, 4, 5
SET, DELETE, APPEND = 0, 1, 2


def incremental(group: str, *ops: tuple[str, int, str | None], validate_only: bool = False) -> Any:
    return IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
        resource_type=GROUP, resource_name=group,
        configs=tuple(AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops)),),
        validate_only=validate_only)


def describe(group: str, *keys: str) -> DescribeConfigsRequest:
    return DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=GROUP, resource_name=group, configuration_keys=keys or None),), include_synonyms=True)


async def configs_of(client: Any, group: str) -> dict[str, tuple[str | None, int]]:
    r = (await client.call(describe(group))).results[0]
    assert (r.error_code, r.resource_type, r.resource_name) == (ErrorCode.none, GROUP, group), r
    return {c.name: (c.value, c.config_source) for c in r.configs}


async def altered(client: Any, req: Any) -> tuple[ErrorCode, str | None]:
    r = (await client.call(req)).responses[0]
    return r.error_code, r.error_message


async def test_set_describe_delete_and_replace(tmp_path):
    async with open_broker_in(tmp_path, group_share_record_lock_duration_ms=20000) as (broker, nursery), \
            open_client(broker, nursery, ADMIN) as client:
        before = await configs_of(client, "no-such-group")  # librdkafka 0081's DescribeConfigs_groups
        assert before == {"consumer.session.timeout.ms": ("45000", DEFAULT),
                          "consumer.heartbeat.interval.ms": ("5000", DEFAULT),
                          "share.session.timeout.ms": ("45000", DEFAULT),
                          "share.heartbeat.interval.ms": ("5000", DEFAULT),
                          "share.record.lock.duration.ms": ("20000", STATIC),  # the option given
                          "share.delivery.count.limit": ("5", DEFAULT),
                          "share.partition.max.record.locks": ("2000", DEFAULT),
                          "share.auto.offset.reset": ("latest", DEFAULT),
                          "share.isolation.level": ("read_uncommitted", DEFAULT),
                          "share.renew.acknowledge.enable": ("true", DEFAULT)}

        assert await altered(client, incremental("g", ("consumer.session.timeout.ms", SET, "50000"),
                                                 validate_only=True)) == (ErrorCode.none, None)
        assert not broker.layout.group_configs.exists()  # validate_only writes nothing
        assert await altered(client, incremental("g", ("consumer.session.timeout.ms", SET, "50000"),
                                                 ("share.isolation.level", SET, "read_committed"))) == \
            (ErrorCode.none, None)
        now = await configs_of(client, "g")
        assert now["consumer.session.timeout.ms"] == ("50000", GROUP_CONFIG)
        assert now["share.isolation.level"] == ("read_committed", GROUP_CONFIG)
        assert now["consumer.heartbeat.interval.ms"] == ("5000", DEFAULT)
        got = broker.group_config("g")
        assert (got.consumer_session_timeout_ms, got.share_isolation_level, got.share_record_lock_duration_ms) == \
            (50000, "read_committed", 20000)
        assert broker.group_config("other").share_isolation_level == "read_uncommitted"

        r = (await client.call(describe("g", "share.isolation.level"))).results[0]
        assert [(c.name, [(s.name, s.value, s.source) for s in c.synonyms]) for c in r.configs] == [
            ("share.isolation.level", [("share.isolation.level", "read_committed", GROUP_CONFIG),
                                       ("share.isolation.level", "read_uncommitted", DEFAULT)])]

        # a group's configs are no group: ListGroups does not list it
        groups = await client.call(ListGroupsRequest(states_filter=(), types_filter=()))
        assert "g" not in [x.group_id for x in groups.groups]

        assert await altered(client, incremental("g", ("consumer.session.timeout.ms", DELETE, None))) == \
            (ErrorCode.none, None)
        assert (await configs_of(client, "g"))["consumer.session.timeout.ms"] == ("45000", DEFAULT)

        # legacy AlterConfigs replaces the group's configs as a whole
        r = (await client.call(AlterConfigsRequest(resources=(LegacyResource(
            resource_type=GROUP, resource_name="g",
            configs=(LegacyConfig(name="share.auto.offset.reset", value="by_duration:PT1H"),)),),
            validate_only=False))).responses[0]
        assert r.error_code == ErrorCode.none, r
        now = await configs_of(client, "g")
        assert now["share.auto.offset.reset"] == ("by_duration:PT1H", GROUP_CONFIG)
        assert now["share.isolation.level"] == ("read_uncommitted", DEFAULT)
        assert broker.group_config("g").share_auto_offset_reset == "by_duration:PT1H"


@pytest.mark.parametrize(("req", "code", "message"), [
    (incremental("g", ("consumer.session.timeout.ms", SET, "1000")), ErrorCode.invalid_config,
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    (incremental("g", ("share.record.lock.duration.ms", SET, "61000")), ErrorCode.invalid_config,
     "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
    (incremental("g", ("consumer.heartbeat.interval.ms", SET, "15000"), ("consumer.session.timeout.ms", SET, "45000"),
                 ("share.heartbeat.interval.ms", SET, "x")), ErrorCode.invalid_config,
     "Invalid value x for configuration share.heartbeat.interval.ms: Not a number of type INT"),
    (incremental("g", ("no.such.config", SET, "1")), ErrorCode.invalid_config,
     "Unknown group config name: no.such.config"),
    (incremental("g", ("share.isolation.level", SET, None)), ErrorCode.invalid_config,
     "Null value not supported for group configs: share.isolation.level"),
    (incremental("g", ("share.isolation.level", APPEND, "read_committed")), ErrorCode.invalid_config,
     "Can't APPEND to key share.isolation.level because its type is not LIST."),
    (incremental("", ("share.isolation.level", SET, "read_committed")), ErrorCode.invalid_request,
     "Default group resources are not allowed."),
])
async def test_refusals_write_nothing(tmp_path, req, code, message):
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as client:
        assert await altered(client, req) == (code, message)
        assert not broker.layout.group_configs.exists()
        r = (await client.call(describe(""))).results[0]
        assert (r.error_code, r.error_message) == (ErrorCode.invalid_request, "Group name must not be empty")


async def test_deleting_the_group_keeps_its_configs(tmp_path):
    """As Apache: the configs live apart from the group, DeleteGroups leaves them."""
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as client:
        await create_topics(client, "t")
        assert (await client.call(commit("g", "t"))).topics[0].partitions[0].error_code == ErrorCode.none
        assert await altered(client, incremental("g", ("share.auto.offset.reset", SET, "earliest"))) == \
            (ErrorCode.none, None)
        r = await client.call(DeleteGroupsRequest(groups_names=("g",)))
        assert [(x.group_id, x.error_code) for x in r.results] == [("g", ErrorCode.none)]
        assert (await configs_of(client, "g"))["share.auto.offset.reset"] == ("earliest", GROUP_CONFIG)


async def test_configs_survive_a_restart(tmp_path):
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as client:
        assert await altered(client, incremental("g", ("share.auto.offset.reset", SET, "earliest"))) == \
            (ErrorCode.none, None)
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as client:
        assert (await configs_of(client, "g"))["share.auto.offset.reset"] == ("earliest", GROUP_CONFIG)
        assert broker.group_config("g").share_auto_offset_reset == "earliest"


async def test_a_corrupt_file_is_reported_refused_and_left_alone(tmp_path):
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery, ADMIN) as client:
        assert await altered(client, incremental("g", ("share.isolation.level", SET, "read_committed"))) == \
            (ErrorCode.none, None)
        path = broker.layout.group_configs
        path.write_text('{"format": 1, "version": 7, "groups": {"g": {"share.isolation.level": "maybe"}}}')
        with structlog.testing.capture_logs() as logs:
            await broker.run_io(broker.group_configs.reload, True)
            await broker.run_io(broker.group_configs.reload, True)  # reported once per bad version
        assert [e["event"] for e in logs if e["log_level"] == "error"] == ["group_configs_unreadable"]
        r = (await client.call(describe("g"))).results[0]
        assert r.error_code == ErrorCode.kafka_storage_error and "group config file unreadable" in r.error_message
        code, message = await altered(client, incremental("g", ("share.isolation.level", DELETE, None)))
        assert code == ErrorCode.kafka_storage_error and "unreadable" in (message or "")
        assert "maybe" in path.read_text()  # never reset
        assert broker.group_config("g").share_isolation_level == "read_committed"  # the last good copy
    async with open_broker_in(tmp_path) as (broker, nursery):  # restarted on the bad file: no good copy at all
        with pytest.raises(KaasError) as err:
            broker.group_config("g")
        assert err.value.code == ErrorCode.kafka_storage_error


async def test_authoriser_asks_for_the_group_config_operations(tmp_path):
    async with open_broker_in(tmp_path, authorizer=True, super_users=ADMIN) as (broker, nursery), \
            open_client(broker, nursery, ADMIN) as admin, open_client(broker, nursery, ALICE) as alice:
        r = (await alice.call(describe("g"))).results[0]
        assert (r.error_code, list(r.configs)) == (ErrorCode.group_authorization_failed, [])
        assert (await altered(alice, incremental("g", ("share.isolation.level", SET, "read_committed"))))[0] == \
            ErrorCode.group_authorization_failed
        await grant(admin, creation(G, "g", Operation.ALTER_CONFIGS))  # implies DESCRIBE_CONFIGS
        assert await altered(alice, incremental("g", ("share.isolation.level", SET, "read_committed"))) == \
            (ErrorCode.none, None)
        assert (await configs_of(alice, "g"))["share.isolation.level"] == ("read_committed", GROUP_CONFIG)
