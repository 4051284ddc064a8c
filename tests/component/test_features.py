"""Feature levels (KIP-584) in one process: a real Broker (the controller of its one-broker
cluster, so it writes ``__cluster/features.json`` itself), real connections, dispatch and
handlers over memory streams.

A new cluster finalizes kaas's new-cluster levels; ApiVersions v3/v4 advertise them as
Apache 4.4 does; UpdateFeatures upgrades, downgrades (safe, unsafe), validates only and
refuses with Apache's messages; the epoch rises with each change; group.version and
share.version at 0 turn their APIs off (UNSUPPORTED_VERSION); the levels survive a
restart; a corrupt file is reported, refused and left as it is.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import structlog.testing
import trio
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersions3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersions4
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from kio.schema.update_features.v0 import request as uf0
from kio.schema.update_features.v1 import request as uf1
from kio.schema.update_features.v2 import request as uf2
from kio.static.primitive import i8, i16, i32Timedelta

from kaas.domain import features
from kaas.domain.acl import Operation
from tests.component.test_acls import ADMIN, ALICE, C, creation, grant, open_broker
from tests.component.test_acls import open_client as open_client_as
from tests.component.test_connection import open_broker_in, open_client

TV, GV, SV, MV = "transaction.version", "group.version", "share.version", "metadata.version"
UPGRADE, SAFE, UNSAFE = 1, 2, 3
NEW = {MV: 33, TV: features.TRANSACTION_VERSION_MAX, GV: 1, SV: 1}


async def wait_created(broker: Any) -> None:
    with trio.fail_after(10):
        while not broker.layout.features.exists() or broker.features.advertised()[0] < 1:
            await trio.sleep(0.05)


async def api_versions(client: Any, v: int = 4) -> Any:
    cls = ApiVersions4 if v == 4 else ApiVersions3
    return await client.call(cls(client_software_name="t", client_software_version="1"))


async def finalized(client: Any) -> tuple[int, dict[str, int]]:
    r = await api_versions(client)
    assert all(f.min_version_level == f.max_version_level for f in r.finalized_features)
    return r.finalized_features_epoch, {f.name: f.max_version_level for f in r.finalized_features}


def update(*ups: tuple[str, int, int], validate_only: bool = False, v: int = 1) -> Any:
    mod = uf1 if v == 1 else uf2
    return mod.UpdateFeaturesRequest(feature_updates=tuple(
        mod.FeatureUpdateKey(feature=f, max_version_level=i16(lv), upgrade_type=i8(t)) for f, lv, t in ups),
        validate_only=validate_only)


async def test_new_cluster_levels_and_api_versions(tmp_path):
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        await wait_created(broker)
        r = await api_versions(client, 4)
        assert r.error_code == ErrorCode.none
        assert {f.name: (f.min_version, f.max_version) for f in r.supported_features} == {
            MV: (33, 33), TV: (0, features.TRANSACTION_VERSION_MAX), GV: (0, 1), SV: (0, 1)}
        assert await finalized(client) == (1, NEW)
        r3 = await api_versions(client, 3)  # v3: the features whose minimum is 0 are left out (as Apache)
        assert [(f.name, f.min_version, f.max_version) for f in r3.supported_features] == [(MV, 33, 33)]
        assert {f.name: f.max_version_level for f in r3.finalized_features} == NEW
        assert broker.features.level(TV) == features.TRANSACTION_VERSION_MAX


async def test_downgrade_upgrade_and_epochs(tmp_path):
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        await wait_created(broker)
        r = await client.call(update((TV, 0, SAFE), validate_only=True))
        assert (r.error_code, r.error_message, [(x.feature, x.error_code, x.error_message) for x in r.results]) == \
            (ErrorCode.none, None, [(TV, ErrorCode.none, "NONE")])
        assert await finalized(client) == (1, NEW)  # validate_only changes nothing

        r = await client.call(update((TV, 0, SAFE), (SV, 0, UNSAFE)))
        assert r.error_code == ErrorCode.none, r
        assert await finalized(client) == (2, {MV: 33, GV: 1})  # a feature at 0 leaves the list
        assert broker.features.level(TV) == 0

        r = await client.call(update((TV, 1, UPGRADE), (SV, 1, UPGRADE), v=2))
        assert (r.error_code, r.error_message) == (ErrorCode.none, None)
        assert await finalized(client) == (3, {MV: 33, GV: 1, TV: 1, SV: 1})
        r = await client.call(update((TV, 1, UPGRADE)))  # no change: the epoch stays
        assert r.error_code == ErrorCode.none
        assert (await finalized(client))[0] == 3

        # v0: AllowDowngrade is not read (every v0 update is an upgrade), as in Apache 4.4
        r = await client.call(uf0.UpdateFeaturesRequest(feature_updates=(uf0.FeatureUpdateKey(
            feature=TV, max_version_level=i16(0), allow_downgrade=True),)))
        assert r.error_code == ErrorCode.invalid_update_version
        assert r.error_message.endswith("Can't downgrade the version of this feature without setting the upgrade "
                                        "type to either safe or unsafe downgrade.")
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        assert await finalized(client) == (3, {MV: 33, GV: 1, TV: 1, SV: 1})  # survives a restart


PREFIX = "The update failed for all features since the following feature had an error: "


@pytest.mark.parametrize(("ups", "message"), [
    ([(TV, features.TRANSACTION_VERSION_MAX + 1, UPGRADE)],
     f"Invalid update version {features.TRANSACTION_VERSION_MAX + 1} for feature transaction.version. "
     f"Local controller 0 only supports versions 0-{features.TRANSACTION_VERSION_MAX}"),
    ([(TV, 0, UPGRADE)], "Invalid update version 0 for feature transaction.version. Can't downgrade the version of "
                         "this feature without setting the upgrade type to either safe or unsafe downgrade."),
    ([(TV, 1, 0)], "Invalid update version 1 for feature transaction.version. The controller does not support the "
                   "given upgrade type."),
    ([(TV, -1, UNSAFE)], "Invalid update version -1 for feature transaction.version. A feature version cannot be "
                         "less than 0."),
    ([(GV, 1, SAFE), ("foo.version", 1, UPGRADE)],
     "Invalid update version 1 for feature foo.version. Local controller 0 does not support this feature."),
    ([("foo.version", 0, SAFE)], "Invalid update version 0 for feature foo.version. Feature foo.version not found."),
    ([(MV, 32, SAFE)], "Invalid update version 32 for feature metadata.version. Local controller 0 only supports "
                       "versions 33-33"),
    ([("kraft.version", 1, UPGRADE)],
     "Invalid update version 1 for feature kraft.version. Local controller 0 does not support this feature."),
])
async def test_refusals(tmp_path, ups, message):
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        await wait_created(broker)
        for v in (1, 2):
            r = await client.call(update(*ups, v=v))
            assert (r.error_code, r.error_message) == (ErrorCode.invalid_update_version, PREFIX + message)
            assert getattr(r, "results", ()) == ()
        assert await finalized(client) == (1, NEW)


def consumer_heartbeat() -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(group_id="g", member_id="", member_epoch=0, instance_id=None, rack_id=None,
                                         rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                                         subscribed_topic_names=("t",), server_assignor=None, topic_partitions=())


def share_heartbeat() -> ShareGroupHeartbeatRequest:
    return ShareGroupHeartbeatRequest(group_id="s", member_id="m" * 22, member_epoch=0, rack_id=None,
                                      subscribed_topic_names=("t",))


async def test_group_and_share_versions_gate_their_apis(tmp_path):
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        await wait_created(broker)
        assert (await client.call(consumer_heartbeat())).error_code != ErrorCode.unsupported_version
        assert (await client.call(share_heartbeat())).error_code != ErrorCode.unsupported_version
        assert (await client.call(update((GV, 0, SAFE), (SV, 0, SAFE)))).error_code == ErrorCode.none
        assert (await client.call(consumer_heartbeat())).error_code == ErrorCode.unsupported_version
        assert (await client.call(share_heartbeat())).error_code == ErrorCode.unsupported_version
        keys = {k.api_key for k in (await api_versions(client)).api_keys}
        assert {68, 69, 76, 77, 78, 79} <= keys  # still listed, as Apache lists them
        assert (await client.call(update((GV, 1, UPGRADE), (SV, 1, UPGRADE)))).error_code == ErrorCode.none
        assert (await client.call(consumer_heartbeat())).error_code != ErrorCode.unsupported_version
        assert (await client.call(share_heartbeat())).error_code != ErrorCode.unsupported_version


async def test_corrupt_file_reported_and_kept(tmp_path):
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        await wait_created(broker)
        path = broker.layout.features
        path.write_text('{"format": 1, "epoch": "x"}')
        with structlog.testing.capture_logs() as logs:
            with trio.fail_after(5):
                while broker.features.error is None:
                    await trio.sleep(0.05)
        assert any(e["event"] == "features_unreadable" for e in logs)
        assert await finalized(client) == (1, NEW)  # the last good copy stays in force
        r = await client.call(update((TV, 0, SAFE)))
        assert r.error_code == ErrorCode.kafka_storage_error
        assert path.read_text() == '{"format": 1, "epoch": "x"}'  # never overwritten
    async with open_broker_in(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        assert await finalized(client) == (-1, {})  # never read a good copy: levels unknown
        assert (await client.call(consumer_heartbeat())).error_code == ErrorCode.kafka_storage_error


async def test_update_features_needs_alter_on_the_cluster(tmp_path):
    async with open_broker(tmp_path) as (broker, nursery), open_client_as(broker, nursery, ALICE) as alice, \
            open_client_as(broker, nursery, ADMIN) as admin:
        await wait_created(broker)
        r = await alice.call(update((TV, 0, SAFE)))
        assert (r.error_code, r.results) == (ErrorCode.cluster_authorization_failed, ())
        await grant(admin, creation(C, "kafka-cluster", Operation.ALTER))
        assert (await alice.call(update((TV, 0, SAFE)))).error_code == ErrorCode.none
        assert (await finalized(alice))[1].get(TV) is None  # ApiVersions needs no ACL
