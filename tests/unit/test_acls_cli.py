"""``kaas acls``: argument checks that need no broker (the wire paths run in
tests/integration/test_acls.py)."""

from __future__ import annotations

from click.testing import CliRunner

from kaas.cli import cli


def invoke(*args: str):
    return CliRunner().invoke(cli, ["acls", *args, "--bootstrap", "127.0.0.1:1"])


def test_add_needs_resource_operation_and_principal():
    assert "give a resource" in invoke("add", "--operation", "read", "--allow-principal", "User:a").output
    assert "give a resource" in invoke("add", "--topic", "t", "--allow-principal", "User:a").output
    assert "give a resource" in invoke("add", "--topic", "t", "--operation", "read").output


def test_remove_needs_a_resource_and_operations_are_kafka_acls_names():
    assert "give a resource" in invoke("remove").output
    res = invoke("add", "--topic", "t", "--operation", "Write", "--allow-principal", "User:a")
    assert "Invalid value" not in res.output  # case-insensitive, as kafka-acls' Write
    assert "Invalid value" in invoke("add", "--topic", "t", "--operation", "fly", "--allow-principal", "U:a").output
