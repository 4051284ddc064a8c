"""The pytest plugin of ``kaas.testing`` (entry point ``pytest11``: installed with kaas,
loaded by every pytest run in that environment; ``-p no:kaas`` turns it off).

Fixtures:

- ``kaas_cluster``: a ``kaas.testing.Cluster`` of ``--kaas-brokers`` brokers (3), shared
  at ``--kaas-scope`` (``session`` by default; ``module`` or ``function``). Before each
  test a shared cluster is made whole again (``Cluster.reset``: paused brokers resumed,
  failpoints disarmed, the disk freed, healthy), so tests keep apart by their names
  (``kaas_cluster.unique("orders")``). A test marked ``@pytest.mark.kaas(brokers=1,
  tmpfs="64m", secure=True, broker_args=[...])`` gets a cluster of its own with those
  options instead.
- ``kaas_broker``: the same for a one-broker cluster.
- ``chaos``: a ``kaas.testing.chaos.Chaos`` on the test's ``kaas_cluster``: ``chaos.start(...)``
  kills and pauses brokers in the background; what it did is in the test's report
  (section ``kaas chaos``) and ``chaos.events``; it is stopped at the end of the test.

When a test using a cluster fails, the brokers' and the supervisor's logs are copied to
``<pytest's basetemp>/kaas-logs/<test>`` and the report names the directory and shows the
end of each log (section ``kaas logs``). ``--kaas-keep-data`` leaves every data directory
in place. Where kaas cannot run (not a POSIX system), the fixtures skip with the reason.

Loading the plugin costs nothing until a test asks for a fixture: the fork server that
starts clusters fast is started at the end of collection only when a collected test uses
one of them.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from kaas.testing.chaos import Chaos
    from kaas.testing.clusters import Cluster, ClusterContext

FIXTURES = ("kaas_cluster", "kaas_broker", "chaos")
SCOPES = ("function", "module", "session")
LOG_TAIL_LINES = 15
_STASH_FAILED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kaas", "kaas test clusters (kaas.testing)")
    group.addoption("--kaas-brokers", type=int, default=None, metavar="N",
                    help="brokers of the kaas_cluster fixture's cluster (ini kaas_brokers; default 3)")
    group.addoption("--kaas-scope", choices=SCOPES, default=None,
                    help="how widely one kaas cluster is shared (ini kaas_scope; default session)")
    group.addoption("--kaas-keep-data", action="store_true", default=None,
                    help="leave the clusters' data directories (and their paths in the report)")
    parser.addini("kaas_brokers", "brokers of the kaas_cluster fixture's cluster", default="3")
    parser.addini("kaas_scope", "function, module or session: how widely one kaas cluster is shared",
                  default="session")
    parser.addini("kaas_keep_data", "leave the clusters' data directories", type="bool", default=False)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kaas(brokers=N, secure=False, tmpfs=None, broker_args=...): the test's "
                                       "kaas_cluster is a cluster of its own with these kaas.testing.cluster() options")


def _option(config: pytest.Config, name: str) -> Any:
    value = config.getoption(f"kaas_{name}")
    return config.getini(f"kaas_{name}") if value is None else value


def _scope(fixture_name: str, config: pytest.Config) -> Literal["function", "module", "session"]:  # noqa: ARG001
    scope = str(_option(config, "scope"))
    for known in ("function", "module", "session"):
        if scope == known:
            return known
    raise pytest.UsageError(f"kaas_scope must be one of {', '.join(SCOPES)}, not {scope!r}")


def unsupported_reason() -> str | None:
    """Why kaas clusters cannot run here, or None."""
    if os.name != "posix" or not hasattr(os, "fork"):
        return f"kaas test clusters need a POSIX system with fork() (this is {sys.platform})"
    return None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the fork server while the first tests set up, if any collected test needs it."""
    if unsupported_reason() is None and any(set(FIXTURES) & set(getattr(i, "fixturenames", ())) for i in items):
        from kaas.testing.forkserver import warm

        warm()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome: Any = yield
    rep: pytest.TestReport = outcome.get_result()
    if rep.failed:
        item.stash[_STASH_FAILED] = True
    funcargs = getattr(item, "funcargs", {})
    chaos = funcargs.get("chaos")
    if rep.when == "call" and chaos is not None and hasattr(chaos, "report"):
        rep.sections.append(("kaas chaos", chaos.report()))
    if rep.failed and rep.when in ("setup", "call"):
        for name in ("kaas_cluster", "kaas_broker"):
            c = funcargs.get(name)
            if c is not None and hasattr(c, "keep_logs"):
                rep.sections.append((f"kaas logs ({name})", _keep_logs(item, name, c)))


