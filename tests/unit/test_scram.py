"""The SCRAM server machine (kaas.domain.scram) against a reference client written here
from RFC 5802, the RFC 7677 test vector, and the bad inputs of issue 21."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.domain import scram
from kaas.domain.sasl_plain import PlainError, parse_plain
from kaas.domain.scram import ScramError, ScramServer

RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC7677_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


class ReferenceClient:
    """RFC 5802 section 3, written out step by step. ``reply_nonce`` maps the server's
    combined nonce to the one the client-final repeats (and its proof binds)."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str) -> None:
        self.h = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}[mechanism]
        self.user, self.password, self.nonce = user, password, nonce
        self.reply_nonce = lambda combined: combined  # what the client-final repeats as r=

    def first(self) -> bytes:
        name = self.user.replace("=", "=3D").replace(",", "=2C")
        self.bare = f"n={name},r={self.nonce}"
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
        assert attrs["r"].startswith(self.nonce)
        salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
        salted = hashlib.pbkdf2_hmac(self.h().name, self.password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.h).digest()
        stored_key = self.h(client_key).digest()
        without_proof = f"c=biws,r={self.reply_nonce(attrs['r'])}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, auth, self.h).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.h).digest()
        self.expected_final = b"v=" + base64.b64encode(hmac.new(server_key, auth, self.h).digest())
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def rfc_credential() -> scram.ScramCredential:
    return scram.credential_from_password("SCRAM-SHA-256", "pencil", base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="),
                                          4096)


def test_rfc7677_vector():
    server = ScramServer("SCRAM-SHA-256")
    first = server.receive_client_first(RFC7677_CLIENT_FIRST)
    assert (first.username, first.client_nonce) == ("user", "rOprNGfwEbeRWgbNEkqO")
    assert server.server_first(rfc_credential(), RFC7677_SERVER_NONCE) == RFC7677_SERVER_FIRST
    assert server.receive_client_final(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert server.state == "done" and server.username == "user"


def test_stored_credential_holds_neither_password_nor_salted_password():
    cred = rfc_credential()
    salted = scram.salted_password("SCRAM-SHA-256", "pencil", cred.salt, 4096)
    assert salted not in (cred.stored_key, cred.server_key)
    assert scram.verify_password("SCRAM-SHA-256", cred, "pencil")
    assert not scram.verify_password("SCRAM-SHA-256", cred, "pencil ")


nonces = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=","), min_size=1,
                 max_size=40)
users = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)


@given(mechanism=st.sampled_from(sorted(scram.MECHANISMS)), user=users, password=st.text(max_size=20),
       client_nonce=nonces, server_nonce=nonces, salt=st.binary(min_size=1, max_size=32))
def test_reference_client_logs_in(mechanism, user, password, client_nonce, server_nonce, salt):
    cred = scram.credential_from_password(mechanism, password, salt, 4096)
    client = ReferenceClient(mechanism, user, password, client_nonce)
    server = ScramServer(mechanism)
    assert server.receive_client_first(client.first()).username == user
    final = client.final(server.server_first(cred, server_nonce))
    assert server.receive_client_final(final) == client.expected_final
    assert server.username == user


# Passwords without control characters, as SASLprep (RFC 4013) requires: HMAC zero-pads a
# short key, so two passwords that differ only by trailing NULs ("" and "\x00") are one key
# to PBKDF2, a property of HMAC and not a wrong proof the server could catch.
passwords = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=12)


@given(mechanism=st.sampled_from(sorted(scram.MECHANISMS)), password=passwords, wrong=passwords,
       server_nonce=nonces)
def test_wrong_password_fails_at_the_proof(mechanism, password, wrong, server_nonce):
    if wrong == password:
        wrong += "x"
    cred = scram.credential_from_password(mechanism, password, b"salt", 4096)
    client = ReferenceClient(mechanism, "alice", wrong, "abc")
    server = ScramServer(mechanism)
    server.receive_client_first(client.first())
    final = client.final(server.server_first(cred, server_nonce))
    with pytest.raises(ScramError, match="bad proof"):
        server.receive_client_final(final)
    assert server.state == "failed" and server.username is None


