"""TLS over trio memory streams: the handshake helper's refusals and principal, and the
connection's TLS read that takes every record already received in one call."""

from __future__ import annotations

import ssl
from dataclasses import replace

import pytest
import trio
import trio.testing

from kaas.domain.principal import parse_rules
from kaas.listeners import apply_listener_configs, resolve
from kaas.net.tls import TLSConfigError, TlsReader, open_server_stream, server_context
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


async def _pair(pki, cert=None, rules="DEFAULT", server: ssl.SSLContext | None = None):
    a, b = trio.testing.memory_stream_pair()
    client = trio.SSLStream(a, _client(pki, cert), server_hostname="127.0.0.1")
    out = {}
    async with trio.open_nursery() as n:
        async def serve():
            out["server"] = await open_server_stream(b, server or _server(pki), parse_rules(rules), 5, "memory:0",
                                                     "SSL")
        n.start_soon(serve)
        await client.do_handshake()
    return client, out["server"]


async def test_principal_of_a_client_certificate(pki):
    _, (_, principal) = await _pair(pki, "alice", "RULE:^CN=([^,]*),OU=apps,O=kaas$/$1/L")
    assert principal == "User:alice"
    _, (_, principal) = await _pair(pki)
    assert principal == "User:ANONYMOUS"


async def test_each_listener_has_its_own_client_auth(pki):
    """``listener.name.<l>.ssl.client.auth`` makes that listener's context; the others keep
    ``--ssl-client-auth``. On the required listener a client without a certificate is
    refused and one with a certificate gets its mapped principal."""
    ls, _ = resolve("INTERNAL://:1,EXTERNAL://:2,OTHER://:3", protocol_map="INTERNAL:SSL,EXTERNAL:SASL_SSL,OTHER:SSL",
                    inter_broker="INTERNAL")
    ls = apply_listener_configs(ls, ["listener.name.internal.ssl.client.auth=required",
                                     "listener.name.external.ssl.client.auth=none"])
    s = Settings(listeners=ls, inter_broker_listener="INTERNAL", ssl_certfile=str(pki / "broker.pem"),
                 ssl_keyfile=str(pki / "broker.key"), ssl_cafile=str(pki / "ca.pem"), ssl_client_auth="requested")
    internal, external, other = (server_context(s, x) for x in ls)
    assert (internal.verify_mode, external.verify_mode, other.verify_mode) == (
        ssl.CERT_REQUIRED, ssl.CERT_NONE, ssl.CERT_OPTIONAL)
    with pytest.raises(trio.BrokenResourceError):
        client, opened = await _pair(pki, server=internal)  # TLS 1.3: the client finishes first
        assert opened is None  # the broker refused it and closed the connection
        await client.receive_some(10)
    _, (_, principal) = await _pair(pki, "alice", "RULE:^CN=([^,]*),OU=apps,O=kaas$/$1/L", server=internal)
    assert principal == "User:alice"
    _, (_, principal) = await _pair(pki, "alice", server=external)  # none: no certificate asked for
    assert principal == "User:ANONYMOUS"
    with pytest.raises(TLSConfigError, match="listener.name.internal.ssl.client.auth=required needs --ssl-cafile"):
        server_context(replace(s, ssl_cafile=None), ls[0])
    server_context(replace(s, ssl_cafile=None, ssl_client_auth="none"), ls[1])  # none needs no CAs


def test_the_broker_wide_client_auth_leaves_sasl_ssl_listeners_alone(pki):
    """KIP-684: ``--ssl-client-auth`` applies to SSL listeners; a SASL_SSL listener asks for
    client certificates only with its own ``listener.name.<l>.ssl.client.auth``."""
    ls, _ = resolve("MTLS://:1,SASL://:2,BOTH://:3", protocol_map="MTLS:SSL,SASL:SASL_SSL,BOTH:SASL_SSL",
                    inter_broker="MTLS")
    ls = apply_listener_configs(ls, ["listener.name.both.ssl.client.auth=required"])
    s = Settings(listeners=ls, inter_broker_listener="MTLS", ssl_certfile=str(pki / "broker.pem"),
                 ssl_keyfile=str(pki / "broker.key"), ssl_cafile=str(pki / "ca.pem"), ssl_client_auth="required")
    assert [s.ssl_client_auth_of(x) for x in ls] == ["required", "none", "required"]
    assert [server_context(s, x).verify_mode for x in ls] == [ssl.CERT_REQUIRED, ssl.CERT_NONE, ssl.CERT_REQUIRED]
    server_context(replace(s, ssl_cafile=None), ls[1])  # none there: no CAs needed for it


