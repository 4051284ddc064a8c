"""SASL on a real connection (``net.connection.serve_connection`` with an unauthenticated
SASL_PLAINTEXT Session), dispatch and handlers, with a real ``Broker`` on a tmp data
directory: a SCRAM-SHA-512 login with kio-encoded requests, and every bad input of issue
21, each answered with the right error or a closed connection while the broker keeps
serving another client."""

from __future__ import annotations

import base64
import json
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import structlog
import trio
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeRequestV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kaas.broker import Broker
from kaas.client import SaslConfig, ScramClient
from kaas.domain import scram
from kaas.handlers.session import Session
from kaas.net.connection import serve_connection
from kaas.peers import RENEW_AT_SHARE, LinkFailed, PeerLinks, authenticate_peer, scram_authenticator
from kaas.storage import credentials
from kaas.wire import codec, framing
from kaas.wire.framing import FrameDecoder
from tests.component.test_connection import API_VERSIONS, Client, metadata, open_broker_in, open_stream_pair
from tests.jwt_keys import AUDIENCE, ISSUER, Keys, b64url, client_message

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
FAILED = ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
          "SCRAM-SHA-512")


@pytest.fixture(autouse=True, params=["memory", "socket"])
def stream_kind(request, monkeypatch):
    monkeypatch.setattr(Client, "kind", request.param)
    return request.param


def write_users(path, **passwords: str) -> None:
    users = {u: {m: scram.credential_from_password(m, pw, f"salt-{u}".encode(), 4096) for m in scram.MECHANISMS}
             for u, pw in passwords.items()}
    credentials.write(path, users, fsync=False)


@asynccontextmanager
async def open_broker(tmp_path, **settings: Any) -> AsyncIterator[Broker]:
    def users(broker: Broker) -> None:
        write_users(broker.layout.scram_credentials, **PASSWORDS)

    async with open_broker_in(tmp_path, users, **settings) as (broker, _nursery):
        yield broker


def sasl_session() -> Session:
    return Session(listener="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT", authenticated=False)


@asynccontextmanager
async def open_client(broker: Broker, nursery: trio.Nursery, sasl: bool = True) -> AsyncIterator[Client]:
    ours, theirs = await open_stream_pair(Client.kind)
    nursery.start_soon(serve_connection, broker, theirs, sasl_session() if sasl else None)
    async with ours:
        yield Client(ours)


def handshake(mechanism: str = "SCRAM-SHA-512") -> SaslHandshakeRequest:
    return SaslHandshakeRequest(mechanism=mechanism)


def token(data: bytes) -> SaslAuthenticateRequest:
    return SaslAuthenticateRequest(auth_bytes=data)


async def login(client: Client, user: str = "alice", password: str | None = None,
                mechanism: str = "SCRAM-SHA-512") -> Any:
    """A whole SCRAM exchange; the last SaslAuthenticate response."""
    hs = await client.call(handshake(mechanism))
    assert hs.error_code == ErrorCode.none
    sc = ScramClient(mechanism, user, PASSWORDS.get(user, "x") if password is None else password)
    first = await client.call(token(sc.first()))
    if first.error_code != ErrorCode.none:
        return first
    final = await client.call(token(sc.final(first.auth_bytes)))
    if final.error_code == ErrorCode.none:
        sc.check(final.auth_bytes)
    return final


async def closed_after(client: Client, *reqs) -> list[Any]:
    """Send ``reqs``; the responses the broker sends before it closes the connection."""
    await client.send(*reqs)
    rest = await client.wait_closed()
    out = []
    for req in reqs:
        if not rest:
            break
        (size,) = struct.unpack_from(">i", rest)
        out.append(codec.decode_response(req.__api_key__, req.__version__, rest[4:4 + size])[1])
        rest = rest[4 + size:]
    assert not rest
    return out


async def still_serving(broker: Broker, nursery: trio.Nursery) -> None:
    async with open_client(broker, nursery) as other:
        assert (await login(other, "bob")).error_code == ErrorCode.none
        assert (await other.call(metadata())).controller_id == 0