def _half_way(mechanism="SCRAM-SHA-512"):
    cred = scram.credential_from_password(mechanism, "secret", b"pepper", 4096)
    client = ReferenceClient(mechanism, "alice", "secret", "client-nonce")
    server = ScramServer(mechanism)
    server.receive_client_first(client.first())
    return client, server, client.final(server.server_first(cred, "server-nonce"))


def test_foreign_nonce_is_refused_even_with_a_matching_proof():
    client, server, final = _half_way()
    # a proof made for another exchange's nonce (the client's nonce only)
    forged = final.replace(b"r=client-nonceserver-nonce", b"r=client-nonceother")
    with pytest.raises(ScramError, match="nonce"):
        server.receive_client_final(forged)


def librdkafka_4895(client: ReferenceClient) -> ReferenceClient:
    """librdkafka before 2.6.1 (confluentinc/librdkafka#4895, as in 2.0.2's
    ``rd_kafka_sasl_scram_build_client_final_message_wo_proof``): its client-final writes
    its own nonce, then the server's whole ``r=`` value, and computes its proof over that."""
    client.reply_nonce = lambda combined: client.nonce + combined
    return client


@given(mechanism=st.sampled_from(sorted(scram.MECHANISMS)), client_nonce=nonces, server_nonce=nonces)
def test_the_librdkafka_4895_nonce_shape_logs_in(mechanism, client_nonce, server_nonce):
    cred = scram.credential_from_password(mechanism, "secret", b"salt", 4096)
    client = librdkafka_4895(ReferenceClient(mechanism, "alice", "secret", client_nonce))
    server = ScramServer(mechanism)
    server.receive_client_first(client.first())
    final = client.final(server.server_first(cred, server_nonce))
    assert f",r={client_nonce}{client_nonce}{server_nonce},".encode() in final
    assert server.receive_client_final(final) == client.expected_final  # its proof is over what it sent
    assert server.username == "alice"


@given(client_nonce=nonces, server_nonce=nonces)
def test_accepted_nonce_shapes(client_nonce, server_nonce):
    combined = client_nonce + server_nonce
    assert scram.accepted_nonce(combined, client_nonce, combined)
    assert scram.accepted_nonce(client_nonce + combined, client_nonce, combined)


@given(client_nonce=nonces, server_nonce=nonces, other=nonces, cut=st.integers(1, 40), data=st.data())
def test_every_other_nonce_is_refused(client_nonce, server_nonce, other, cut, data):
    combined = client_nonce + server_nonce
    refused = [
        client_nonce,  # the client's alone
        combined[:-cut] if cut < len(combined) else "",  # truncated
        (client_nonce + combined)[:-cut],
        combined + other,  # extended
        other + combined,  # another prefix (Apache 3.x's endsWith would take it)
        client_nonce + client_nonce + combined,  # the client's nonce twice over
        data.draw(nonces),
    ]
    if other != server_nonce:
        # a recorded exchange's nonce (another server nonce), in either shape
        refused += [client_nonce + other, client_nonce + client_nonce + other]
    for nonce in refused:
        if nonce not in (combined, client_nonce + combined):
            assert not scram.accepted_nonce(nonce, client_nonce, combined), nonce


@given(mechanism=st.sampled_from(sorted(scram.MECHANISMS)), client_nonce=nonces, server_nonce=nonces,
       prefix=nonces)
def test_a_refused_nonce_fails_even_with_a_proof_over_it(mechanism, client_nonce, server_nonce, prefix):
    """The client's proof binds whatever nonce it sent, so a client that knows the password
    and sends another shape of nonce is still refused, at the nonce."""
    cred = scram.credential_from_password(mechanism, "secret", b"salt", 4096)
    client = ReferenceClient(mechanism, "alice", "secret", client_nonce)
    client.reply_nonce = lambda combined: prefix + combined
    server = ScramServer(mechanism)
    server.receive_client_first(client.first())
    final = client.final(server.server_first(cred, server_nonce))
    if prefix == client_nonce:
        assert server.receive_client_final(final) == client.expected_final
    else:
        with pytest.raises(ScramError, match="nonce"):
            server.receive_client_final(final)
        assert server.state == "failed"


