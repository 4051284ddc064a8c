"""Factories of the broker and cluster fixtures: one body for start, yield, stop.

``broker_fixture(...)`` and ``cluster_fixture(...)`` return a pytest fixture; a test module
binds it to a name (``txn_broker = broker_fixture(scope="module", env=SWEEP_ENV)``). A
function-scoped one keeps its data in ``tmp_path / "data"``, a wider one in
``tmp_path_factory.mktemp(name) / "data"``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kaas.testing import BrokerProcess, ClusterProcess


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