@asynccontextmanager
async def running(tmp_path, **settings):
    with trio.fail_after(20):
        async with open_broker(tmp_path, **settings) as broker, trio.open_nursery() as nursery:
            yield broker, nursery
            nursery.cancel_scope.cancel()


async def test_scram_sha_512_login_then_requests(tmp_path):
    async with running(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        assert (await client.call(API_VERSIONS)).error_code == ErrorCode.none  # allowed before
        hs = await client.call(handshake())
        assert hs.error_code == ErrorCode.none and set(hs.mechanisms) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
        sc = ScramClient("SCRAM-SHA-512", "alice", "alice-secret", nonce="fixed-client-nonce")
        first = await client.call(token(sc.first()))
        assert first.error_code == ErrorCode.none
        attrs = dict(a.split("=", 1) for a in first.auth_bytes.decode().split(","))
        assert attrs["r"].startswith("fixed-client-nonce") and len(attrs["r"]) > len("fixed-client-nonce")
        assert base64.b64decode(attrs["s"]) == b"salt-alice" and attrs["i"] == "4096"
        final = await client.call(token(sc.final(first.auth_bytes)))
        assert final.error_code == ErrorCode.none and final.error_message is None
        sc.check(final.auth_bytes)  # the broker proved it holds alice's ServerKey
        assert final.session_lifetime.total_seconds() == 0
        md = await client.call(metadata())
        assert md.controller_id == 0


async def test_scram_sha_256_login(tmp_path):
    async with running(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        assert (await login(client, "bob", mechanism="SCRAM-SHA-256")).error_code == ErrorCode.none
        assert (await client.call(metadata())).controller_id == 0


async def test_request_before_authentication_closes_the_connection(tmp_path):
    async with running(tmp_path) as (broker, nursery):
        async with open_client(broker, nursery) as client:
            assert await closed_after(client, metadata()) == []
        async with open_client(broker, nursery) as client:
            # half-way through the exchange is not authenticated either
            assert (await client.call(handshake())).error_code == ErrorCode.none
            assert await closed_after(client, metadata()) == []
        await still_serving(broker, nursery)


async def test_authenticate_before_handshake(tmp_path):
    async with running(tmp_path) as (broker, nursery):
        async with open_client(broker, nursery) as client:
            (resp,) = await closed_after(client, token(b"n,,n=alice,r=abc"), metadata())
            assert resp.error_code == ErrorCode.illegal_sasl_state
        await still_serving(broker, nursery)


@pytest.mark.parametrize("mechanism", ["GSSAPI", "PLAIN", "OAUTHBEARER", "scram-sha-512"])
async def test_unknown_or_disabled_mechanism(tmp_path, mechanism):
    async with running(tmp_path) as (broker, nursery):
        async with open_client(broker, nursery) as client:
            (resp,) = await closed_after(client, handshake(mechanism))
            assert resp.error_code == ErrorCode.unsupported_sasl_mechanism
            assert set(resp.mechanisms) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}  # PLAIN: not in clear
        await still_serving(broker, nursery)


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "alice-secret"), ("alice", "")])
async def test_failed_authentication_says_nothing_of_why_and_closes(tmp_path, user, password):
    async with running(tmp_path) as (broker, nursery):
        async with open_client(broker, nursery) as client:
            final = await login(client, user, password)
            assert (final.error_code, final.error_message, final.auth_bytes) == \
                (ErrorCode.sasl_authentication_failed, FAILED, b"")
            assert await client.wait_closed() == b""
        await still_serving(broker, nursery)


async def test_unknown_user_gets_a_server_first_like_a_known_one(tmp_path):
    async with running(tmp_path) as (broker, nursery):
        firsts = []
        for user in ("alice", "mallory", "mallory"):
            async with open_client(broker, nursery) as client:
                await client.call(handshake())
                resp = await client.call(token(ScramClient("SCRAM-SHA-512", user, "x").first()))
                assert resp.error_code == ErrorCode.none
                firsts.append(dict(a.split("=", 1) for a in resp.auth_bytes.decode().split(",")))
        assert [f["i"] for f in firsts] == ["4096"] * 3
        assert firsts[1]["s"] == firsts[2]["s"] != firsts[0]["s"]  # a decoy salt, stable per user