class _Plain:
    """An SSL stream seen without trio's internals (another trio's ``SSLStream``, say):
    only its public calls."""

    def __init__(self, stream: trio.SSLStream) -> None:
        self.receive_some = stream.receive_some


def _reader(server: trio.SSLStream, internals: bool) -> TlsReader:
    reader = TlsReader(server if internals else _Plain(server))
    assert (reader._obj is not None) is internals  # this trio has them; the stand-in has none
    return reader


@pytest.mark.parametrize("internals", [True, False], ids=["records-at-once", "receive-some"])
async def test_receive_takes_every_record_already_received(pki, internals):
    client, (server, _) = await _pair(pki)
    reader = _reader(server, internals)
    for i in range(50):  # fifty TLS records of 100 bytes, as librdkafka writes a request's slices
        await client.send_all(bytes([i]) * 100)
    want = b"".join(bytes([i]) * 100 for i in range(50))
    data = await reader.receive(256 * 1024)
    while internals is False and len(data) < len(want):  # receive_some: a record per call
        data += await reader.receive(256 * 1024)
    assert data == want
    await client.send_all(b"x" * 10)
    assert await reader.receive(4) == b"xxxx"  # never more than asked
    assert await reader.receive(100) == b"x" * 6
    await client.aclose()  # close_notify: the next read reports the end
    assert await reader.receive(100) == b""


@pytest.mark.parametrize("internals", [True, False], ids=["records-at-once", "receive-some"])
async def test_receive_into_a_large_frame_in_small_records(pki, internals):
    """A 1 MiB request written as 1.5 KiB records (librdkafka's shape) decrypts straight
    into the frame's buffer, byte for byte, while the client keeps writing; the same
    through ``receive_some`` when the stream's internals are not there."""
    import os

    client, (server, _) = await _pair(pki)
    reader = _reader(server, internals)
    payload = os.urandom(1 << 20)
    frame = bytearray(len(payload))
    view = memoryview(frame)

    async def write():
        for i in range(0, len(payload), 1536):
            await client.send_all(payload[i:i + 1536])

    async with trio.open_nursery() as n:
        n.start_soon(write)
        got = 0
        while got < len(frame):
            k = await reader.receive_into(view[got:])
            assert k > 0
            got += k
    assert bytes(frame) == payload


async def test_a_corrupt_record_breaks_the_stream(pki):
    """Ciphertext altered in flight: OpenSSL's error reaches the reader as trio's
    BrokenResourceError (through receive_some), not as data or a silent end."""
    a, b = trio.testing.memory_stream_pair()
    client = trio.SSLStream(a, _client(pki), server_hostname="127.0.0.1")
    out = {}
    async with trio.open_nursery() as n:
        async def serve():
            out["server"] = await open_server_stream(b, _server(pki), parse_rules("DEFAULT"), 5, "memory:0", "SSL")
        n.start_soon(serve)
        await client.do_handshake()
    server, _ = out["server"]
    reader = TlsReader(server)
    await client.send_all(b"fine")
    assert await reader.receive(100) == b"fine"
    # a record of garbage where the next record's ciphertext should be
    await a.send_all(b"\x17\x03\x03\x00\x20" + b"\x00" * 32)
    with pytest.raises(trio.BrokenResourceError):
        await reader.receive(100)


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


async def test_a_close_notify_on_an_open_transport_reads_as_the_end(pki):
    """The client says close_notify and keeps its TCP side open (asyncio's ssl and aiokafka
    do): the reader answers the end at once instead of waiting for more ciphertext."""
    client, (server, _) = await _pair(pki)
    reader = TlsReader(server)
    await client.send_all(b"last")
    assert await reader.receive(100) == b"last"
    async with trio.open_nursery() as n:
        n.start_soon(client.unwrap)  # sends close_notify, then waits for ours
        with trio.fail_after(5):
            assert await reader.receive(100) == b""
        n.cancel_scope.cancel()
