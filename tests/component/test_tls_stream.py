"""TLS over trio memory streams: the handshake helper's refusals and principal, and the
connection's TLS read that takes every record already received in one call."""

from __future__ import annotations

import ssl

import pytest
import trio
import trio.testing

from kaas.domain.principal import parse_rules
from kaas.net.connection import receive_tls
from kaas.net.tls import open_server_stream, server_context
from kaas.settings import Settings
from kaas.tools.certs import init_dev, issue


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    init_dev(d)
    issue(d, "alice", cn="Alice", ou="apps")
    return d


def _server(pki, client_auth="requested"):
    return server_context(Settings(ssl_certfile=str(pki / "broker.pem"), ssl_keyfile=str(pki / "broker.key"),
                                   ssl_cafile=str(pki / "ca.pem"), ssl_client_auth=client_auth))


def _client(pki, cert: str | None = None):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key"))
    return ctx


async def _pair(pki, cert=None, rules="DEFAULT"):
    a, b = trio.testing.memory_stream_pair()
    client = trio.SSLStream(a, _client(pki, cert), server_hostname="127.0.0.1")
    out = {}
    async with trio.open_nursery() as n:
        async def serve():
            out["server"] = await open_server_stream(b, _server(pki), parse_rules(rules), 5, "memory:0", "SSL")
        n.start_soon(serve)
        await client.do_handshake()
    return client, out["server"]


async def test_principal_of_a_client_certificate(pki):
    _, (_, principal) = await _pair(pki, "alice", "RULE:^CN=([^,]*),OU=apps,O=kaas$/$1/L")
    assert principal == "User:alice"
    _, (_, principal) = await _pair(pki)
    assert principal == "User:ANONYMOUS"


async def test_receive_takes_every_record_already_received(pki):
    client, (server, _) = await _pair(pki)
    for i in range(50):  # fifty TLS records of 100 bytes, as librdkafka writes a request's slices
        await client.send_all(bytes([i]) * 100)
    data = await receive_tls(server, 256 * 1024)
    assert data == b"".join(bytes([i]) * 100 for i in range(50))
    await client.send_all(b"x" * 10)
    assert await receive_tls(server, 4) == b"xxxx"  # never more than asked
    assert await receive_tls(server, 100) == b"x" * 6
    await client.aclose()  # close_notify: the next read reports the end
    assert await receive_tls(server, 100) == b""


async def test_no_rule_applies_closes_the_connection(pki, caplog):
    a, b = trio.testing.memory_stream_pair()
    client = trio.SSLStream(a, _client(pki, "alice"), server_hostname="127.0.0.1")
    async with trio.open_nursery() as n:
        async def serve():
            assert await open_server_stream(b, _server(pki), parse_rules("RULE:^CN=bob,.*$/bob/"), 5, "m", "SSL") \
                is None
        n.start_soon(serve)
        with pytest.raises(trio.BrokenResourceError):
            await client.do_handshake()
            await client.send_all(b"x")
            await client.receive_some(10)
