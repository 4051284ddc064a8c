"""``--command-config`` of the wire tools: librdkafka-style client properties to the
tools' SASL and TLS settings (``kaas.tools._wire``)."""

from __future__ import annotations

import ssl

import click
import pytest
from click.testing import CliRunner

from kaas.cli import cli
from kaas.tools._wire import open_cluster, read_client_properties, sasl_from_properties, ssl_from_properties


def test_plaintext_has_neither():
    assert sasl_from_properties({}) is None and ssl_from_properties({}) is None


def test_sasl_ssl_gives_both(tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("# secure\nbootstrap.servers=127.0.0.1:9092\nsecurity.protocol=SASL_SSL\n"
                     "sasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\nsasl.password=a=b\n")
    p = read_client_properties(props)
    sasl = sasl_from_properties(p)
    assert (sasl.mechanism, sasl.username, sasl.password) == ("SCRAM-SHA-512", "admin", "a=b")
    ctx = ssl_from_properties(p)
    assert isinstance(ctx, ssl.SSLContext) and ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    with open_cluster("127.0.0.1:1", props) as c:
        assert c.sasl == sasl and c.ssl_context is not None


def test_ssl_without_sasl():
    assert sasl_from_properties({"security.protocol": "ssl"}) is None
    assert ssl_from_properties({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none"}
                               ).check_hostname is False


def test_bad_settings_are_usage_errors(tmp_path):
    with pytest.raises(click.BadParameter, match="not one of"):
        sasl_from_properties({"security.protocol": "KERBEROS"})
    with pytest.raises(click.BadParameter, match="sasl.password"):
        sasl_from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"})
    with pytest.raises(click.BadParameter, match="TLS settings"):
        ssl_from_properties({"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "missing.pem")})


@pytest.mark.parametrize("args", [["topics", "list"], ["groups", "list"], ["txn", "list"], ["acls", "list"],
                                  ["acls", "add"], ["users", "list"]])
def test_every_wire_tool_takes_command_config(args):
    out = CliRunner().invoke(cli, [*args, "--help"])
    assert out.exit_code == 0 and "--command-config" in out.output


def test_client_properties_parse_strictly(tmp_path):
    """One parser (kaas.client.parse_properties) for the tools, the launchers and the bench:
    comments and blank lines skipped, values trimmed, a line without '=' refused with its
    line number."""
    from kaas.client import parse_properties
    from kaas.testing import read_properties

    text = "# admin\n\n! also a comment\nsecurity.protocol = SASL_SSL\nsasl.password=a=b\n"
    assert parse_properties(text) == {"security.protocol": "SASL_SSL", "sasl.password": "a=b"}
    p = tmp_path / "client.properties"
    p.write_text(text + "broken line\n")
    with pytest.raises(ValueError, match=r"client.properties:6: not key=value"):
        read_properties(p)
    with pytest.raises(click.BadParameter, match="not key=value"):
        read_client_properties(p)
