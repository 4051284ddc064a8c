"""Dynamic broker configs (KIP-226) on a running broker: the layers read from
``__cluster/broker_configs.json`` (``storage.broker_configs``), the ``Settings`` they make
(``kaas.broker_configs.effective``), and the controller's read-alter-write of the file.

Every broker re-reads the file when ``stat`` says it changed (``tasks.broker_configs``,
five times a second, and once a second whatever ``stat`` says), then replaces
``broker.settings`` and gives the partitions it leads their new log configs. The
controller, the file's one writer, applies its own write at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog
import trio

from kaas import broker_configs
from kaas.settings import Settings
from kaas.storage.broker_configs import BrokerConfigFile, BrokerConfigs, broker_configs_path

if TYPE_CHECKING:
    from kaas.broker.ports import ConfigHost

log = structlog.get_logger()


class DynamicConfigs:
    """The dynamic layers this broker applied, and the static settings under them."""

    def __init__(self, broker: ConfigHost, static: Settings) -> None:
        self.broker = broker
        self.static = static
        self.file = BrokerConfigFile(broker_configs_path(static.cluster_dir), fsync=static.fsync)
        self.current = BrokerConfigs()
        self.error: str | None = None  # the file did not parse: the last good layers stay in force
        self.lock = trio.Lock()  # the controller's read-alter-write, one at a time
        self._signature: tuple[int, int, int, int] | None = None

    @property
    def default(self) -> dict[str, str]:
        return self.current.default

    @property
    def mine(self) -> dict[str, str]:
        return self.current.brokers.get(self.static.broker_id, {})

    def read_if_changed(self, force: bool = False) -> BrokerConfigs | None:
        """The file's content when it changed since the last read (or ``force``), else None.
        Blocking file work (``broker.run_io``)."""
        sig = self.file.signature()
        if not force and sig == self._signature:
            return None
        configs = self.file.read()
        self._signature = sig
        return configs

    def apply(self, configs: BrokerConfigs) -> bool:
        """Make ``configs`` the layers in force; True when this broker's settings changed."""
        self.error = None
        if configs == self.current:
            return False
        before = (self.default, self.mine)
        self.current = configs
        if before == (self.default, self.mine):
            return False
        self.broker.settings = broker_configs.effective(self.static, self.default, self.mine)
        self.broker.admin.apply_topic_configs(force=True)
        log.info("broker_configs_applied", version=configs.version, default=sorted(self.default),
                 broker=sorted(self.mine))
        return True
