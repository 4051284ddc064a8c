"""The SCRAM credentials of the cluster: ``__cluster/security/scram-credentials.json``.

Written only by the controller (other brokers forward AlterUserScramCredentials to it),
or by ``kaas users add --data`` while no broker runs; read by every broker, which
re-reads it when the file changes (``tasks.credentials``)::

    {"format": 1, "users": {"alice": {"SCRAM-SHA-512": {"salt": "<b64>",
        "stored_key": "<b64>", "server_key": "<b64>", "iterations": 4096}}}}

Invariants:
    - whole-file writes through ``storage.atomic`` (tmp + fsync + rename): a reader sees
      the old or the new file, never a torn one;
    - no password and no salted password is ever written, only StoredKey and ServerKey;
    - a file that does not parse is reported and refused: the store keeps the error and
      every look-up raises ``CorruptState`` until a good file replaces it. It is never
      read as "no users" (that would turn a damaged file into an open door for a later
      bootstrap, and silently lock everybody out). A missing file is no users.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict, cast

from kaas.domain.scram import MECHANISMS, ScramCredential
from kaas.domain.scram_users import Users
from kaas.errors import CorruptState
from kaas.storage import atomic

FORMAT = 1


class CredentialField(TypedDict):
    """One user's credential of one mechanism, its byte strings in base64."""

    salt: str
    stored_key: str
    server_key: str
    iterations: int


class CredentialsFile(TypedDict):
    """``scram-credentials.json``, format 1: user -> mechanism -> credential."""

    format: int
    users: dict[str, dict[str, CredentialField]]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def to_json(users: Users) -> CredentialsFile:
    return {"format": FORMAT, "users": {
        user: {mech: {"salt": _b64(c.salt), "stored_key": _b64(c.stored_key), "server_key": _b64(c.server_key),
                      "iterations": c.iterations} for mech, c in sorted(creds.items())}
        for user, creds in sorted(users.items())}}


def from_json(raw: Mapping[str, object], path: str = "") -> dict[str, dict[str, ScramCredential]]:
    """Raises: CorruptState: not this format, or a field missing or of the wrong type."""
    obj = cast(CredentialsFile, raw)
    try:
        if obj.get("format") != FORMAT:
            raise ValueError(f"unknown format {obj.get('format')!r}")
        users = obj["users"]
        if not isinstance(users, dict):
            raise ValueError("users is not an object")
        out: dict[str, dict[str, ScramCredential]] = {}
        for user, creds in users.items():
            if not isinstance(creds, dict) or not creds:
                raise ValueError(f"user {user!r}: no credentials")
            out[user] = {}
            for mech, c in creds.items():
                if mech not in MECHANISMS:
                    raise ValueError(f"user {user!r}: unknown mechanism {mech!r}")
                iterations = c["iterations"]
                if not isinstance(iterations, int) or iterations < 1:
                    raise ValueError(f"user {user!r}: bad iterations")
                out[user][mech] = ScramCredential(
                    base64.b64decode(c["salt"], validate=True), base64.b64decode(c["stored_key"], validate=True),
                    base64.b64decode(c["server_key"], validate=True), iterations)
        return out
    except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as exc:
        raise CorruptState(path, f"bad credentials file: {exc}") from None


def read(path: Path) -> dict[str, dict[str, ScramCredential]]:
    """The users in the file now (none when it does not exist).

    Raises:
        CorruptState: the file does not parse.
    """
    obj = atomic.read_json(path)
    return {} if obj is None else from_json(obj, str(path))


def write(path: Path, users: Users, *, fsync: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(path, to_json(users), fsync=fsync)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class CredentialStore:
    """One broker's copy of the credentials file (``broker.credentials``).

    ``refresh`` re-reads the file when its inode, size or mtime changed (a rename always
    gives a new inode); ``lookup`` answers from the copy.
    """

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.users: dict[str, dict[str, ScramCredential]] = {}
        self.error: str | None = None  # the file is corrupt: every look-up refuses
        self._stamp: tuple[int, int, int] | None | bool = False  # False: never read

    def refresh(self) -> bool:
        """Re-read the file if it changed. True when the copy (or its error) changed.

        A corrupt file sets ``error`` (and raises nothing): the caller logs it once.
        """
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        try:
            users = read(self.path)
        except CorruptState as exc:
            self._stamp = stamp
            changed = self.error != exc.reason
            self.error = exc.reason
            return changed
        except OSError as exc:  # EIO and friends: keep the last good copy, try again next time
            if self._stamp is False:  # but never start as "no users"
                self.error = f"credentials file unreadable: {exc}"
            return False
        self._stamp = stamp
        changed = users != self.users or self.error is not None
        self.users, self.error = users, None
        return changed

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for ``mechanism``, None when there is none.

        Raises:
            CorruptState: the file is corrupt; authentication must fail.
        """
        if self._stamp is False:
            self.refresh()
        if self.error is not None:
            raise CorruptState(str(self.path), self.error)
        return self.users.get(user, {}).get(mechanism)

    def snapshot(self) -> Users:
        """Every user (for DescribeUserScramCredentials).

        Raises:
            CorruptState: the file is corrupt.
        """
        if self._stamp is False:
            self.refresh()
        if self.error is not None:
            raise CorruptState(str(self.path), self.error)
        return self.users

    def replace(self, users: Users) -> None:
        """Write ``users`` (the controller, after reading the file afresh with ``read``) and
        take them as the copy.

        Raises:
            OSError: the write failed; the file and the copy are unchanged.
        """
        write(self.path, users, fsync=self.fsync)
        self.users = {u: dict(c) for u, c in users.items()}
        self.error = None
        self._stamp = _stamp(self.path)
