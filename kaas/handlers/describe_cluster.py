"""DescribeCluster (60): cluster id, controller and live brokers."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from kio.schema.describe_cluster import v0, v1, v2
from kio.schema.errors import ErrorCode

from kaas.handlers._auth import OPS_NOT_ASKED, cluster_operations

if TYPE_CHECKING:
    from kaas.handlers.context import Context

    DescribeClusterRequest: TypeAlias = (v0.DescribeClusterRequest | v1.DescribeClusterRequest
                                         | v2.DescribeClusterRequest)

API_KEY = 60
VERSIONS = (0, 2)


async def handle(ctx: Context, req: DescribeClusterRequest) -> dict[str, object]:
    broker = ctx.broker
    endpoint_type = 1 if isinstance(req, v0.DescribeClusterRequest) else req.endpoint_type
    if endpoint_type != 1:  # as Apache: brokers answer for their own endpoints, controllers for theirs
        return {"throttle_time": 0, "error_code": ErrorCode.mismatched_endpoint_type if endpoint_type == 2
                else ErrorCode.unsupported_endpoint_type, "error_message": "The request was sent to an endpoint "
                "of type BROKER, but we wanted an endpoint of type CONTROLLER" if endpoint_type == 2
                else f"Unsupported endpoint type {endpoint_type}", "cluster_id": "", "brokers": []}
    return {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "endpoint_type": 1,
        "cluster_id": broker.settings.cluster_id, "controller_id": broker.controller_id(ctx.session.listener),
        "brokers": [{"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack, "is_fenced": False}
                    for b in broker.brokers(ctx.session.listener)],
        "cluster_authorized_operations": cluster_operations(ctx)
        if req.include_cluster_authorized_operations else OPS_NOT_ASKED,
    }
