"""A ConsumerGroupHeartbeat (KIP-848) as the consumer group machine takes it: the request's
fields, the reply's, the settings it is handled with, and the checks Apache makes before it
looks at any group (``validate_heartbeat``). ``domain.groups.consumer.group`` is the machine.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kaas.domain.groups.consumer.member import LEFT_STATIC, Assignment, Owned

__all__ = ["LEAVE_EPOCH", "LEAVE_STATIC_EPOCH", "Fenced", "GroupConfig", "Heartbeat", "HeartbeatReply",
           "validate_heartbeat"]

LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = LEFT_STATIC


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The settings a heartbeat is handled with (broker or per-group configs)."""

    session_timeout_ms: int
    assignors: tuple[str, ...]
    max_size: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The fields of a ConsumerGroupHeartbeat request (topic ids as strings); ``None`` means
    "not sent / unchanged", as on the wire."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Owned | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """The answer's fields; ``assignment`` None means "not sent" (unchanged). ``changed``:
    the group's durable state changed, so it must be on file before this is answered."""

    error_code: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    assignment: Assignment | None = None
    changed: bool = False


@dataclass(frozen=True, slots=True)
class Fenced:
    """A member ``tick`` removed, and why (``session`` or ``rebalance``)."""

    member_id: str
    reason: str


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


def validate_heartbeat(hb: Heartbeat, api_version: int, group_id: str,
                       assignor_names: tuple[str, ...]) -> HeartbeatReply | None:
    """The request checks Apache makes before it looks at any group
    (``GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid``): an
    INVALID_REQUEST or UNSUPPORTED_ASSIGNOR reply, or None."""
    def invalid(msg: str) -> HeartbeatReply:
        return HeartbeatReply(ErrorCode.invalid_request, msg)

    epoch = hb.member_epoch
    if (api_version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH) and not hb.member_id.strip():
        return invalid("MemberId can't be empty.")
    if not group_id.strip():
        return invalid("GroupId can't be empty.")
    if _blank(hb.instance_id):
        return invalid("InstanceId can't be empty.")
    if _blank(hb.rack_id):
        return invalid("RackId can't be empty.")
    if epoch == 0:
        if hb.rebalance_timeout_ms == -1:
            return invalid("RebalanceTimeoutMs must be provided in first request.")
        if hb.owned is None or hb.owned:
            return invalid("TopicPartitions must be empty when (re-)joining.")
        if hb.subscribed_topic_names is None and hb.subscribed_topic_regex is None:
            return invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    elif epoch == LEAVE_STATIC_EPOCH:
        if hb.instance_id is None:
            return invalid("InstanceId can't be null.")
    elif epoch < LEAVE_STATIC_EPOCH:
        return invalid("MemberEpoch is invalid.")
    if hb.server_assignor is not None and hb.server_assignor not in assignor_names:
        return HeartbeatReply(ErrorCode.unsupported_assignor,
                              f"ServerAssignor {hb.server_assignor} is not supported. "
                              f"Supported assignors: {', '.join(assignor_names)}.")
    return None
