"""The pure share-group machine (``kaas.domain.share_group``): joins, leaves, epochs,
fencing, the session timer, the group's maximum size and snapshots (the ``simple`` assignor:
test_share_assignor.py)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E

from kaas.domain.consumer_group import TopicImage, TopicInfo
from kaas.domain.share_group import ShareConfig, ShareGroup, ShareHeartbeat

IMAGE = TopicImage.of(1, [TopicInfo("id-a", "a", 3), TopicInfo("id-b", "b", 1)])
CFG = ShareConfig(session_timeout_ms=45_000, max_size=3)


def join(g: ShareGroup, mid: str, topics=("a",), now: int = 0, image: TopicImage = IMAGE):
    return g.heartbeat(ShareHeartbeat(mid, 0, subscribed_topic_names=tuple(topics)), now, image, CFG)


def test_join_heartbeat_leave_and_epochs():
    g = ShareGroup("g")
    r = join(g, "m1")
    assert (r.error_code, r.member_epoch, r.changed) == (E.none, 1, True)
    assert r.assignment == {"id-a": frozenset({0, 1, 2})}
    r = g.heartbeat(ShareHeartbeat("m1", 1), 10, IMAGE, CFG)
    assert (r.error_code, r.member_epoch, r.assignment, r.changed) == (E.none, 1, None, False)
    r2 = join(g, "m2")
    assert r2.member_epoch == 2 and g.group_epoch == 2
    r = g.heartbeat(ShareHeartbeat("m1", 1), 20, IMAGE, CFG)
    assert r.member_epoch == 2 and r.assignment is not None  # takes the new epoch at once
    assert g.heartbeat(ShareHeartbeat("m1", 1), 20, IMAGE, CFG).error_code == E.fenced_member_epoch
    assert g.heartbeat(ShareHeartbeat("zz", 2), 20, IMAGE, CFG).error_code == E.unknown_member_id
    r = g.heartbeat(ShareHeartbeat("m2", -1), 30, IMAGE, CFG)
    assert (r.member_epoch, set(g.members), g.group_epoch) == (-1, {"m1"}, 3)


def test_bad_requests_and_max_size():
    g = ShareGroup("g")
    assert g.heartbeat(ShareHeartbeat("", 0, subscribed_topic_names=("a",)), 0, IMAGE, CFG).error_code \
        == E.invalid_request
    assert g.heartbeat(ShareHeartbeat("m", 0), 0, IMAGE, CFG).error_code == E.invalid_request
    for m in ("m1", "m2", "m3"):
        assert join(g, m).error_code == E.none
    assert join(g, "m4").error_code == E.group_max_size_reached


def test_session_timer_fences_and_reassigns():
    g = ShareGroup("g")
    join(g, "m1", now=0)
    join(g, "m2", now=30_000)
    assert g.next_deadline() == 45_000
    assert g.tick(45_000, IMAGE) == ["m1"]
    assert set(g.members) == {"m2"} and g.members["m2"].assignment == {"id-a": frozenset({0, 1, 2})}


def test_topic_growth_bumps_the_epoch():
    g = ShareGroup("g")
    join(g, "m1")
    grown = TopicImage.of(2, [TopicInfo("id-a", "a", 5), TopicInfo("id-b", "b", 1)])
    r = g.heartbeat(ShareHeartbeat("m1", 1), 5, grown, CFG)
    assert r.member_epoch == 2 and r.assignment == {"id-a": frozenset(range(5))}


def test_snapshot_round_trips():
    g = ShareGroup("g")
    join(g, "m1")
    join(g, "m2", topics=("a", "b"))
    back = ShareGroup.restore("g", g.snapshot(), now_ms=100, session_timeout_ms=1000)
    assert back.snapshot() == g.snapshot() and back.next_deadline() == 1100
