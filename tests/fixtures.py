"""Factories of the broker and cluster fixtures: one body for start, yield, stop.

``broker_fixture(...)`` and ``cluster_fixture(...)`` return a pytest fixture; a test module
binds it to a name (``txn_broker = broker_fixture(scope="module", env=SWEEP_ENV)``). A
function-scoped one keeps its data in ``tmp_path / "data"``, a wider one in
``tmp_path_factory.mktemp(name) / "data"``. ``secure_cluster_fixture(...)`` starts
``kaas cluster --secure`` (SASL_SSL + SCRAM-SHA-512 + ACLs) and yields its client settings.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kaas.testing import BrokerProcess, ClusterProcess, free_ports, read_properties, wait_for


def _data_dir(request: pytest.FixtureRequest, name: str) -> Path:
    if request.scope == "function":
        return request.getfixturevalue("tmp_path") / "data"
    return request.getfixturevalue("tmp_path_factory").mktemp(name) / "data"


def broker_fixture(*, scope: str = "function", name: str = "broker", doc: str | None = None, **kwargs):
    """A fixture yielding a started ``BrokerProcess(data, **kwargs)``, SIGKILLed at the end."""

    def fixture(request):
        with BrokerProcess(_data_dir(request, name), **kwargs).running() as b:
            yield b

    fixture.__doc__ = doc
    return pytest.fixture(scope=scope)(fixture)


def cluster_fixture(brokers: int = 3, *, scope: str = "function", name: str = "cluster", doc: str | None = None,
                    params: list | None = None, extra: list[str] | Callable[[object], list[str]] | None = None,
                    ready: Callable[[ClusterProcess], None] | None = None,
                    before_stop: Callable[[ClusterProcess], None] | None = None, **kwargs):
    """A fixture yielding a started ``ClusterProcess(data, brokers, **kwargs)``, stopped at the end.

    Args:
        params: the fixture's params; then ``extra`` may be a function of ``request.param``.
        extra: the brokers' arguments, or a function from the param to them.
        ready: called with the started cluster before it is yielded (inside the teardown's reach).
        before_stop: called with the cluster at teardown, before it is stopped.
    """

    def fixture(request):
        broker_args = extra(request.param) if callable(extra) else extra
        c = ClusterProcess(_data_dir(request, name), brokers, extra=broker_args, **kwargs).start()
        try:
            if ready is not None:
                ready(c)
            yield c
        finally:
            if before_stop is not None:
                before_stop(c)
            c.stop()

    fixture.__doc__ = doc
    return pytest.fixture(scope=scope, params=params)(fixture)


class SecureCluster(NamedTuple):
    """A running ``kaas cluster --secure``: its data directory, the admin's
    ``client.properties`` (path and, as a confluent-kafka config, settings) and one
    AdminClient with them."""

    data: Path
    props: Path
    conf: dict[str, str]
    admin: AdminClient


def secure_cluster_fixture(brokers: int = 3, *, scope: str = "function", name: str = "secure",
                           doc: str | None = None):
    """A fixture yielding a ``SecureCluster``: ``kaas cluster --secure`` with ``brokers``
    brokers (one SASL_SSL listener each, SCRAM-SHA-512 peers, the authoriser on), yielded
    once every broker is in Metadata over SASL_SSL; SIGTERMed at the end. The supervisor's
    output goes to ``supervisor.log`` next to the data directory."""

    def fixture(request):
        data = _data_dir(request, name)
        log_path = data.parent / "supervisor.log"
        base = free_ports(brokers)
        log = open(log_path, "ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "kaas.cli", "cluster", "--secure", "--brokers", str(brokers), "--data", str(data),
             "--base-port", str(base), "--restart-delay", "0.5", "--",
             "--group-initial-rebalance-delay-ms", "0", "--log-level", "debug"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        try:
            props = data / "run" / "client.properties"
            wait_for(lambda: props.exists() and "sasl.password" in props.read_text(), 20, "client.properties")
            conf = read_properties(props)
            conf.pop("ssl.endpoint.identification.algorithm", None)

            admin = AdminClient(conf)  # one client: a client dropped mid-handshake is a tls_handshake_failed line

            def formed():
                assert proc.poll() is None, log_path.read_text()
                try:
                    md = admin.list_topics(timeout=5)
                except KafkaException:
                    return None
                return len(md.brokers) == brokers and md
            wait_for(formed, 40, f"{brokers} brokers in Metadata over SASL_SSL")
            yield SecureCluster(data, props, conf, admin)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    fixture.__doc__ = doc
    return pytest.fixture(scope=scope)(fixture)