async def test_bad_client_final_foreign_nonce_and_garbage(tmp_path):
    async with running(tmp_path) as (broker, nursery):
        for mutate in (lambda f: f.replace(b",r=", b",r=x"), lambda f: b"garbage", lambda f: f + b"\xff"):
            async with open_client(broker, nursery) as client:
                await client.call(handshake())
                sc = ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
                first = await client.call(token(sc.first()))
                (resp,) = await closed_after(client, token(mutate(sc.final(first.auth_bytes))), metadata())
                assert (resp.error_code, resp.error_message) == (ErrorCode.sasl_authentication_failed, FAILED)
        async with open_client(broker, nursery) as client:  # a bad client-first
            await client.call(handshake())
            (resp,) = await closed_after(client, token(b"y,,n=alice,r=abc"))
            assert resp.error_code == ErrorCode.sasl_authentication_failed
        await still_serving(broker, nursery)


async def test_replayed_exchange(tmp_path):
    """A recorded exchange replayed on a new connection (the server nonce differs, so the
    old proof fails) and on the same one after success (no handshake: refused)."""
    async with running(tmp_path) as (broker, nursery):
        async with open_client(broker, nursery) as client:
            await client.call(handshake())
            sc = ScramClient("SCRAM-SHA-512", "alice", "alice-secret", nonce="n1")
            first_msg = sc.first()
            first = await client.call(token(first_msg))
            final_msg = sc.final(first.auth_bytes)
            assert (await client.call(token(final_msg))).error_code == ErrorCode.none
            (resp,) = await closed_after(client, token(final_msg))
            assert resp.error_code == ErrorCode.illegal_sasl_state
        async with open_client(broker, nursery) as client:
            await client.call(handshake())
            assert (await client.call(token(first_msg))).error_code == ErrorCode.none
            (resp,) = await closed_after(client, token(final_msg))
            assert resp.error_code == ErrorCode.sasl_authentication_failed
        await still_serving(broker, nursery)


async def test_a_100_mib_token_is_refused_at_its_size(tmp_path):
    async with running(tmp_path) as (broker, nursery):
        async with open_client(broker, nursery) as client:
            assert (await client.call(handshake())).error_code == ErrorCode.none
            corr, frame = client.frame(token(b"x" * 16))
            huge = 100 * 1024 * 1024
            # the size prefix of a 100 MiB frame and its first bytes: the broker closes
            # without waiting for (or buffering) the rest
            await client.stream.send_all(struct.pack(">i", huge) + frame[4:] + b"x" * 1000)
            assert await client.wait_closed() == b""
        await still_serving(broker, nursery)


