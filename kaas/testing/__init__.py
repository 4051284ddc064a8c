"""Process launchers that tests and scripts share: real ``kaas broker`` and ``kaas cluster``
processes on free ports, and the polls that wait for them.

Owns starting, signalling and stopping broker processes from the outside (``subprocess``),
the ApiVersions readiness probe and free-port search. A leaf used only by ``tests/`` and
``scripts/``: it imports ``kaas.client`` and nothing of the broker's layers, and no broker
module imports it.
"""

from kaas.testing.procs import BrokerProcess as BrokerProcess
from kaas.testing.procs import ClusterProcess as ClusterProcess
from kaas.testing.procs import api_versions_ok as api_versions_ok
from kaas.testing.procs import client_settings as client_settings
from kaas.testing.procs import free_port as free_port
from kaas.testing.procs import free_ports as free_ports
from kaas.testing.procs import read_properties as read_properties
from kaas.testing.procs import wait_for as wait_for
from kaas.testing.procs import wait_ready as wait_ready

__all__ = [
    "BrokerProcess",
    "ClusterProcess",
    "api_versions_ok",
    "client_settings",
    "free_port",
    "free_ports",
    "read_properties",
    "wait_for",
    "wait_ready",
]