def test_the_exchange_cannot_be_replayed_or_reordered():
    client, server, final = _half_way()
    server.receive_client_final(final)
    for msg in (final, client.first()):
        with pytest.raises(ScramError, match="unexpected"):
            server.receive_client_final(msg)
    fresh = ScramServer("SCRAM-SHA-512")
    with pytest.raises(ScramError, match="unexpected"):
        fresh.receive_client_final(final)  # a client-final first
    # a recorded exchange against a new server nonce: the old proof no longer fits
    again = ScramServer("SCRAM-SHA-512")
    again.receive_client_first(client.first())
    again.server_first(scram.credential_from_password("SCRAM-SHA-512", "secret", b"pepper", 4096), "fresh")
    with pytest.raises(ScramError):
        again.receive_client_final(final)


def test_a_replayed_librdkafka_4895_final_is_refused():
    """The doubled shape of another exchange's nonce is another nonce: refused, as a replay
    of the combined one is."""
    cred = scram.credential_from_password("SCRAM-SHA-512", "secret", b"pepper", 4096)
    client = librdkafka_4895(ReferenceClient("SCRAM-SHA-512", "alice", "secret", "client-nonce"))
    first = ScramServer("SCRAM-SHA-512")
    first.receive_client_first(client.first())
    final = client.final(first.server_first(cred, "server-nonce"))
    first.receive_client_final(final)
    again = ScramServer("SCRAM-SHA-512")
    again.receive_client_first(client.first())
    again.server_first(cred, "fresh")
    with pytest.raises(ScramError, match="nonce"):
        again.receive_client_final(final)


@pytest.mark.parametrize("first", [
    b"y,,n=user,r=abc",  # channel binding flags other than n
    b"p=tls-unique,,n=user,r=abc",
    b"n,a=admin,n=user,r=abc",  # acting as someone else
    b"n,,m=ext,n=user,r=abc",
    b"n,,r=abc,n=user",
    b"n,,n=,r=abc",
    b"n,,n=us=er,r=abc",
    b"n,,n=user,r=",
    b"n,,n=user,r=abc,tokenauth=true",
    b"n,,n=user",
    b"\xff\xfe",
    b"",
])
def test_bad_client_first(first):
    server = ScramServer("SCRAM-SHA-256")
    with pytest.raises(ScramError):
        server.receive_client_first(first)
    assert server.state == "failed"


def test_client_first_details():
    first = scram.parse_client_first(b"n,a=a=2Cb,n=a=2Cb,r=xyz,ext=1")
    assert (first.username, first.bare, first.gs2_header, first.extensions) == \
        ("a,b", "n=a=2Cb,r=xyz,ext=1", "n,a=a=2Cb,", {"ext": "1"})


@pytest.mark.parametrize("mutate", [
    lambda f: f.replace(b"c=biws", b"c=eSws"),  # channel binding y,,
    lambda f: f.split(b",p=")[0],  # no proof
    lambda f: f[:-4] + b"!!!=",  # proof not base64
    lambda f: f[:-8] + b"AAAAAAA=",  # another proof
    lambda f: b"r=x," + f,
])
def test_bad_client_final(mutate):
    _client, server, final = _half_way()
    with pytest.raises(ScramError):
        server.receive_client_final(mutate(final))
    assert server.state == "failed"


@pytest.mark.parametrize(("message", "user"), [(b"\0alice\0pw", "alice"), (b"alice\0alice\0pw", "alice")])
def test_plain(message, user):
    creds = parse_plain(message)
    assert (creds.username, creds.password) == (user, "pw")
    assert "pw" not in repr(creds)


@pytest.mark.parametrize("message", [b"bob\0alice\0pw", b"\0alice\0", b"\0\0pw", b"alice\0pw", b"\0a\0b\0c",
                                     b"\xff\0a\0b"])
def test_plain_refused(message):
    with pytest.raises(PlainError):
        parse_plain(message)


@given(st.binary(max_size=200))
def test_plain_parser_raises_only_plain_error(data):
    try:
        parse_plain(data)
    except PlainError:
        pass


@given(st.binary(max_size=200))
def test_scram_parser_raises_only_scram_error(data):
    try:
        scram.parse_client_first(data)
    except ScramError:
        pass
