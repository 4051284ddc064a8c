"""Group configs (KIP-848, KIP-932) on a running broker: the last good copy of
``__cluster/group_configs.json`` (``storage.group_configs``), what one group runs with
(``config``, cheap: the group machines call it per heartbeat and per fetch), and the
controller's read-alter-write of the file.

Every broker re-reads the file when ``stat`` says it changed (``tasks.group_configs``, five
times a second, and once a second whatever ``stat`` says); the controller, the file's one
writer, applies its own write at once. A file that does not parse is reported once (one
error line per bad version) and refused: the broker keeps its last good copy; a broker that
never read a good one answers KAFKA_STORAGE_ERROR for every group (``config`` raises) until
the file is mended, rather than run groups with configs it cannot see (a read_committed
share group delivering aborted records).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
import trio
from kio.schema.errors import ErrorCode

from kaas.domain.groups import configs as group_configs
from kaas.domain.groups.configs import GroupConfig
from kaas.errors import CorruptState, KaasError
from kaas.storage.group_configs import GroupConfigFile, GroupConfigs

if TYPE_CHECKING:
    from kaas.settings import Settings
    from kaas.storage.paths import Layout

log = structlog.get_logger()


class GroupConfigStore:
    """The group configs this broker applied.

    Args:
        layout: the data directory (``layout.group_configs`` is the file).
        fsync: fsync the controller's writes.
    """

    def __init__(self, layout: Layout, *, fsync: bool = True) -> None:
        self.file = GroupConfigFile(layout.group_configs, fsync=fsync)
        self.current: GroupConfigs | None = None  # the last good content; None: none read yet
        self.error: str | None = None  # the file as it is now does not parse (or cannot be read)
        self.lock = trio.Lock()  # the controller's read-alter-write, one at a time
        self._signature: tuple[int, int, int, int] | None = None  # stat of the version last read
        self._bad: tuple[int, int, int, int] | None = None  # stat of the bad version last reported
        self._cache: dict[str, GroupConfig] = {}
        self._cache_of: Settings | None = None  # the settings the cache was computed with

    def reload(self, force: bool = False) -> bool:
        """Read the file again when its stat signature changed (or ``force``) and apply it.
        True when the configs in force changed. Blocking file work (``broker.run_io``)."""
        sig = self.file.signature()
        if not force and sig == self._signature and self.current is not None:
            return False
        try:
            configs = self.file.read()
        except (CorruptState, OSError) as exc:
            self.error = str(exc)
            if sig != self._bad:
                self._bad = sig
                log.error("group_configs_unreadable", path=str(self.file.path), error=str(exc),
                          kept="last good group configs" if self.current is not None
                          else "none: every group answers KAFKA_STORAGE_ERROR")
            return False
        self._signature = sig
        if self._bad is not None:
            log.warning("group_configs_readable_again", path=str(self.file.path), version=configs.version)
            self._bad = None
        return self.apply(configs)

    def apply(self, configs: GroupConfigs) -> bool:
        """Make ``configs`` the group configs in force; True when they changed."""
        self.error = None
        if configs == self.current:
            return False
        first = self.current is None
        self.current = configs
        self._cache.clear()
        if not first or configs.groups:
            log.info("group_configs_applied", version=configs.version, groups=len(configs.groups))
        return True

    def overrides(self, group_id: str) -> dict[str, str]:
        """The configs ``group_id`` sets (in the last good copy).

        Raises:
            KaasError: KAFKA_STORAGE_ERROR, no good copy of the file was ever read.
        """
        if self.current is None:
            raise KaasError(ErrorCode.kafka_storage_error, f"group config file unreadable: {self.error}")
        return self.current.of(group_id)

    def config(self, settings: Settings, group_id: str) -> GroupConfig:
        """What ``group_id`` runs with under ``settings`` (cached until the file or the
        settings object changes).

        Raises:
            KaasError: KAFKA_STORAGE_ERROR, no good copy of the file was ever read.
        """
        if settings is not self._cache_of:
            self._cache.clear()
            self._cache_of = settings
        got = self._cache.get(group_id)
        if got is None:
            got = group_configs.effective(settings, self.overrides(group_id))
            if len(self._cache) >= 1 << 16:
                self._cache.clear()
            self._cache[group_id] = got
        return got