async def test_unauthenticated_frames_are_bounded_then_the_full_size_applies(tmp_path):
    async with running(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        assert (await login(client)).error_code == ErrorCode.none
        big = metadata(*(f"t{i:05d}-{'x' * 200}" for i in range(400)))  # ~85 KiB
        md = await client.call(big)
        assert len(md.topics) == 400


def handshake_v0(mechanism: str = "SCRAM-SHA-512") -> SaslHandshakeRequestV0:
    return SaslHandshakeRequestV0(mechanism=mechanism)


async def send_raw(client: Client, token_bytes: bytes) -> None:
    await client.stream.send_all(framing.frame(token_bytes))


async def receive_raw(client: Client) -> bytes:
    """The next raw token (a bare size-prefixed frame) the broker sends."""
    assert await client._fill(4), "connection closed"
    (size,) = struct.unpack_from(">i", client.buf)
    assert await client._fill(4 + size), "connection closed mid-token"
    out = bytes(client.buf[4:4 + size])
    del client.buf[:4 + size]
    return out


async def login_v0(client: Client, user: str = "alice", password: str | None = None,
                   mechanism: str = "SCRAM-SHA-512") -> None:
    """SaslHandshake v0, then the SCRAM exchange as raw tokens."""
    hs = await client.call(handshake_v0(mechanism))
    assert hs.error_code == ErrorCode.none and mechanism in hs.mechanisms
    sc = ScramClient(mechanism, user, PASSWORDS.get(user, "x") if password is None else password)
    await send_raw(client, sc.first())
    await send_raw(client, sc.final(await receive_raw(client)))
    sc.check(await receive_raw(client))


def closing_lines(logs: list[dict]) -> list[dict]:
    return [e for e in logs if e["event"].startswith("connection_closed")]


async def test_sasl_handshake_v0_then_raw_scram_tokens(tmp_path):
    """Apache's pre-KIP-152 exchange: the tokens unframed, then Kafka requests again."""
    async with running(tmp_path) as (broker, nursery):
        for mechanism, user in (("SCRAM-SHA-512", "alice"), ("SCRAM-SHA-256", "bob")):
            async with open_client(broker, nursery) as client:
                assert (await client.call(API_VERSIONS)).error_code == ErrorCode.none
                await login_v0(client, user, mechanism=mechanism)
                assert (await client.call(metadata())).controller_id == 0
                big = metadata(*(f"t{i:05d}-{'x' * 200}" for i in range(400)))  # past the 64 KiB bound
                assert len((await client.call(big)).topics) == 400


async def test_a_raw_token_sent_with_its_handshake_is_read_as_a_token(tmp_path):
    """The handshake and the client-first in one write: the frame after the handshake is
    cut as a token, not as a request."""
    async with running(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        sc = ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
        _corr, hs_frame = client.frame(handshake_v0())
        await client.stream.send_all(hs_frame + framing.frame(sc.first()))
        _corr, hs = await client.receive(17, 0)
        assert hs.error_code == ErrorCode.none
        await send_raw(client, sc.final(await receive_raw(client)))
        sc.check(await receive_raw(client))
        assert (await client.call(metadata())).controller_id == 0


async def test_raw_tokens_shorter_than_a_request_header_reach_the_exchange(tmp_path):
    async with running(tmp_path, sasl_enabled_mechanisms=("PLAIN",), sasl_allow_plaintext_credentials=True) \
            as (broker, nursery):
        async with open_client(broker, nursery) as client:
            assert (await client.call(handshake_v0("PLAIN"))).error_code == ErrorCode.none
            await send_raw(client, b"\0bob\0bob-secret")
            assert await receive_raw(client) == b""  # PLAIN's empty answer, as Apache's v0 path sends it
            assert (await client.call(metadata())).controller_id == 0
        with structlog.testing.capture_logs() as logs:
            async with open_client(broker, nursery) as client:
                assert (await client.call(handshake_v0("PLAIN"))).error_code == ErrorCode.none
                await send_raw(client, b"\0a\0b")  # 4 bytes: a token, not a bad frame
                assert await client.wait_closed() == b""
        (line,) = closing_lines(logs)
        assert line["event"] == "connection_closed_after_response" and "user 'a'" in line["reason"], line


@pytest.mark.parametrize("case", ["wrong password", "garbage", "a Kafka request", "foreign nonce", "empty"])
async def test_a_failed_raw_exchange_closes_without_an_answer(tmp_path, case):
    async with running(tmp_path) as (broker, nursery):
        with structlog.testing.capture_logs() as logs:
            async with open_client(broker, nursery) as client:
                assert (await client.call(handshake_v0())).error_code == ErrorCode.none
                sc = ScramClient("SCRAM-SHA-512", "alice", "wrong" if case == "wrong password" else "alice-secret")
                if case == "garbage":
                    await send_raw(client, b"\xff\xfe garbage")
                elif case == "a Kafka request":  # SaslAuthenticate framing is not a token here
                    await client.send(token(sc.first()))
                elif case == "empty":
                    await send_raw(client, b"")
                else:
                    await send_raw(client, sc.first())
                    final = sc.final(await receive_raw(client))
                    await send_raw(client, final.replace(b",r=", b",r=x") if case == "foreign nonce" else final)
                assert await client.wait_closed() == b""  # v0 has no error response: the connection closes
        (line,) = closing_lines(logs)
        assert line["event"] == "connection_closed_after_response", line
        assert line["reason"].startswith("SASL authentication failed"), line
        await still_serving(broker, nursery)


@pytest.mark.parametrize(("sent", "we_close", "event", "said"), [
    # a 100 MiB token's size prefix and its first bytes: closed at the prefix
    (struct.pack(">i", 100 * 1024 * 1024) + b"n,,n=alice,r=" + b"x" * 1000, False,
     "connection_closed_bad_frame", "104857600"),
    # the client goes away in the middle of a token
    (struct.pack(">i", 100) + b"n,,n=alice", True, "connection_closed_truncated_frame", ""),
], ids=["oversized raw token refused at its size", "EOF in the middle of a raw token"])
async def test_a_raw_token_that_never_completes(tmp_path, sent, we_close, event, said):
    async with running(tmp_path) as (broker, nursery):
        with structlog.testing.capture_logs() as logs:
            async with open_client(broker, nursery) as client:
                assert (await client.call(handshake_v0())).error_code == ErrorCode.none
                await client.stream.send_all(sent)
                if we_close:
                    await client.stream.aclose()
                else:
                    assert await client.wait_closed() == b""
            if we_close:
                await trio.sleep(0.1)
        (line,) = closing_lines(logs)
        assert line["event"] == event and said in line.get("reason", ""), line
        await still_serving(broker, nursery)


async def test_a_v0_session_does_not_re_authenticate_and_expires(tmp_path):
    async with running(tmp_path, connections_max_reauth_ms=400) as (broker, nursery):
        async with open_client(broker, nursery) as client:
            await login_v0(client)  # told no session lifetime: v0 has no field for it
            assert (await client.call(metadata())).controller_id == 0
            # KIP-368 re-authentication needs SaslHandshake v1 and SaslAuthenticate v1+
            (resp,) = await closed_after(client, handshake())
            assert resp.error_code == ErrorCode.illegal_sasl_state
        async with open_client(broker, nursery) as client:
            await login_v0(client)
            await trio.sleep(0.5)
            assert await closed_after(client, metadata()) == []  # past connections.max.reauth.ms
        async with open_client(broker, nursery) as client:  # and a v1 session may not switch to v0
            assert (await login(client)).error_code == ErrorCode.none
            (resp,) = await closed_after(client, handshake_v0())
            assert resp.error_code == ErrorCode.illegal_sasl_state
        await still_serving(broker, nursery)


async def test_sasl_requests_on_a_plaintext_listener(tmp_path):
    async with running(tmp_path) as (broker, nursery), open_client(broker, nursery, sasl=False) as client:
        assert (await client.call(handshake())).error_code == ErrorCode.illegal_sasl_state
        assert (await client.call(token(b"x"))).error_code == ErrorCode.illegal_sasl_state
        assert (await client.call(metadata())).controller_id == 0


async def test_plain_only_when_allowed_on_plaintext(tmp_path):
    async with running(tmp_path, sasl_enabled_mechanisms=("PLAIN", "SCRAM-SHA-512"),
                       sasl_allow_plaintext_credentials=True) as (broker, nursery):
        async with open_client(broker, nursery) as client:
            hs = await client.call(handshake("PLAIN"))
            assert hs.error_code == ErrorCode.none and set(hs.mechanisms) == {"PLAIN", "SCRAM-SHA-512"}
            resp = await client.call(token(b"alice\0alice\0alice-secret"))
            assert resp.error_code == ErrorCode.none
            assert (await client.call(metadata())).controller_id == 0
        for bad in (b"\0alice\0wrong", b"bob\0alice\0alice-secret", b"\0nobody\0x", b"junk"):
            async with open_client(broker, nursery) as client:
                await client.call(handshake("PLAIN"))
                (resp,) = await closed_after(client, token(bad))
                assert resp.error_code == ErrorCode.sasl_authentication_failed
                assert resp.error_message == FAILED.replace("SCRAM-SHA-512", "PLAIN")
        await still_serving(broker, nursery)


async def test_session_expiry_and_reauthentication(tmp_path):
    async with running(tmp_path, connections_max_reauth_ms=400) as (broker, nursery):
        async with open_client(broker, nursery) as client:
            final = await login(client)
            assert final.session_lifetime.total_seconds() == 0.4
            assert (await client.call(metadata())).controller_id == 0
            assert (await login(client)).error_code == ErrorCode.none  # re-authenticate: a new deadline
            await trio.sleep(0.3)
            assert (await client.call(metadata())).controller_id == 0
            await trio.sleep(0.2)
            assert await closed_after(client, metadata()) == []  # past the deadline of the re-auth
        async with open_client(broker, nursery) as client:
            assert (await login(client)).error_code == ErrorCode.none
            # re-authentication as somebody else is refused
            final = await login(client, "bob")
            assert final.error_code == ErrorCode.sasl_authentication_failed
            assert await client.wait_closed() == b""
        await still_serving(broker, nursery)


async def test_corrupt_credentials_file_refuses_every_login(tmp_path):
    async with running(tmp_path) as (broker, nursery):
        path = broker.layout.scram_credentials
        path.write_text('{"format": 1, "users": {"alice": []}}')
        with trio.fail_after(2):
            while broker.credentials.error is None:
                await trio.sleep(0.05)
        async with open_client(broker, nursery) as client:
            final = await login(client)
            assert (final.error_code, final.error_message) == (ErrorCode.sasl_authentication_failed, FAILED)
        async with open_client(broker, nursery, sasl=False) as client:
            resp = await client.call(DescribeUserScramCredentialsRequest(users=None))
            assert resp.error_code == ErrorCode.unknown_server_error
        write_users(path, alice="new-secret")  # a good file again: hot-reloaded
        with trio.fail_after(2):
            while broker.credentials.error is not None:
                await trio.sleep(0.05)
        async with open_client(broker, nursery) as client:
            assert (await login(client, "alice", "new-secret")).error_code == ErrorCode.none


def upsert(user: str, password: str, mechanism: int = 2, iterations: int = 4096, salt: bytes = b"s4lt"):
    name = scram.MECHANISM_TYPES.get(mechanism, "SCRAM-SHA-512")
    return ScramCredentialUpsertion(name=user, mechanism=mechanism, iterations=iterations, salt=salt,
                                    salted_password=scram.salted_password(name, password, salt, 4096))


async def test_alter_and_describe_user_scram_credentials(tmp_path):
    async with running(tmp_path) as (broker, nursery):
        async with open_client(broker, nursery) as admin:
            assert (await login(admin)).error_code == ErrorCode.none
            resp = await admin.call(AlterUserScramCredentialsRequest(
                deletions=(ScramCredentialDeletion(name="bob", mechanism=1),),
                upsertions=(upsert("carol", "carol-pw"), upsert("dave", "x", iterations=100),
                            upsert("erin", "x", mechanism=7), upsert("bob", "bob2", mechanism=1))))
            assert [(r.user, r.error_code) for r in resp.results] == [
                ("bob", ErrorCode.duplicate_resource), ("carol", ErrorCode.none),
                ("dave", ErrorCode.unacceptable_credential), ("erin", ErrorCode.unsupported_sasl_mechanism)]
            resp = await admin.call(AlterUserScramCredentialsRequest(
                deletions=(ScramCredentialDeletion(name="nobody", mechanism=2),
                           ScramCredentialDeletion(name="bob", mechanism=2)), upsertions=()))
            assert [(r.user, r.error_code) for r in resp.results] == [
                ("nobody", ErrorCode.resource_not_found), ("bob", ErrorCode.none)]
            desc = await admin.call(DescribeUserScramCredentialsRequest(users=None))
            assert desc.error_code == ErrorCode.none
            assert {r.user: [(c.mechanism, c.iterations) for c in r.credential_infos] for r in desc.results} == {
                "alice": [(1, 4096), (2, 4096)], "bob": [(1, 4096)], "carol": [(2, 4096)]}
            desc = await admin.call(DescribeUserScramCredentialsRequest(
                users=(UserName(name="carol"), UserName(name="zed"), UserName(name="bob"), UserName(name="bob"))))
            assert [(r.user, r.error_code) for r in desc.results] == [
                ("carol", ErrorCode.none), ("zed", ErrorCode.resource_not_found),
                ("bob", ErrorCode.duplicate_resource)]
        # the file holds keys, not the salted password; carol can log in at once
        text = broker.layout.scram_credentials.read_text()
        salted = scram.salted_password("SCRAM-SHA-512", "carol-pw", b"s4lt", 4096)
        assert base64.b64encode(salted).decode() not in text and "carol-pw" not in text
        async with open_client(broker, nursery) as client:
            final = await login(client, "carol", "carol-pw")
            assert final.error_code == ErrorCode.none
        async with open_client(broker, nursery) as client:
            assert (await login(client, "bob", mechanism="SCRAM-SHA-512")).error_code != ErrorCode.none


async def test_a_peer_link_authenticates_with_scram(tmp_path):
    """``peers.authenticate_peer`` on a SASL listener's connection, then a request."""
    async with running(tmp_path) as (broker, nursery):
        write_users(broker.layout.scram_credentials, **PASSWORDS, **{"kaas-broker-1": "peer-secret"})
        with trio.fail_after(2):
            while broker.credentials.lookup("kaas-broker-1", "SCRAM-SHA-512") is None:
                await trio.sleep(0.05)
        async with open_client(broker, nursery) as client:
            decoder = FrameDecoder(1 << 20)
            auth = await authenticate_peer(client.stream, decoder, "kaas-broker-1",
                                           SaslConfig("SCRAM-SHA-512", "kaas-broker-1", "peer-secret"))
            assert auth == (4, 0)  # the next correlation id; a session that does not expire
            client.corr = auth.next_corr - 1
            assert (await client.call(metadata())).controller_id == 0
        async with open_client(broker, nursery) as client:
            with pytest.raises(LinkFailed, match="sasl_authentication_failed"):
                await authenticate_peer(client.stream, FrameDecoder(1 << 20), "kaas-broker-1",
                                        SaslConfig("SCRAM-SHA-512", "kaas-broker-1", "wrong"))
        async with open_client(broker, nursery) as client:
            with pytest.raises(LinkFailed, match="unsupported_sasl_mechanism"):
                await authenticate_peer(client.stream, FrameDecoder(1 << 20), "kaas-broker-1",
                                        SaslConfig("PLAIN", "kaas-broker-1", "peer-secret"))


class _OnePeer:
    """A ``PeerDirectory`` of one peer, broker 1, at ``port`` on loopback (SASL_PLAINTEXT)."""

    def __init__(self, port: int) -> None:
        self.host, self.port, self.incarnation, self.protocol = "127.0.0.1", port, "1" * 32, "SASL_PLAINTEXT"

    def peer_endpoint(self, listener: str):
        return self

    @property
    def peers(self):
        return {1: self}

    def alive_any(self) -> list[int]:
        return [1]

    def is_alive_any(self, broker_id: int) -> bool:
        return broker_id == 1

    def suspect(self, broker_id: int, incarnation: str) -> None:
        pass


async def test_a_peer_link_renews_its_connection_before_the_session_expires(tmp_path):
    """KIP-368 on the inter-broker side: a link to a peer whose sessions last 400 ms
    replaces its connection before the first request past 85% of that, so the request is
    answered; a link that kept the expired connection has it closed under the request (its
    markers would go to the queue)."""
    async with running(tmp_path, connections_max_reauth_ms=400) as (broker, nursery):
        write_users(broker.layout.scram_credentials, **PASSWORDS, **{"kaas-broker-0": "peer-secret"})
        with trio.fail_after(2):
            while broker.credentials.lookup("kaas-broker-0", "SCRAM-SHA-512") is None:
                await trio.sleep(0.05)

        async def serve(stream):
            await serve_connection(broker, stream, sasl_session())

        listener = (await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1")))[0]
        links = PeerLinks(0, _OnePeer(listener.socket.getsockname()[1]), listener="SASL_PLAINTEXT",
                          authenticate=scram_authenticator(0, "SCRAM-SHA-512", "kaas-broker-0", "peer-secret"))
        assert await links.write_markers(1, []) == []  # connects and authenticates: a 400 ms session
        link = links._links[1]
        assert link.renew_at is not None and link.renew_at - trio.current_time() <= RENEW_AT_SHARE * 0.4
        await trio.sleep(0.45)  # past the peer's deadline
        assert await links.write_markers(1, []) == []
        assert links.stats["renewed"] == 1 and links.stats["failed"] == 0
        link.renew_at = None  # as before: the connection is kept past its session
        await trio.sleep(0.45)
        assert await links.write_markers(1, []) is None  # the peer closed it under the request
        assert links.stats["failed"] == 1
        assert await links.write_markers(1, []) == []  # and the next request has a new one


@asynccontextmanager
async def oauth_broker(tmp_path, **settings):
    keys = Keys()
    jwks = keys.write_jwks(tmp_path / "jwks.json")
    async with running(tmp_path, sasl_enabled_mechanisms=("OAUTHBEARER", "SCRAM-SHA-512"),
                       sasl_allow_plaintext_credentials=True, sasl_oauthbearer_jwks_file=str(jwks),
                       sasl_oauthbearer_expected_issuer=ISSUER, sasl_oauthbearer_expected_audience=AUDIENCE,
                       **settings) as (broker, nursery):
        yield broker, nursery, keys


async def test_oauthbearer_login_and_session_bounded_by_the_token(tmp_path):
    async with oauth_broker(tmp_path, connections_max_reauth_ms=60_000) as (broker, nursery, keys):
        async with open_client(broker, nursery) as client:
            hs = await client.call(handshake("OAUTHBEARER"))
            assert hs.error_code == ErrorCode.none and "OAUTHBEARER" in hs.mechanisms
            resp = await client.call(token(client_message(keys.token("svc", alg="ES256", lifetime_s=20))))
            assert resp.error_code == ErrorCode.none
            assert 15 < resp.session_lifetime.total_seconds() <= 20  # the token's exp, not 60 s
            assert (await client.call(metadata())).controller_id == 0


async def test_oauthbearer_refused_tokens(tmp_path):
    async with oauth_broker(tmp_path) as (broker, nursery, keys):
        other = Keys()
        h, _b, s = keys.token("svc").split(".")
        forged_body = b64url(json.dumps({"sub": "admin", "iss": ISSUER, "aud": AUDIENCE,
                                         "exp": time.time() + 60}).encode())
        bad = [keys.token(lifetime_s=-5), keys.token(alg="none"), keys.token(alg="HS256"), other.token(),
               keys.token(iss="https://evil"), keys.token(aud="other"), f"{h}.{forged_body}.{s}", "not-a-jwt"]
        for tok in bad:
            async with open_client(broker, nursery) as client:
                await client.call(handshake("OAUTHBEARER"))
                (resp,) = await closed_after(client, token(client_message(tok)), metadata())
                assert (resp.error_code, resp.error_message) == (
                    ErrorCode.sasl_authentication_failed, FAILED.replace("SCRAM-SHA-512", "OAUTHBEARER"))
        async with open_client(broker, nursery) as client:  # acting for someone else
            await client.call(handshake("OAUTHBEARER"))
            (resp,) = await closed_after(client, token(client_message(keys.token("svc"), authzid="admin")))
            assert resp.error_code == ErrorCode.sasl_authentication_failed
        await still_serving(broker, nursery)


async def test_oauthbearer_not_offered_in_clear_by_default(tmp_path):
    keys = Keys()
    jwks = keys.write_jwks(tmp_path / "jwks.json")
    async with running(tmp_path, sasl_enabled_mechanisms=("OAUTHBEARER", "SCRAM-SHA-512"),
                       sasl_oauthbearer_jwks_file=str(jwks)) as (broker, nursery):
        async with open_client(broker, nursery) as client:
            (resp,) = await closed_after(client, handshake("OAUTHBEARER"))
            assert resp.error_code == ErrorCode.unsupported_sasl_mechanism
            assert list(resp.mechanisms) == ["SCRAM-SHA-512"]


async def test_a_large_token_on_a_re_authentication_is_refused(tmp_path):
    async with running(tmp_path) as (broker, nursery), open_client(broker, nursery) as client:
        assert (await login(client)).error_code == ErrorCode.none
        assert (await client.call(handshake())).error_code == ErrorCode.none
        (resp,) = await closed_after(client, token(b"n,,n=alice,r=" + b"x" * (64 * 1024)))
        assert resp.error_code == ErrorCode.sasl_authentication_failed
