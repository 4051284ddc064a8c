"""Share sessions (KIP-932): a share consumer's incremental ShareFetch state on one broker.

A session is keyed by (group id, member id) and remembers the partitions the member
fetches from this broker and the epoch its next request must carry (Apache's
``ShareSessionCache`` and ``SharePartitionManager.newContext``):

==========================  ==============================================================
request epoch               outcome
==========================  ==============================================================
ShareFetch 0                opens a (new) session with the request's partitions; a request
                            that also acknowledges is INVALID_REQUEST (nothing can have
                            been acquired in a session that does not exist yet); the cache
                            full: SHARE_SESSION_LIMIT_REACHED
ShareFetch -1               the final request: acknowledgements only, the session must exist
                            (SHARE_SESSION_NOT_FOUND), the caller closes it afterwards
ShareFetch n > 0            the session must exist (SHARE_SESSION_NOT_FOUND) at epoch n
                            (INVALID_SHARE_SESSION_EPOCH); adds the request's partitions,
                            drops the forgotten ones, and expects n + 1 next (after
                            2**31 - 1 comes 1)
ShareAcknowledge 0          INVALID_SHARE_SESSION_EPOCH
ShareAcknowledge -1         the session must exist; the caller closes it after the acks
ShareAcknowledge n > 0      as ShareFetch n, without changing the partitions
==========================  ==============================================================

As Apache's cache, a session belongs to the connection that opened it (epoch 0): when that
connection closes, the session ends (``connection_closed``; the caller releases the
member's records, Apache's ``ShareGroupListener.onMemberLeave``). A later request of the
session may come over another connection; a session opened again (epoch 0) belongs to
the new one. Group membership plays no part: a member that left its share group keeps
its sessions until their final request or their connection's end, as in Apache. Beyond
Apache, a full cache evicts the session idle the longest once it has been idle for
``idle_ms`` (the share session timeout).

Pure: no I/O, no clock (times come in as ``now_ms``). Sessions live in the broker's memory
only, as in Apache.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "MAX_SESSIONS", "FetchContext", "ShareSession", "ShareSessions",
           "next_epoch"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_SESSIONS = 2000  # Apache's group.share.max.share.sessions default
_I32_MAX = 2**31 - 1

K = TypeVar("K", bound=Hashable)


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (wrapping to 1, never back to 0)."""
    return 1 if epoch >= _I32_MAX else epoch + 1


@dataclass(slots=True)
class ShareSession(Generic[K]):
    """One member's session: the partitions it fetches here, in the order it named them,
    and the epoch its next request must carry."""

    group_id: str
    member_id: str
    epoch: int
    partitions: dict[K, None] = field(default_factory=dict)
    last_used_ms: int = 0
    connection: int = 0  # the connection that opened it (0: none to follow)


@dataclass(frozen=True, slots=True)
class FetchContext(Generic[K]):
    """How to serve one ShareFetch: ``error`` (the top-level code; NONE to go on), the
    partitions to fetch from, whether the answer is full (every partition) or
    incremental (those with something to say), and whether this is the final request."""

    error: ErrorCode
    partitions: tuple[K, ...] = ()
    full: bool = True
    final: bool = False


class ShareSessions(Generic[K]):
    """The share sessions of one broker.

    Args:
        max_sessions: how many sessions may exist at once.
        idle_ms: how long a session must have been unused before a full cache evicts it.
    """

    def __init__(self, max_sessions: int = MAX_SESSIONS, idle_ms: int = 45_000) -> None:
        self.max_sessions = max_sessions
        self.idle_ms = idle_ms
        self._sessions: dict[tuple[str, str], ShareSession[K]] = {}
        self._by_connection: dict[int, set[tuple[str, str]]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession[K] | None:
        return self._sessions.get((group_id, member_id))

    def of_group(self, group_id: str) -> list[ShareSession[K]]:
        return [s for (g, _), s in self._sessions.items() if g == group_id]

    def fetch(self, group_id: str, member_id: str, epoch: int, requested: Iterable[K], forgotten: Iterable[K],
              acknowledges: bool, now_ms: int = 0, connection: int = 0) -> FetchContext[K]:
        """Check a ShareFetch against the member's session and update the session
        (``connection``: the request's connection, which a session opened now belongs to)."""
        key = (group_id, member_id)
        if epoch == FINAL_EPOCH:
            s = self._sessions.get(key)
            if s is None:
                return FetchContext(ErrorCode.share_session_not_found)
            return FetchContext(ErrorCode.none, tuple(dict.fromkeys([*s.partitions, *requested])), True, True)
        if epoch == INITIAL_EPOCH:
            if acknowledges:
                return FetchContext(ErrorCode.invalid_request)
            self.close(group_id, member_id)
            if len(self._sessions) >= self.max_sessions and not self._evict(now_ms):
                return FetchContext(ErrorCode.share_session_limit_reached)
            parts = dict.fromkeys(requested)
            self._sessions[key] = ShareSession(group_id, member_id, next_epoch(epoch), parts, now_ms, connection)
            if connection:
                self._by_connection.setdefault(connection, set()).add(key)
            return FetchContext(ErrorCode.none, tuple(parts), True)
        s = self._sessions.get(key)
        if s is None:
            return FetchContext(ErrorCode.share_session_not_found)
        if epoch < 0 or s.epoch != epoch:
            return FetchContext(ErrorCode.invalid_share_session_epoch)
        for k in requested:
            s.partitions.setdefault(k, None)
        for k in forgotten:
            s.partitions.pop(k, None)
        s.epoch = next_epoch(epoch)
        s.last_used_ms = now_ms
        return FetchContext(ErrorCode.none, tuple(s.partitions), False)

    def acknowledge(self, group_id: str, member_id: str, epoch: int, now_ms: int = 0) -> ErrorCode:
        """Check a ShareAcknowledge against the member's session (and move its epoch on)."""
        if epoch == INITIAL_EPOCH:
            return ErrorCode.invalid_share_session_epoch
        s = self._sessions.get((group_id, member_id))
        if s is None:
            return ErrorCode.share_session_not_found
        if epoch == FINAL_EPOCH:
            return ErrorCode.none
        if epoch < 0 or s.epoch != epoch:
            return ErrorCode.invalid_share_session_epoch
        s.epoch = next_epoch(epoch)
        s.last_used_ms = now_ms
        return ErrorCode.none

    def _evict(self, now_ms: int) -> bool:
        """Make room: drop the session unused the longest, if it has been idle long enough."""
        oldest = min(self._sessions.values(), key=lambda s: s.last_used_ms, default=None)
        if oldest is None or now_ms - oldest.last_used_ms < self.idle_ms:
            return False
        self.close(oldest.group_id, oldest.member_id)
        return True

    def close(self, group_id: str, member_id: str) -> ShareSession[K] | None:
        """End the member's session; the session it had, if any."""
        s = self._sessions.pop((group_id, member_id), None)
        if s is not None and s.connection:
            keys = self._by_connection.get(s.connection)
            if keys is not None:
                keys.discard((group_id, member_id))
                if not keys:
                    del self._by_connection[s.connection]
        return s

    def connection_closed(self, connection: int) -> list[ShareSession[K]]:
        """The connection ``connection`` closed: end the sessions it opened; those sessions."""
        keys = self._by_connection.pop(connection, set()) if connection else set()
        return [s for k in sorted(keys) if (s := self._sessions.pop(k, None)) is not None]
