"""``kaas users --data``: the first users written to a data directory no broker runs on."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kaas.cli import cli
from kaas.domain import scram
from kaas.storage import credentials
from kaas.storage.paths import Layout


def users(*args):
    return CliRunner().invoke(cli, ["users", *map(str, args)])


def test_add_list_remove_offline(tmp_path):
    data = tmp_path / "data"
    res = users("add", "admin", "--password", "correct-horse", "--data", data, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [{"user": "admin", "error": None, "message": None}]
    stored = credentials.read(Layout(data).scram_credentials)
    assert scram.verify_password("SCRAM-SHA-512", stored["admin"]["SCRAM-SHA-512"], "correct-horse")
    assert "correct-horse" not in Layout(data).scram_credentials.read_text()
    res = users("add", "bob", "--password", "b", "--mechanism", "SCRAM-SHA-256", "--iterations", 8192,
                "--data", data)
    assert res.exit_code == 0, res.output
    res = users("list", "--data", data, "--json")
    assert json.loads(res.stdout) == [
        {"user": "admin", "mechanisms": ["SCRAM-SHA-256:4096", "SCRAM-SHA-512:4096"]},
        {"user": "bob", "mechanisms": ["SCRAM-SHA-256:8192"]}]
    assert users("remove", "admin", "--data", data).exit_code == 0
    res = users("remove", "nobody", "--data", data)
    assert res.exit_code == 1 and "RESOURCE_NOT_FOUND" in res.output
    assert sorted(credentials.read(Layout(data).scram_credentials)) == ["bob"]


def test_bad_invocations(tmp_path):
    assert users("list").exit_code == 2  # neither --bootstrap nor --data
    assert users("add", "a", "--password", "p", "--iterations", 100, "--data", tmp_path).exit_code == 2
    Layout(tmp_path).security.mkdir(parents=True)
    Layout(tmp_path).scram_credentials.write_text("{garbage")
    res = users("add", "a", "--password", "p", "--data", tmp_path)
    assert res.exit_code == 1 and "corrupt" in res.output
    assert Layout(tmp_path).scram_credentials.read_text() == "{garbage"  # never overwritten
