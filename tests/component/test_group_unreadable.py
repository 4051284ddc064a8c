"""A group whose kind's state on file does not parse, at its coordinator on a real
``Broker`` (trio's MockClock): a classic membership is loaded as an unreadable classic
group whatever the request (one that may create the group too), reported once, refused
(UNKNOWN_SERVER_ERROR), left alone by offset expiry and the timers, listed; and a
transaction's offsets that land on an unreadable group of any kind leave its state on file
as it was."""

from __future__ import annotations

import inspect
import json

import pytest
import structlog.testing
import trio
from kio.schema.errors import ErrorCode

from kaas.coord.group.coordinator import GroupCoordinator
from kaas.coord.group.kinds import ClassicKind, ConsumerKind
from kaas.domain.groups.classic.group import LeaveResult
from kaas.domain.groups.consumer.group import Heartbeat
from kaas.domain.groups.share.group import ShareHeartbeat
from kaas.errors import KaasError
from kaas.storage.offset_store import Committed
from tests.component.test_offset_retention import RETENTION_S, commit, join, left_empty, listed, open_broker


def damage(groups: GroupCoordinator, group: str, field: str, change) -> bytes:
    """Unload ``group`` (as a new coordinator would find it), apply ``change`` to its file's
    ``field`` (the kind's state), and return the damaged file."""
    groups.unload(group)
    path = groups.store.path(group)
    obj = json.loads(path.read_bytes())
    change(obj[field])
    path.write_text(json.dumps(obj))
    return path.read_bytes()


async def refused(call) -> object:
    """What ``call()`` (a function, or a coroutine function) answers: its result, or the
    code of the KaasError it raises."""
    try:
        result = call()
        return await result if inspect.isawaitable(result) else result
    except KaasError as exc:
        return exc.code


async def test_an_unreadable_empty_classic_group_is_refused_and_never_expired(shm_path, autojump_clock):
    async with open_broker(shm_path, autojump_clock) as (broker, _):
        groups = broker.groups
        member, gen = await left_empty(groups, "g")
        await trio.sleep(1)  # the timer loop writes the Empty membership
        assert json.loads(groups.store.path("g").read_bytes())["membership"]["state"] == "Empty"
        damaged = damage(groups, "g", "membership", lambda m: m.update(since_ms="long ago"))
        with structlog.testing.capture_logs() as logs:
            # a read first: loads it unreadable (before, only a request that may create the group did)
            assert await refused(lambda: groups.fetch("g", None, False)) == ErrorCode.unknown_server_error
            assert isinstance(groups.groups["g"].kind, ClassicKind) and groups.groups["g"].kind.group is None
            answers = {
                "commit": await refused(lambda: commit(groups, "g")),
                "join": await refused(lambda: join(groups, "g", "t")),
                "heartbeat": await refused(lambda: groups.heartbeat("g", member, None, gen)),
                "describe": await refused(lambda: groups.describe("g")),
                "delete_offsets": await refused(lambda: groups.delete_offsets("g", [("t", 0)])),
            }
            assert answers == dict.fromkeys(answers, ErrorCode.unknown_server_error)
            await trio.sleep(RETENTION_S * 3)  # offset expiry passes, the timers run
            assert "g" in listed(groups)
        assert groups.store.path("g").read_bytes() == damaged
        assert [x["event"] for x in logs if x["log_level"] == "error"] == ["group_membership_unreadable"]
        assert not [x for x in logs if x["event"] == "group_offsets_expired"]
        # DeleteGroups removes it (the way out), and the id is free again
        assert await groups.delete("g") == ErrorCode.none and not groups.store.path("g").exists()
        assert (await join(groups, "g", "t"))[1] == 1


async def test_a_transactions_offsets_keep_an_unreadable_state_on_file(shm_path, autojump_clock):
    """The offset hook of a transaction's end is not refused (the transaction must end): it
    writes the offsets and carries the damaged classic membership or consumer state along
    unchanged, never the state of a group kaas could not read."""
    async with open_broker(shm_path, autojump_clock) as (broker, _):
        groups = broker.groups
        member, gen = await join(groups, "classic", "t")
        reply, _ = await groups.consumers.heartbeat("modern", Heartbeat("m", 0, rebalance_timeout_ms=5_000,
                                                                        subscribed_topic_names=("t",), owned=()),
                                                    api_version=1)
        assert reply.error_code == ErrorCode.none
        staged = {("t", 0): Committed(11, timestamp=groups.now())}
        assert await groups.txn_commit("classic", producer_id=5, member_id=member, group_instance_id=None,
                                       generation_id=gen, offsets=staged) == ErrorCode.none
        assert await groups.txn_commit("modern", producer_id=5, member_id="m", group_instance_id=None,
                                       generation_id=reply.member_epoch, offsets=staged) == ErrorCode.none
        bad_member = lambda m: m["members"][0].update(session_timeout_ms="soon")  # noqa: E731
        bad_state = lambda c: c["members"][0].update(state="no-such-state")  # noqa: E731
        for group, field, change, kind in (("classic", "membership", bad_member, ClassicKind),
                                           ("modern", "consumer", bad_state, ConsumerKind)):
            damage(groups, group, field, change)
            state = json.loads(groups.store.path(group).read_bytes())[field]
            await groups.complete_txn(group, 5, commit=True)
            e = groups.groups[group]
            assert isinstance(e.kind, kind) and e.kind.unreadable is not None
            on_file = json.loads(groups.store.path(group).read_bytes())
            assert on_file[field] == state and on_file["offsets"]["t"]["0"][0] == 11 and not on_file["pending"]
            with pytest.raises(KaasError) as exc:
                await groups.fetch(group, None, False)
            assert exc.value.code == ErrorCode.unknown_server_error


