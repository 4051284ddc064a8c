"""The minimal ``--listeners`` parse (kaas.settings.parse_listeners) and the SASL options
of ``kaas broker``."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kaas.cli import cli
from kaas.settings import Listener, parse_listeners


def test_parse_listeners():
    assert parse_listeners("SASL_PLAINTEXT://127.0.0.1:9092, plaintext://:9093") == (
        Listener("SASL_PLAINTEXT", "127.0.0.1", 9092, "SASL_PLAINTEXT"),
        Listener("PLAINTEXT", "127.0.0.1", 9093, "PLAINTEXT"))
    assert parse_listeners("PLAINTEXT://[::1]:9092")[0].host == "::1"


@pytest.mark.parametrize("bad", ["", "127.0.0.1:9092", "PLAINTEXT://host", "PLAINTEXT://h:x", "INTERNAL://h:1",
                                 "SSL://h:1", "SASL_SSL://h:1", "PLAINTEXT://h:1,PLAINTEXT://h:2"])
def test_bad_listeners(bad):
    with pytest.raises(ValueError):
        parse_listeners(bad)


@pytest.mark.parametrize(("args", "message"), [
    (["--listeners", "SSL://127.0.0.1:1"], "--listeners"),
    (["--sasl-enabled-mechanisms", "GSSAPI"], "--sasl-enabled-mechanisms"),
])
def test_broker_refuses_bad_sasl_options(tmp_path, args, message):
    res = CliRunner().invoke(cli, ["broker", "--data", str(tmp_path), *args])
    assert res.exit_code == 2 and message in res.output
