"""``kaas --version`` prints the installed package's version (its metadata, not a copy)."""

from __future__ import annotations

from importlib.metadata import version

from click.testing import CliRunner

from kaas.cli import cli


def test_version_is_the_package_metadata():
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0, res.output
    assert res.output == f"kaas {version('kaas')}\n"
