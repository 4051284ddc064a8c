"""The SCRAM users of a cluster and Apache's rules for changing them
(AlterUserScramCredentials, DescribeUserScramCredentials), as pure functions over an
immutable mapping ``user -> mechanism -> ScramCredential``.

Invariants:
    - an alteration request is judged per user: if any of a user's deletions or
      upsertions is refused, none of that user's is applied (Apache
      ``ControllerApis``/``ScramControlManager``); one result per user, in the order the
      users first appear;
    - a user named twice in one request, whatever the mechanisms and whether deleted or
      upserted, is DUPLICATE_RESOURCE (Apache's ``ScramControlManager.alterCredentials``
      keys a request's changes by user name: ``kafka-configs`` sends one mechanism per
      request), unless its first change was refused already (that error stands); an
      unknown mechanism is UNSUPPORTED_SASL_MECHANISM, iterations outside [4096, 16384] or an empty
      user name UNACCEPTABLE_CREDENTIAL, the deletion of a credential that does not exist
      RESOURCE_NOT_FOUND;
    - an upsertion stores (salt, StoredKey, ServerKey, iterations) computed from the
      client's salted password; the salted password itself is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kaas.domain.scram import (
    MAX_ITERATIONS,
    MECHANISM_TYPES,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)

Users = Mapping[str, Mapping[str, ScramCredential]]
MECHANISM_CODES = {name: code for code, name in MECHANISM_TYPES.items()}


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:  # the salted password is a password equivalent
        return f"Upsertion(user={self.user!r}, mechanism={self.mechanism}, iterations={self.iterations})"


@dataclass(frozen=True, slots=True)
class Result:
    user: str
    error_code: ErrorCode
    error_message: str | None = None


_TWICE = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")


def _check(change: Deletion | Upsertion, users: Users) -> tuple[ErrorCode, str] | None:
    if not change.user:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if change.mechanism not in MECHANISM_TYPES:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    name = MECHANISM_TYPES[change.mechanism]
    if isinstance(change, Deletion):
        if name not in users.get(change.user, {}):
            return ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
        return None
    if change.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if change.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    if not change.salt or not change.salted_password:
        return ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"
    return None


def alter(users: Users, deletions: Iterable[Deletion], upsertions: Iterable[Upsertion]
          ) -> tuple[dict[str, dict[str, ScramCredential]], list[Result]]:
    """Apply one AlterUserScramCredentials request.

    Returns:
        the users afterwards (a new mapping; users left with no credential are gone) and
        one result per user named in the request.
    """
    changes: list[Deletion | Upsertion] = [*deletions, *upsertions]
    order = list(dict.fromkeys(c.user for c in changes))
    accepted: dict[str, Deletion | Upsertion] = {}
    failed: dict[str, tuple[ErrorCode, str]] = {}
    for change in changes:  # deletions first, then upsertions, as Apache walks them
        if change.user in failed:
            continue
        if accepted.pop(change.user, None) is not None:
            failed[change.user] = _TWICE
            continue
        err = _check(change, users)
        if err is not None:
            failed[change.user] = err
        else:
            accepted[change.user] = change
    out = {u: dict(creds) for u, creds in users.items()}
    for change in accepted.values():
        name = MECHANISM_TYPES[change.mechanism]
        if isinstance(change, Deletion):
            out[change.user].pop(name, None)
        else:
            out.setdefault(change.user, {})[name] = credential_from_salted(
                name, change.salt, change.salted_password, change.iterations)
    out = {u: c for u, c in out.items() if c}
    results = [Result(u, *failed[u]) if u in failed else Result(u, ErrorCode.none) for u in order]
    return out, results


@dataclass(frozen=True, slots=True)
class Description:
    user: str
    error_code: ErrorCode
    error_message: str | None
    credentials: tuple[tuple[int, int], ...]  # (mechanism code, iterations)


def describe(users: Users, names: Iterable[str] | None) -> list[Description]:
    """DescribeUserScramCredentials: every user when ``names`` is None or empty."""
    names = list(names or ())

    def one(user: str) -> Description:
        creds = users.get(user)
        if not creds:
            return Description(user, ErrorCode.resource_not_found,
                               "Attempt to describe a user credential that does not exist", ())
        return Description(user, ErrorCode.none, None, tuple(
            (MECHANISM_CODES[m], c.iterations) for m, c in sorted(creds.items())))

    if not names:
        return [one(u) for u in sorted(users)]
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    out = []
    for n in dict.fromkeys(names):
        if counts[n] > 1:
            out.append(Description(n, ErrorCode.duplicate_resource,
                                   "Cannot describe SCRAM credentials for the same user twice in a single request",
                                   ()))
        else:
            out.append(one(n))
    return out
