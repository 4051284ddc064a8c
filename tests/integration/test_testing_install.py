"""``pip install .`` into a fresh virtual environment gives the pytest plugin: its options
in ``pytest --help`` and a test using ``kaas_broker`` passing, all from the installed
package (not this checkout). The environment takes kaas's dependencies from this one's
site-packages (a path file); kaas itself is built (pip's isolated build: setuptools, mypy and
kio from the index) and installed as a user's ``pip install`` would (a wheel, no editable
link), with the modules of ``kaas._native.COMPILED`` compiled where a C compiler exists."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_pip_install_gives_the_plugin(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    target = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    deps = [p for p in {sysconfig.get_paths()["purelib"], *site.getsitepackages()} if "site-packages" in p]
    (tmp_path / "venv" / target.split(str(venv) + "/", 1)[1] / "kaas-deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(REPO)],
                   check=True, timeout=300, cwd=tmp_path)  # (this pip, run for the new environment)
    where = subprocess.run([str(py), "-c", "import kaas.testing.plugin as p; print(p.__file__)"], check=True,
                           capture_output=True, text=True, cwd=tmp_path).stdout
    assert where.startswith(target), where
    probe = ("import kaas._native as n, kaas.wire.batch as b; "
             "print(all(n.compiled(m) for m in n.COMPILED), b.__file__.endswith('.py'))")
    out = subprocess.run([str(py), "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    has_cc = shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is not None
    assert out.split() == [str(has_cc), str(not has_cc)], out  # compiled and loaded where a C compiler exists
    helptext = subprocess.run([str(py), "-m", "pytest", "--help"], check=True, capture_output=True, text=True,
                              cwd=tmp_path).stdout
    assert "--kaas-brokers" in helptext and "--kaas-keep-data" in helptext and "--kaas-scope" in helptext
    project = tmp_path / "app"
    project.mkdir()
    (project / "test_app.py").write_text(
        "def test_broker(kaas_broker):\n"
        "    topic = kaas_broker.create_topic(kaas_broker.unique('t'), 2)\n"
        "    assert kaas_broker.leader_of(topic, 1).id == 0\n")
    run = subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider"], capture_output=True, text=True,
                         cwd=project, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
