"""Client quotas (KIP-546) in one process: a real Broker (the controller, so it writes
``__cluster/client_quotas.json`` itself), real connections, dispatch and handlers over
memory streams. Alter and describe with Apache's answers; a refused entry leaves the
others; validate_only writes nothing; quotas survive a restart; a corrupt file is
reported and refused; the authoriser asks ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster.
"""

from __future__ import annotations

from typing import Any

from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i8

from kaas.domain.acl import Operation
from tests.component.test_acls import ADMIN, ALICE, C, creation, grant, open_broker
from tests.component.test_acls import open_client as open_client_as
from tests.component.test_connection import open_broker_in, open_client


def entry(entity: list[tuple[str, str | None]], *ops: tuple[str, float, bool]) -> EntryData:
    return EntryData(entity=tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity),
                     ops=tuple(OpData(key=k, value=f64(float(v)), remove=r) for k, v, r in ops))


def alter(*entries: EntryData, validate_only: bool = False) -> AlterClientQuotasRequest:
    return AlterClientQuotasRequest(entries=entries, validate_only=validate_only)


def describe(*components: tuple[str, int, str | None], strict: bool = False) -> DescribeClientQuotasRequest:
    return DescribeClientQuotasRequest(components=tuple(
        ComponentData(entity_type=t, match_type=i8(m), match=s) for t, m, s in components), strict=strict)


def answers(r: Any) -> list[tuple[list[tuple[str, str | None]], ErrorCode, str | None]]:
    return [([(x.entity_type, x.entity_name) for x in e.entity], e.error_code, e.error_message) for e in r.entries]


async def described(client: Any, *components: tuple[str, int, str | None], strict: bool = False) -> list[Any]:
    r = await client.call(describe(*components, strict=strict))
    assert (r.error_code, r.error_message) == (ErrorCode.none, ""), r
    return [([(x.entity_type, x.entity_name) for x in e.entity], {v.key: v.value for v in e.values})
            for e in r.entries]


async def test_alter_describe_and_restart(tmp_path):
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        assert await described(client) == []
        r = await client.call(alter(entry([("user", "alice")], ("producer_byte_rate", 1024, False)),
                                    validate_only=True))
        assert answers(r) == [([("user", "alice")], ErrorCode.none, None)]
        assert not broker.layout.client_quotas.exists()
        r = await client.call(alter(
            entry([("user", "alice"), ("client-id", "c1")], ("consumer_byte_rate", 2048, False),
                  ("request_percentage", 50, False)),
            entry([("user", None)], ("producer_byte_rate", 100, False)),
            entry([("user", "bob")], ("foo_rate", 1, False)),
            entry([("ip", None)], ("connection_creation_rate", 7, False)),
            entry([("ip", "localhost")], ("connection_creation_rate", 1, False))))
        assert answers(r) == [
            ([("client-id", "c1"), ("user", "alice")], ErrorCode.none, None),
            ([("user", None)], ErrorCode.none, None),
            ([("user", "bob")], ErrorCode.invalid_request, "Invalid configuration key foo_rate"),
            ([("ip", None)], ErrorCode.none, None),
            ([("ip", "localhost")], ErrorCode.none, None)]
        assert await described(client, ("user", 2, None), strict=True) == [([("user", None)],
                                                                             {"producer_byte_rate": 100.0})]
        assert await described(client, ("user", 0, "alice")) == [
            ([("client-id", "c1"), ("user", "alice")], {"consumer_byte_rate": 2048.0, "request_percentage": 50.0})]
        r = await client.call(describe(("user", 2, None), ("ip", 2, None)))
        assert r.error_code == ErrorCode.invalid_request and r.entries is None
        assert broker.client_quotas.effective("consumer_byte_rate", user="alice", client_id="c1") == \
            (2048.0, (("client-id", "c1"), ("user", "alice")))
        assert broker.client_quotas.effective("producer_byte_rate", user="alice", client_id="c1") == \
            (100.0, (("user", None),))
        r = await client.call(alter(entry([("user", None)], ("producer_byte_rate", 0, True))))
        assert answers(r) == [([("user", None)], ErrorCode.none, None)]
        r = await client.call(alter(entry([("user", "a")], ("producer_byte_rate", 1, False)),
                                    entry([("user", "a")], ("producer_byte_rate", 2, False))))
        assert answers(r) == [([("user", "a")], ErrorCode.invalid_request,
                               "Ignoring duplicate entity ClientQuotaEntity(entries={user=a})")]
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        assert [e for e, _ in await described(client)] == [
            [("client-id", "c1"), ("user", "alice")], [("ip", None)], [("ip", "localhost")]]


async def test_corrupt_file_is_reported_and_refused(tmp_path):
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        broker.layout.client_quotas.write_text('{"format": 1, "version": 1, "entries": [{"entity": {}}]}')
        await broker.run_io(broker.client_quotas.reload, True)
        r = await client.call(describe())
        assert r.error_code == ErrorCode.kafka_storage_error and r.entries is None
        r = await client.call(alter(entry([("user", "u")], ("producer_byte_rate", 1, False))))
        assert answers(r)[0][1] == ErrorCode.kafka_storage_error
        assert broker.layout.client_quotas.read_text() == '{"format": 1, "version": 1, "entries": [{"entity": {}}]}'


async def test_authorisation(tmp_path):
    async with open_broker(tmp_path) as (broker, nursery), open_client_as(broker, nursery, ALICE) as alice, \
            open_client_as(broker, nursery, ADMIN) as admin:
        r = await alice.call(describe())
        assert r.error_code == ErrorCode.cluster_authorization_failed
        r = await alice.call(alter(entry([("user", "u")], ("producer_byte_rate", 1, False))))
        assert answers(r)[0][1] == ErrorCode.cluster_authorization_failed
        await grant(admin, creation(C, "kafka-cluster", Operation.ALTER_CONFIGS))
        r = await alice.call(alter(entry([("user", "u")], ("producer_byte_rate", 1, False))))
        assert answers(r) == [([("user", "u")], ErrorCode.none, None)]
        assert (await alice.call(describe())).error_code == ErrorCode.none  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
