"""kaas for testing Kafka applications: real kaas clusters started in a test, faults on
demand, and verdicts on exactly-once (``docs/testing.rst``).

The public, stable API:

- ``cluster(brokers=3, ...)``: a context manager yielding a ``Cluster`` (bootstrap, client
  settings, brokers to kill, pause, resume and restart, leaders and coordinators,
  failpoints, a full disk, topics, health), ``kaas.testing.cluster``;
- ``kaas.testing.verify``: exactly-once between an input and an output topic, the group's
  committed offsets, and the transactional anomalies of the output's log;
- the pytest plugin ``kaas.testing.plugin`` (fixtures ``kaas_cluster``, ``kaas_broker``,
  ``chaos``), registered through the ``pytest11`` entry point.

Also here, for kaas's own tests and scripts: the process launchers (``BrokerProcess``,
``ClusterProcess``, readiness probes, free ports; ``kaas.testing.procs``) and the fork
server that starts clusters without new interpreters (``kaas.testing.forkserver``).

A leaf used only by tests and scripts: no broker module imports it. Names are imported on
first use, so ``import kaas.testing`` (as pytest does for the plugin) costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kaas.testing.clusters import Broker as Broker
    from kaas.testing.clusters import BrokerDown as BrokerDown
    from kaas.testing.clusters import Cluster as Cluster
    from kaas.testing.clusters import Unsupported as Unsupported
    from kaas.testing.clusters import cluster as cluster
    from kaas.testing.procs import BrokerProcess as BrokerProcess
    from kaas.testing.procs import ClusterProcess as ClusterProcess
    from kaas.testing.procs import api_versions_ok as api_versions_ok
    from kaas.testing.procs import client_settings as client_settings
    from kaas.testing.procs import free_port as free_port
    from kaas.testing.procs import free_ports as free_ports
    from kaas.testing.procs import read_properties as read_properties
    from kaas.testing.procs import wait_for as wait_for
    from kaas.testing.procs import wait_ready as wait_ready

_WHERE = {
    "Broker": "kaas.testing.clusters",
    "BrokerDown": "kaas.testing.clusters",
    "Cluster": "kaas.testing.clusters",
    "Unsupported": "kaas.testing.clusters",
    "cluster": "kaas.testing.clusters",
    "BrokerProcess": "kaas.testing.procs",
    "ClusterProcess": "kaas.testing.procs",
    "api_versions_ok": "kaas.testing.procs",
    "client_settings": "kaas.testing.procs",
    "free_port": "kaas.testing.procs",
    "free_ports": "kaas.testing.procs",
    "read_properties": "kaas.testing.procs",
    "wait_for": "kaas.testing.procs",
    "wait_ready": "kaas.testing.procs",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'kaas.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
