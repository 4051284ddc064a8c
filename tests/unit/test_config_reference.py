"""docs/configs.rst, the configuration reference, must match the click commands and
kaas.configs (scripts/config_reference.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "config_reference.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_configs_reference_matches_cli():
    res = run("--check")
    assert res.returncode == 0, f"{res.stderr}\nregenerate with: python scripts/config_reference.py"


def test_every_option_is_listed():
    from kaas.cli import cli

    text = run("--print").stdout
    for name in ("broker", "cluster"):
        for p in cli.commands[name].params:
            if isinstance(p, click.Option) and p.name != "help":
                assert f"``{p.opts[0]}" in text, (name, p.opts)
    assert "``--metrics-port INT``" in text and "``--metrics-base-port INT``" in text


def test_check_detects_drift(tmp_path):
    doc = tmp_path / "configs.rst"
    good = (ROOT / "docs" / "configs.rst").read_text()
    doc.write_text(good.replace("``--metrics-port INT``", "``--metrics-port PORT``", 1))
    assert run("--check", "--doc", str(doc)).returncode == 1
    assert run("--doc", str(doc)).returncode == 0
    assert doc.read_text() == good
