"""What a consumer group is served with (``ConsumerSettings``): its group configs
(``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``) over the broker's
``group.consumer.*``. The one place they are read, for the consumer runtime and its
classic members alike."""

from __future__ import annotations

from dataclasses import dataclass

from kaas.coord.ports import GroupBroker
from kaas.domain.groups.consumer.heartbeat import GroupConfig

__all__ = ["ConsumerSettings", "consumer_settings"]


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """The machine's config and the heartbeat interval told to its members."""

    config: GroupConfig
    heartbeat_interval_ms: int


def consumer_settings(broker: GroupBroker, group_id: str) -> ConsumerSettings:
    """The group's settings.

    Raises:
        KaasError: KAFKA_STORAGE_ERROR, the group config file was never readable.
    """
    s, g = broker.settings, broker.group_config(group_id)
    return ConsumerSettings(
        GroupConfig(g.consumer_session_timeout_ms, tuple(s.group_consumer_assignors), s.group_consumer_max_size),
        g.consumer_heartbeat_interval_ms)
