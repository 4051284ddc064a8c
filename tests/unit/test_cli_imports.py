"""What a ``kaas broker`` process imports: the broker's modules, not the test libraries of
the venv it runs from, nor the tool commands' modules.

Each case runs in a child interpreter, as a broker does, so the test process (which has
hypothesis and pytest loaded) cannot hide an import.
"""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from kaas.cli import cli

_CHILD = r"""
import sys
import kaas.cli
tools = sorted(m for m in ("kaas.tools.txn", "kaas.tools.topics", "kaas.tools.groups", "kaas.tools.inspect_data")
               if m in sys.modules)
kaas.cli._without_test_libraries()
import kaas.broker, kaas.net.server  # what the broker command imports
from kio.schema.errors import ErrorCode
assert ErrorCode.none == 0
loaded = sorted(m for m in ("hypothesis", "pytest", "_pytest", "trio.testing", "rich")
                if sys.modules.get(m) is not None)
print(",".join(tools) or "-", ",".join(loaded) or "-")
"""


def test_broker_process_imports_no_test_libraries_no_rich_and_no_tools():
    import hypothesis  # noqa: F401  the venv has it, so kio would import it

    res = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    tools, loaded = res.stdout.split()
    assert tools == "-", f"importing kaas.cli loaded the tool commands: {tools}"
    assert loaded == "-", f"a broker process would import: {loaded}"


def test_without_test_libraries_leaves_a_loaded_hypothesis_alone():
    from kaas.cli import _without_test_libraries

    _without_test_libraries()  # this process has imported kio and hypothesis already
    assert sys.modules["hypothesis"] is not None


def test_lazy_tool_commands_are_listed_and_run():
    runner = CliRunner()
    res = runner.invoke(cli, ["--help"])
    assert res.exit_code == 0
    for name in ("broker", "cluster", "txn", "topics", "groups", "inspect"):
        assert f"  {name} " in res.output, name
    res = runner.invoke(cli, ["topics", "--help"])
    assert res.exit_code == 0 and "create" in res.output
    res = runner.invoke(cli, ["no-such-command"])
    assert res.exit_code == 2 and "No such command" in res.output
