"""The broker's view of the cluster's ACLs: the last good snapshot of
``__cluster/security/acls.json`` as a pure ``domain.acl.Authorizer``, reloaded by
``tasks.acls.serve_acls``, and the controller's edits of the file.

A file that cannot be read is reported once (one error line per bad version of the file)
and refused: the broker keeps its last good ACLs; a broker that never read a good file
denies every authorised request (``Authorizer.deny_all``) but those of super users.
"""

from __future__ import annotations

import structlog
import trio

from kaas.domain.acl import AclBinding, AclFilter, Authorizer, apply_create, apply_delete
from kaas.errors import CorruptState
from kaas.settings import Settings
from kaas.storage.acls import AclFile, acls_path
from kaas.storage.paths import Layout

log = structlog.get_logger()


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by ``;`` (Apache), blanks ignored."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


class AclFileUnusable(Exception):
    """The controller cannot edit the ACL file (it is corrupt or unreadable)."""


class Acls:
    """The ACLs this broker enforces.

    Args:
        settings: ``authorizer``, ``super_users``, ``allow_everyone_if_no_acl_found``, ``fsync``.
        layout: the data directory.
    """

    def __init__(self, settings: Settings, layout: Layout) -> None:
        self.enabled = settings.authorizer
        self.file = AclFile(acls_path(layout.cluster), fsync=settings.fsync)
        self.super_users = parse_super_users(settings.super_users)
        self.allow_if_no_acl = settings.allow_everyone_if_no_acl_found
        self.bindings: tuple[AclBinding, ...] | None = None  # the last good content; None: none yet
        self.authorizer = self._authorizer(None)
        self.signature: tuple[int, int, int, int] | None = None  # the file's stat signature when last read
        self.bad: tuple[int, int, int, int] | None = None  # the signature of the corrupt version last reported
        self.lock = trio.Lock()  # the controller's edits, one at a time
        self.reloads = 0

    def _authorizer(self, bindings: tuple[AclBinding, ...] | None) -> Authorizer:
        return Authorizer(bindings or (), self.super_users, self.allow_if_no_acl, deny_all=bindings is None)

    def reload(self, force: bool = False) -> bool:
        """Read the file again when its stat signature changed (or ``force``). True when the
        ACLs in force changed. Synchronous: a small file (the caller may run it in a thread)."""
        sig = self.file.signature()
        if not force and sig == self.signature and self.bindings is not None:
            return False
        try:
            bindings = self.file.read()
        except (CorruptState, OSError) as exc:
            if sig != self.bad:
                self.bad = sig
                log.error("acl_file_refused", path=str(self.file.path), error=str(exc),
                          kept="last good ACLs" if self.bindings is not None else "none: denying all")
            return False
        self.signature = sig
        if self.bad is not None:
            log.warning("acl_file_readable_again", path=str(self.file.path), acls=len(bindings))
            self.bad = None
        if bindings == self.bindings:
            return False
        self.bindings = bindings
        self.authorizer = self._authorizer(bindings)
        self.reloads += 1
        log.info("acls_loaded", acls=len(bindings))
        return True

    def _current(self) -> tuple[AclBinding, ...]:
        try:
            return self.file.read()
        except (CorruptState, OSError) as exc:
            raise AclFileUnusable(str(exc)) from None

    async def create(self, new: list[AclBinding]) -> None:
        """The controller adds ``new`` to the file and enforces them at once.

        Raises:
            AclFileUnusable: the file is corrupt: refused rather than overwritten.
            OSError: the write failed (nothing changed).
        """
        async with self.lock:
            current = self._current()
            updated = apply_create(current, new)
            if updated != current:
                await trio.to_thread.run_sync(self.file.write, updated)
            self.reload(force=True)

    async def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """The controller removes every binding a filter matches; the matches per filter.

        Raises:
            AclFileUnusable, OSError: as ``create``.
        """
        async with self.lock:
            current = self._current()
            kept, matched = apply_delete(current, filters)
            if kept != current:
                await trio.to_thread.run_sync(self.file.write, kept)
            self.reload(force=True)
            return matched