USE, NOT_FOUND = ErrorCode.unknown_server_error, ErrorCode.group_id_not_found
UNKNOWN_MEMBER = ErrorCode.unknown_member_id
NOT_CLASSIC = "not a classic group"
# docs/groups.rst, "A group kaas cannot read": refused where the answer depends on the state,
# the kind's own answer where the kind alone decides it
ANSWERS = {
    "classic": {"join": USE, "sync": USE, "heartbeat": USE, "leave": USE, "commit": USE, "fetch": USE,
                "delete_offsets": USE, "describe": USE, "consumer_heartbeat": USE, "share_heartbeat": USE,
                "consumer_describe": NOT_FOUND, "share_describe": NOT_FOUND},
    "consumer": {"join": USE, "sync": USE, "heartbeat": USE, "leave": USE, "commit": USE, "fetch": USE,
                 "delete_offsets": USE, "describe": NOT_CLASSIC, "consumer_heartbeat": USE,
                 "share_heartbeat": NOT_FOUND, "consumer_describe": USE, "share_describe": NOT_FOUND},
    "share": {"join": NOT_FOUND, "sync": UNKNOWN_MEMBER, "heartbeat": UNKNOWN_MEMBER, "leave": UNKNOWN_MEMBER,
              "commit": NOT_FOUND, "fetch": NOT_FOUND, "delete_offsets": NOT_FOUND, "describe": NOT_CLASSIC,
              "consumer_heartbeat": NOT_FOUND, "share_heartbeat": USE, "consumer_describe": NOT_FOUND,
              "share_describe": USE},
}


async def answers(groups: GroupCoordinator, group: str) -> dict[str, object]:
    """What each request names ``group`` answers: its error code (or, for DescribeGroups of
    another kind, that it is not a classic group)."""
    consumer = Heartbeat("c", 0, rebalance_timeout_ms=5_000, subscribed_topic_names=("t",), owned=())
    share = ShareHeartbeat("s", 0, subscribed_topic_names=("t",))
    calls = {
        "join": lambda: join(groups, group, "t"),
        "sync": lambda: groups.sync(group, member_id="m", group_instance_id=None, generation_id=1, assignments=[],
                                    protocol_type=None, protocol_name=None),
        "heartbeat": lambda: groups.heartbeat(group, "m", None, 1),
        "leave": lambda: groups.leave(group, [("m", None)]),
        "commit": lambda: groups.commit(group, member_id="", group_instance_id=None, generation_id=-1,
                                        offsets={("t", 0): Committed(1)}),
        "fetch": lambda: groups.fetch(group, None, False),
        "delete_offsets": lambda: groups.delete_offsets(group, [("t", 0)]),
        "describe": lambda: groups.describe(group),
        "consumer_heartbeat": lambda: groups.consumers.heartbeat(group, consumer, api_version=1),
        "share_heartbeat": lambda: groups.shares.heartbeat(group, share),
        "consumer_describe": lambda: groups.consumers.describe(group),
        "share_describe": lambda: groups.shares.describe(group),
    }
    return {name: _code(await refused(call)) for name, call in calls.items()}


def _code(got: object) -> object:
    """The error code in an answer: a KaasError's, a LeaveGroup's one member's, a reply's,
    the first of a tuple's (a heartbeat's reply and interval, OffsetDelete's code and
    partitions); a DescribeGroups view of another kind of group: NOT_CLASSIC."""
    if isinstance(got, tuple):
        got = got[0]
    if isinstance(got, LeaveResult):
        return got.members[0].error_code
    if isinstance(got, dict):
        return NOT_CLASSIC if got.get("not_found", "").endswith("is not a classic group.") else got
    return getattr(got, "error_code", got)


@pytest.mark.parametrize("kind", ["classic", "consumer", "share"])
async def test_an_unreadable_group_answers_each_request_as_the_docs_say(shm_path, autojump_clock, kind):
    async with open_broker(shm_path, autojump_clock) as (broker, _):
        groups = broker.groups
        if kind == "classic":
            await join(groups, "g", "t")
        elif kind == "consumer":
            await groups.consumers.heartbeat("g", Heartbeat("m", 0, rebalance_timeout_ms=5_000,
                                                            subscribed_topic_names=("t",), owned=()), api_version=1)
        else:
            await groups.shares.heartbeat("g", ShareHeartbeat("m", 0, subscribed_topic_names=("t",)))
        field = {"classic": "membership", "consumer": "consumer", "share": "share"}[kind]
        damaged = damage(groups, "g", field, lambda state: state.update(members="garbage"))
        with structlog.testing.capture_logs() as logs:
            got = await answers(groups, "g")
            assert await answers(groups, "g") == got  # the same each time
        assert got == ANSWERS[kind]
        assert groups.store.path("g").read_bytes() == damaged
        assert len([x for x in logs if x["log_level"] == "error"]) == 1
        assert {"g"} == {row["group_id"] for row in groups.list_groups()}
