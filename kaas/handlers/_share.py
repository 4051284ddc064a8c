"""What ShareFetch (78) and ShareAcknowledge (79) have in common (KIP-932): the request's
group and member, topic ids, acknowledgements per partition, the leader hints of a
partition led elsewhere, and the response layout. The share partitions themselves are
``broker.shares`` (``kaas.coord.share_partitions``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas.domain.share_partition import AckBatch, check_ack_batches
from kaas.errors import KaasError
from kaas.handlers._auth import GROUP, TOPIC, Op, authorize

if TYPE_CHECKING:
    from kaas.handlers.context import Context

log = structlog.get_logger()

Key = tuple[uuid.UUID, int]  # (topic id, partition)
MAX_MEMBER_ID = 36  # Apache refuses longer member ids (a UUID's text is 36 characters)


class WireAckBatch(Protocol):
    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def acknowledge_types(self) -> tuple[int, ...]: ...


class WirePartition(Protocol):
    @property
    def partition_index(self) -> int: ...

    @property
    def acknowledgement_batches(self) -> Sequence[WireAckBatch]: ...


class WireTopic(Protocol):
    @property
    def topic_id(self) -> uuid.UUID | None: ...

    @property
    def partitions(self) -> Sequence[WirePartition]: ...


class WireRequest(Protocol):
    """What ShareFetch and ShareAcknowledge requests have in common."""

    @property
    def group_id(self) -> str | None: ...

    @property
    def member_id(self) -> str | None: ...

    @property
    def share_session_epoch(self) -> int: ...

    @property
    def topics(self) -> Sequence[WireTopic]: ...


def named(topics: Iterable[WireTopic]) -> tuple[list[Key], dict[Key, tuple[WireAckBatch, ...]]]:
    """The partitions a request names, in order, and the acknowledgements of each that has
    some (a partition named twice has them joined: librdkafka may split a topic)."""
    keys: dict[Key, None] = {}
    acks: dict[Key, tuple[WireAckBatch, ...]] = {}
    for t in topics:
        if t.topic_id is None:
            continue
        for p in t.partitions:
            key = (t.topic_id, int(p.partition_index))
            keys[key] = None
            if p.acknowledgement_batches:
                acks[key] = acks.get(key, ()) + tuple(p.acknowledgement_batches)
    return list(keys), acks


def bad_ids(group_id: str | None, member_id: str | None) -> str | None:
    """What is wrong with the request's group and member ids (INVALID_REQUEST), or None:
    Apache 4.4's ``isMemberIdValid`` (1 to 36 characters); an empty group id, which
    Apache lets through, kaas refuses (a share state is named after its group)."""
    if not group_id:
        return "the group id is empty"
    if not member_id or len(member_id) > MAX_MEMBER_ID:
        return "Invalid member id in the request."
    return None


def answer(lock_ms: int, code: ErrorCode = ErrorCode.none, message: str | None = None,
           answers: Answers | None = None) -> dict[str, object]:
    """A ShareFetch or ShareAcknowledge response (the fields of either)."""
    return {"throttle_time": 0, "error_code": code, "error_message": message, "acquisition_lock_timeout": lock_ms,
            "responses": answers.responses() if answers is not None else [],
            "node_endpoints": answers.node_endpoints() if answers is not None else []}


def refusal(ctx: Context, group_id: str | None, member_id: str | None) -> tuple[ErrorCode, str | None] | None:
    """Why the request is refused as a whole, or None, in Apache 4.4's order: a null group
    id, the group's READ permission (GROUP_AUTHORIZATION_FAILED), then the ids
    (INVALID_REQUEST). As in Apache, whether the member is in the share group is not
    asked: its share session decides."""
    if group_id is None:
        return ErrorCode.invalid_request, "Invalid group id in the request."
    if not authorize(ctx, Op.READ, GROUP, group_id):
        return ErrorCode.group_authorization_failed, None
    problem = bad_ids(group_id, member_id)
    if problem is not None:
        return ErrorCode.invalid_request, problem
    return None


def topic_names(ctx: Context) -> dict[uuid.UUID, str]:
    """Topic id -> name of every topic the broker knows."""
    return {m.topic_id: m.name for m in ctx.broker.topics.topics.values()}


def ack_batches(wire: Iterable[WireAckBatch]) -> list[AckBatch]:
    return [AckBatch(int(b.first_offset), int(b.last_offset), tuple(int(t) for t in b.acknowledge_types))
            for b in wire]


@dataclass(slots=True)
class Answers:
    """The per-partition answers of one request, in the order partitions were first named,
    and the leaders to name in ``node_endpoints``."""

    ctx: Context
    names: dict[uuid.UUID, str]
    parts: dict[Key, dict[str, object]] = field(default_factory=dict)
    leaders: set[int] = field(default_factory=set)

    def entry(self, key: Key, **defaults: object) -> dict[str, object]:
        e = self.parts.get(key)
        if e is None:
            e = self.parts[key] = {"partition_index": key[1], "error_code": ErrorCode.none, "error_message": None,
                                   "current_leader": {"leader_id": -1, "leader_epoch": -1}, **defaults}
        return e

    def not_here(self, entry: dict[str, object], topic: str, index: int) -> None:
        """Name the partition's current leader (a NOT_LEADER_OR_FOLLOWER answer)."""
        leader, epoch = self.ctx.broker.leader(topic, index)
        entry["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
        if leader >= 0:
            self.leaders.add(leader)

    def responses(self) -> list[dict[str, object]]:
        by_topic: dict[uuid.UUID, list[dict[str, object]]] = {}
        for (tid, _), e in self.parts.items():
            by_topic.setdefault(tid, []).append(e)
        return [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()]

    def node_endpoints(self) -> list[dict[str, object]]:
        out = []
        for node in sorted(self.leaders):
            info = self.ctx.broker.broker_info(node, self.ctx.session.listener)
            if info is not None:
                out.append({"node_id": info.node_id, "host": info.host, "port": info.port, "rack": info.rack})
        return out


@dataclass(slots=True)
class Call:
    """One ShareFetch or ShareAcknowledge being served: who asks, the partitions it names
    and their acknowledgements, and the answers so far."""

    ctx: Context
    group: str
    member: str
    epoch: int
    lock_ms: int  # the group's record lock duration (acquisition_lock_timeout)
    renew: bool  # v2's is_renew_ack
    requested: list[Key]
    acks: dict[Key, tuple[WireAckBatch, ...]]
    answers: Answers

    @classmethod
    def open(cls, ctx: Context, req: WireRequest, *, renew: bool) -> Call | dict[str, object]:
        """The call, or the answer that refuses the request as a whole (``refusal``)."""
        group, member = req.group_id or "", req.member_id or ""
        refused = refusal(ctx, req.group_id, req.member_id)
        if refused is not None:  # refused before the group is asked: no lock duration (Apache: 0)
            return answer(0, *refused)
        lock_ms = ctx.broker.shares.lock_ms(group) if group else 0
        requested, acks = named(req.topics)
        return cls(ctx, group, member, req.share_session_epoch, lock_ms, renew, requested, acks,
                   Answers(ctx, topic_names(ctx)))

    def reply(self, code: ErrorCode = ErrorCode.none, message: str | None = None) -> dict[str, object]:
        """The response: the partitions' answers, or ``code`` for the whole request."""
        return answer(self.lock_ms, code, message, self.answers if code == ErrorCode.none else None)

    async def acknowledge(self, code_field: str) -> None:
        """Apply the request's acknowledgements (``acknowledge_all``); RENEW (4) is a type
        from v2 on."""
        await acknowledge_all(self.answers, self.group, self.member, self.acks, renew=self.renew,
                              max_type=4 if self.ctx.api_version >= 2 else 3, code_field=code_field)

    def close(self, partitions: Iterable[Key]) -> None:
        """The final epoch was served: end the session, releasing what the member still
        holds of ``partitions`` (the session's)."""
        self.ctx.broker.shares.close_session(self.group, self.member,
                                             session_partitions(self.answers, partitions))


async def acknowledge_all(answers: Answers, group_id: str, member_id: str, acks: Mapping[Key, Sequence[WireAckBatch]],
                          *, renew: bool, max_type: int, code_field: str) -> None:
    """Apply each partition's acknowledgements (concurrently: each waits for its own
    journal's fsync), writing the outcome into the partition's ``code_field`` (and the
    matching ``*_message``)."""
    msg_field = code_field.replace("code", "message")

    async def one(key: Key, wire: Sequence[WireAckBatch]) -> None:
        entry = answers.entry(key)
        name = answers.names.get(key[0])
        if name is None:
            entry[code_field] = ErrorCode.unknown_topic_id
            return
        if not authorize(answers.ctx, Op.READ, TOPIC, name):
            entry[code_field] = ErrorCode.topic_authorization_failed
            return
        batches = ack_batches(wire)
        problem = check_ack_batches(batches, renew=renew, max_type=max_type)
        if problem is not None:
            log.info("share_ack_refused", group=group_id, member=member_id, topic=name, partition=key[1],
                     reason=problem)
            entry[code_field], entry[msg_field] = ErrorCode.invalid_request, problem
            return
        try:
            await answers.ctx.broker.shares.acknowledge(group_id, member_id, name, key[1], batches)
        except KaasError as exc:
            entry[code_field], entry[msg_field] = exc.code, exc.message
            if exc.code == ErrorCode.not_leader_or_follower:
                answers.not_here(entry, name, key[1])

    if len(acks) == 1:
        ((key, wire),) = acks.items()
        await one(key, wire)
        return
    async with trio.open_nursery() as nursery:
        for key, wire in acks.items():
            nursery.start_soon(one, key, wire)


def session_partitions(answers: Answers, keys: Iterable[Key]) -> list[tuple[str, int]]:
    """(topic, partition) of the session's partitions whose topic still exists."""
    return [(answers.names[k[0]], k[1]) for k in keys if k[0] in answers.names]