def _keep_logs(item: pytest.Item, name: str, c: Cluster) -> str:
    factory = getattr(item.config, "_tmp_path_factory", None)  # pytest's tmp_path root, when it has one
    base = Path(factory.getbasetemp()) if factory is not None else Path(tempfile.gettempdir())
    dest = c.keep_logs(base / "kaas-logs" / re.sub(r"[^\w.-]+", "_", f"{item.nodeid}-{name}")[-120:])
    lines = [f"logs of {c!r} copied to {dest}"]
    for f in sorted(dest.glob("*.log")):
        tail = f.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        lines += [f"--- {f.name} (last {len(tail)} lines)", *tail]
    return "\n".join(lines)


class _Shared:
    """One started cluster behind a fixture, and whether a test that used it failed."""

    def __init__(self, ctx: ClusterContext) -> None:
        self.ctx = ctx
        self.cluster = ctx.start()


def _context(config: pytest.Config, brokers: int, **options: Any) -> ClusterContext:
    from kaas.testing.clusters import cluster

    reason = unsupported_reason()
    if reason:
        pytest.skip(reason)
    return cluster(brokers, keep_data=bool(_option(config, "keep_data")), **options)


def _shared(request: pytest.FixtureRequest, brokers: int) -> Iterator[_Shared]:
    shared = _Shared(_context(request.config, brokers))
    try:
        yield shared
    finally:
        shared.ctx.stop(failed=False)
        _say_kept(request.config, shared)


def _say_kept(config: pytest.Config, shared: _Shared) -> None:
    if shared.ctx.keep_data:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"kaas: data kept in {shared.cluster.root}")


@pytest.fixture(scope=_scope)
def _kaas_shared_cluster(request: pytest.FixtureRequest) -> Iterator[_Shared]:
    yield from _shared(request, int(_option(request.config, "brokers")))


@pytest.fixture(scope=_scope)
def _kaas_shared_broker(request: pytest.FixtureRequest) -> Iterator[_Shared]:
    yield from _shared(request, 1)


def _for_test(request: pytest.FixtureRequest, shared_name: str, brokers: int,
              marked: bool = True) -> Iterator[Cluster]:
    marker = request.node.get_closest_marker("kaas") if marked else None
    if marker is not None and (marker.args or marker.kwargs):
        options = dict(marker.kwargs)
        n = int(marker.args[0]) if marker.args else int(options.pop("brokers", brokers))
        try:
            ctx = _context(request.config, n, **options)
            c = ctx.start()
        except Exception as exc:
            from kaas.testing.faults import Unsupported

            if isinstance(exc, Unsupported):
                pytest.skip(f"kaas: {exc}")
            raise
        try:
            yield c
        finally:
            ctx.stop(failed=bool(request.node.stash.get(_STASH_FAILED, False)))
        return
    shared: _Shared = request.getfixturevalue(shared_name)
    shared.cluster.reset()
    yield shared.cluster


@pytest.fixture
def kaas_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A running kaas cluster (``kaas.testing.Cluster``); see the plugin's docstring."""
    yield from _for_test(request, "_kaas_shared_cluster", int(_option(request.config, "brokers")))


@pytest.fixture
def kaas_broker(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A running one-broker kaas cluster (``kaas.testing.Cluster``)."""
    yield from _for_test(request, "_kaas_shared_broker", 1, marked=False)


@pytest.fixture
def chaos(kaas_cluster: Cluster) -> Iterator[Chaos]:
    """Background kills and pauses on ``kaas_cluster`` (``kaas.testing.chaos.Chaos``):
    ``chaos.start(every=..., actions=..., seed=...)`` or ``chaos.start(plan=[...])``."""
    from kaas.testing.chaos import Chaos

    c = Chaos(kaas_cluster)
    try:
        yield c
    finally:
        c.stop()
