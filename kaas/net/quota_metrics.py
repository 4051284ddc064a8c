"""Client quota windows on ``/metrics``: per quota type and quota entity (the window's
user and client-id tags, "" where the quota in force does not name them), the rate this
broker measured, the average throttle time it answered and the quota. Only the windows of
enabled quota types exist (a type is enabled while some entity sets its key), and a window
idle for an hour is dropped, as Apache's sensors.

=========================================================  ==============================================
kaas metric                                                Apache (JMX ``kafka.server``)
=========================================================  ==============================================
``kaas_client_quota_byte_rate{quota_type,user,client_id}``  ``type=Produce|Fetch,user,client-id``
                                                           ``byte-rate``
``kaas_client_quota_request_time{user,client_id}``         ``type=Request,...`` ``request-time`` (percent)
``kaas_client_quota_mutation_rate{user,client_id}``        ``type=ControllerMutation,...`` ``mutation-rate``
``kaas_client_quota_tokens{user,client_id}``               ``type=ControllerMutation,...`` ``tokens``
``kaas_client_quota_throttle_time_ms{quota_type,...}``     ``type=<quota type>,...`` ``throttle-time``
``kaas_client_quota_limit{quota_type,user,client_id}``     (none: the quota the window is held to)
=========================================================  ==============================================
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from kaas.broker.quota_sensors import FETCH, MUTATION, PRODUCE, REQUEST, SensorView

__all__ = ["quota_families"]


def quota_families(views: Iterable[SensorView]) -> Iterator[Any]:
    """The metric families of the enforcer's windows (``ClientQuotaEnforcer.views``)."""
    from prometheus_client.core import GaugeMetricFamily

    tagged = ["quota_type", "user", "client_id"]
    byte_rate = GaugeMetricFamily("kaas_client_quota_byte_rate",
                                  "Bytes per second this broker counted against a Produce or Fetch quota window.",
                                  labels=tagged)
    request_time = GaugeMetricFamily("kaas_client_quota_request_time",
                                     "Request handling time per second, in percent of one thread (request quota).",
                                     labels=["user", "client_id"])
    mutation_rate = GaugeMetricFamily("kaas_client_quota_mutation_rate",
                                      "Partitions created or deleted per second (controller mutation quota).",
                                      labels=["user", "client_id"])
    tokens = GaugeMetricFamily("kaas_client_quota_tokens",
                               "Tokens left in the controller mutation quota's bucket.", labels=["user", "client_id"])
    throttle = GaugeMetricFamily("kaas_client_quota_throttle_time_ms",
                                 "Average throttle time answered over the last minute.", labels=tagged)
    limit = GaugeMetricFamily("kaas_client_quota_limit", "The quota a window is held to.", labels=tagged)
    for v in views:
        tags = [v.quota_type, v.user, v.client_id]
        if v.quota_type in (PRODUCE, FETCH):
            byte_rate.add_metric(tags, v.rate)
        elif v.quota_type == REQUEST:
            request_time.add_metric(tags[1:], v.rate)
        elif v.quota_type == MUTATION:
            mutation_rate.add_metric(tags[1:], v.rate)
            if v.tokens is not None:
                tokens.add_metric(tags[1:], v.tokens)
        throttle.add_metric(tags, v.throttle_time_ms)
        if v.quota is not None:
            limit.add_metric(tags, v.quota)
    yield from (byte_rate, request_time, mutation_rate, tokens, throttle, limit)
