"""Share sessions (``kaas.domain.share_sessions``): Apache's epoch rules for ShareFetch and
ShareAcknowledge."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kaas.domain.share_sessions import ShareSessions, next_epoch

NONE = ErrorCode.none


def test_a_session_opens_continues_and_ends():
    s: ShareSessions[str] = ShareSessions()
    ctx = s.fetch("g", "m", 0, ["a", "b"], [], False)
    assert (ctx.error, ctx.partitions, ctx.full, ctx.final) == (NONE, ("a", "b"), True, False)
    ctx = s.fetch("g", "m", 1, ["c"], ["a"], True)  # incremental: adds c, forgets a
    assert (ctx.error, ctx.partitions, ctx.full) == (NONE, ("b", "c"), False)
    assert s.acknowledge("g", "m", 2) == NONE
    assert s.fetch("g", "m", 3, [], [], False).partitions == ("b", "c")
    final = s.fetch("g", "m", -1, ["d"], [], True)
    assert (final.error, final.partitions, final.final) == (NONE, ("b", "c", "d"), True)
    assert s.close("g", "m") is not None and s.get("g", "m") is None


def test_stale_unknown_and_misplaced_epochs():
    s: ShareSessions[str] = ShareSessions()
    assert s.fetch("g", "m", 1, [], [], False).error == ErrorCode.share_session_not_found
    assert s.fetch("g", "m", -1, [], [], True).error == ErrorCode.share_session_not_found
    assert s.acknowledge("g", "m", 1) == ErrorCode.share_session_not_found
    assert s.acknowledge("g", "m", -1) == ErrorCode.share_session_not_found
    assert s.fetch("g", "m", 0, ["a"], [], True).error == ErrorCode.invalid_request  # acks on opening
    assert s.fetch("g", "m", 0, ["a"], [], False).error == NONE
    assert s.fetch("g", "m", 2, [], [], False).error == ErrorCode.invalid_share_session_epoch
    assert s.acknowledge("g", "m", 0) == ErrorCode.invalid_share_session_epoch
    assert s.acknowledge("g", "m", -7) == ErrorCode.invalid_share_session_epoch
    assert s.fetch("g", "m", 1, [], [], False).error == NONE
    assert s.fetch("g", "m", 1, [], [], False).error == ErrorCode.invalid_share_session_epoch  # replayed
    # reopening starts over
    assert s.fetch("g", "m", 0, ["z"], [], False).partitions == ("z",)
    assert s.get("g", "m") is not None and s.get("g", "m").epoch == 1  # type: ignore[union-attr]
    # sessions are per (group, member)
    assert s.fetch("h", "m", 1, [], [], False).error == ErrorCode.share_session_not_found


def test_epochs_wrap_to_one_and_the_cache_is_bounded():
    assert next_epoch(2**31 - 1) == 1 and next_epoch(5) == 6
    s: ShareSessions[str] = ShareSessions(max_sessions=2)
    assert s.fetch("g", "a", 0, [], [], False).error == NONE
    assert s.fetch("g", "b", 0, [], [], False).error == NONE
    assert s.fetch("g", "c", 0, [], [], False).error == ErrorCode.share_session_limit_reached
    assert s.fetch("g", "a", 0, [], [], False).error == NONE  # a member reopening its own is fine
    assert len(s) == 2 and [x.member_id for x in s.of_group("g")] == ["b", "a"]


def test_a_full_cache_evicts_the_session_idle_the_longest():
    s: ShareSessions[str] = ShareSessions(max_sessions=2, idle_ms=1000)
    assert s.fetch("g", "a", 0, [], [], False, now_ms=0).error == NONE
    assert s.fetch("g", "b", 0, [], [], False, now_ms=500).error == NONE
    assert s.acknowledge("g", "a", 1, now_ms=900) == NONE  # a is used again
    assert s.fetch("g", "c", 0, [], [], False, now_ms=1400).error == ErrorCode.share_session_limit_reached
    assert s.fetch("g", "c", 0, [], [], False, now_ms=1500).error == NONE  # b idle for 1000 ms: evicted
    assert s.get("g", "b") is None and s.get("g", "a") is not None


def test_a_session_ends_with_the_connection_that_opened_it():
    """Apache's ShareSessionCache: the connection that opened a session (epoch 0) ends it
    when it closes; another connection's close, or none, leaves it alone."""
    s: ShareSessions[str] = ShareSessions()
    assert s.fetch("g", "a", 0, ["p"], [], False, connection=7).error == NONE
    assert s.fetch("g", "b", 0, ["p"], [], False, connection=7).error == NONE
    assert s.fetch("h", "a", 0, ["p"], [], False, connection=8).error == NONE
    assert s.fetch("g", "c", 0, ["p"], [], False).error == NONE  # no connection to follow
    assert s.fetch("g", "a", 1, [], [], False, connection=9).error == NONE  # continued elsewhere: still 7's
    assert s.connection_closed(9) == [] and s.connection_closed(0) == []
    assert [(x.group_id, x.member_id) for x in s.connection_closed(7)] == [("g", "a"), ("g", "b")]
    assert s.get("g", "a") is None and s.get("g", "b") is None and len(s) == 2
    assert s.connection_closed(7) == []
    # reopened on another connection, it belongs to that one; a final request ends it first
    assert s.fetch("h", "a", 0, ["p"], [], False, connection=10).error == NONE
    assert s.connection_closed(8) == [] and s.get("h", "a") is not None
    assert s.close("h", "a") is not None and s.connection_closed(10) == []
