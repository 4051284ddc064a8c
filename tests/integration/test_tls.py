"""Listeners and TLS (issue 21) with real brokers and real clients: confluent-kafka and
kafka-python over SSL, mTLS with a mapped principal, Metadata per listener, each listener's
own ssl.client.auth (``--listener-config``), a 3-broker cluster whose peers talk over an
mTLS inter-broker listener (a transaction's markers included), and the connections a TLS
port refuses: each closed with one log line while the broker keeps serving."""

from __future__ import annotations

import socket
import ssl
import struct
import time
import warnings
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from kaas.client import WireClient
from kaas.testing import BrokerProcess, ClusterProcess, free_port, free_ports, wait_for
from kaas.tools.certs import init_dev, issue
from tests.kafka import create_topic, read_to_end, txn_producer, uniq, values

pytestmark = [pytest.mark.slow]

RULES = "RULE:^CN=([^,]*),OU=apps,O=kaas$/$1/L,DEFAULT"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    init_dev(d / "tls")
    issue(d / "tls", "alice", cn="Alice", ou="apps")
    init_dev(d / "other")  # a CA the brokers do not trust, with its own client certificate
    return d


def _tls_args(pki: Path, client_auth: str) -> list[str]:
    t = pki / "tls"
    return ["--ssl-certfile", str(t / "broker.pem"), "--ssl-keyfile", str(t / "broker.key"),
            "--ssl-cafile", str(t / "ca.pem"), "--ssl-client-auth", client_auth,
            "--ssl-principal-mapping-rules", RULES]


@pytest.fixture(scope="module")
def tls_broker(pki, tmp_path_factory):
    port, ssl_port = free_port(), free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("tls") / "data", port=port,
                      extra=["--listeners", f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
                             "--group-initial-rebalance-delay-ms", "0", *_tls_args(pki, "requested")])
    b.ssl_port = ssl_port
    with b.running():
        yield b


def _ssl_conf(pki: Path, port: int, **more) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
            "ssl.ca.location": str(pki / "tls" / "ca.pem"), **more}


def _produce_consume(conf: dict, topic: str, n: int = 20) -> list[bytes]:
    p = Producer({**conf, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(15) == 0
    c = Consumer({**conf, "group.id": uniq("g"), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    return got


def test_confluent_kafka_over_ssl(tls_broker, pki):
    topic = uniq("ssl")
    assert _produce_consume(_ssl_conf(pki, tls_broker.ssl_port), topic) == [f"v{i}".encode() for i in range(20)]


def test_confluent_kafka_over_mtls_principal_mapped(tls_broker, pki):
    topic = uniq("mtls")
    t = pki / "tls"
    conf = _ssl_conf(pki, tls_broker.ssl_port, **{"ssl.certificate.location": str(t / "alice.pem"),
                                                  "ssl.key.location": str(t / "alice.key")})
    assert len(_produce_consume(conf, topic)) == 20
    # CN=Alice,OU=apps,O=kaas -> the first rule, lower-cased
    wait_for(lambda: "principal=User:alice" in tls_broker.log_text(), 5, "the mapped principal in the log")
    # a certificate no rule but DEFAULT matches: the whole RFC 2253 subject
    conf = _ssl_conf(pki, tls_broker.ssl_port, **{"ssl.certificate.location": str(t / "client.pem"),
                                                  "ssl.key.location": str(t / "client.key")})
    AdminClient(conf).list_topics(timeout=10)
    wait_for(lambda: "User:CN=client,O=kaas" in tls_broker.log_text(), 5, "the DEFAULT principal")


def test_kafka_python_over_ssl(tls_broker, pki):
    from kafka import KafkaConsumer, KafkaProducer

    topic = uniq("kp-ssl")
    common = {"bootstrap_servers": f"127.0.0.1:{tls_broker.ssl_port}", "security_protocol": "SSL",
              "ssl_cafile": str(pki / "tls" / "ca.pem")}
    p = KafkaProducer(**common)
    for i in range(5):
        p.send(topic, f"k{i}".encode())
    p.flush(15)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000, **common)
    try:
        got = [m.value for m, _ in zip(c, range(5), strict=False)]
    finally:
        c.close()
    assert got == [f"k{i}".encode() for i in range(5)]


def test_aiokafka_over_mtls(tls_broker, pki):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = uniq("aio-ssl")
    t = pki / "tls"

    async def run() -> list[bytes]:
        ctx = create_ssl_context(cafile=str(t / "ca.pem"), certfile=str(t / "alice.pem"), keyfile=str(t / "alice.key"))
        common = {"bootstrap_servers": f"127.0.0.1:{tls_broker.ssl_port}", "security_protocol": "SSL",
                  "ssl_context": ctx}
        p = AIOKafkaProducer(**common)
        await p.start()
        try:
            for i in range(5):
                await p.send_and_wait(topic, f"a{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await c.start()
        got = []
        try:
            async with asyncio.timeout(20):
                async for m in c:
                    got.append(m.value)
                    if len(got) == 5:
                        break
        finally:
            await c.stop()
        return got

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(5)]


def test_metadata_names_the_endpoints_of_the_listener_asked(tls_broker, pki):
    over_ssl = AdminClient(_ssl_conf(pki, tls_broker.ssl_port)).list_topics(timeout=10)
    assert [(b.host, b.port) for b in over_ssl.brokers.values()] == [("127.0.0.1", tls_broker.ssl_port)]
    plain = AdminClient({"bootstrap.servers": tls_broker.bootstrap}).list_topics(timeout=10)
    assert [(b.host, b.port) for b in plain.brokers.values()] == [("127.0.0.1", tls_broker.port)]
    admin = AdminClient(_ssl_conf(pki, tls_broker.ssl_port))  # (kept: its futures die with it)
    cluster = admin.describe_cluster().result(10)
    assert [(n.host, n.port) for n in cluster.nodes] == [("127.0.0.1", tls_broker.ssl_port)]


# ----------------------------------------------------------------------------- refused connections

API_VERSIONS_V0 = struct.pack(">i", 14) + struct.pack(">hhih", 18, 0, 7, 4) + b"test"


def _refusals(b: BrokerProcess) -> int:
    return b.log_text().count("tls_handshake_failed")


def _closed_after(sock: socket.socket | ssl.SSLSocket) -> bool:
    """Does the broker close ``sock`` (after what was sent) without answering?"""
    sock.settimeout(10)
    try:
        return sock.recv(100) == b""
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True


def _still_serving(b: BrokerProcess, pki: Path) -> None:
    ctx = ssl.create_default_context(cafile=str(pki / "tls" / "ca.pem"))
    with WireClient("127.0.0.1", b.ssl_port, ssl_context=ctx) as wc:
        assert wc.call(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0


def _expect_one_refusal(b: BrokerProcess, before: int, reason: str) -> None:
    wait_for(lambda: _refusals(b) > before, 5, "the refusal's log line")
    time.sleep(0.2)
    lines = [x for x in b.log_text().splitlines() if "tls_handshake_failed" in x][before:]
    assert len(lines) == 1 and reason in lines[0], lines
    assert "connection_crashed" not in b.log_text() and "Traceback" not in b.log_text()


def test_plaintext_to_the_tls_port(tls_broker, pki):
    before = _refusals(tls_broker)
    with socket.create_connection(("127.0.0.1", tls_broker.ssl_port), timeout=10) as s:
        s.sendall(API_VERSIONS_V0)
        assert _closed_after(s)
    _expect_one_refusal(tls_broker, before, "WRONG_VERSION_NUMBER")
    _still_serving(tls_broker, pki)


def test_client_certificate_of_another_ca(tls_broker, pki):
    before = _refusals(tls_broker)
    ctx = ssl.create_default_context(cafile=str(pki / "tls" / "ca.pem"))
    ctx.load_cert_chain(str(pki / "other" / "client.pem"), str(pki / "other" / "client.key"))
    with socket.create_connection(("127.0.0.1", tls_broker.ssl_port), timeout=10) as raw:
        try:
            s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        except ssl.SSLError:
            pass  # (TLS 1.2: refused within the handshake)
        else:  # TLS 1.3: the client finished first; the broker refuses and closes
            with s:
                s.sendall(API_VERSIONS_V0)
                assert _closed_after(s)
    _expect_one_refusal(tls_broker, before, "CERTIFICATE_VERIFY_FAILED")
    _still_serving(tls_broker, pki)


def test_tls_1_1_client(tls_broker, pki):
    before = _refusals(tls_broker)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL 3 offers TLS 1.1 only at level 0
    with socket.create_connection(("127.0.0.1", tls_broker.ssl_port), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            ctx.wrap_socket(raw)
    _expect_one_refusal(tls_broker, before, "UNSUPPORTED_PROTOCOL")
    _still_serving(tls_broker, pki)


def test_slow_handshake_is_cut_at_the_deadline(pki, tmp_path):
    port, ssl_port = free_port(), free_port()
    b = BrokerProcess(tmp_path / "data", port=port,
                      extra=["--listeners", f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
                             *_tls_args(pki, "none")],
                      env={"KAAS_BROKER_SSL_HANDSHAKE_TIMEOUT_MS": "500"})
    b.ssl_port = ssl_port
    with b.running():
        with socket.create_connection(("127.0.0.1", ssl_port), timeout=10) as s:
            assert _closed_after(s)  # said nothing: closed after the deadline
        _expect_one_refusal(b, 0, "no handshake within 0.5s")
        _still_serving(b, pki)


# ----------------------------------------------------------------------------- per-listener client auth


def test_each_listener_has_its_own_ssl_client_auth(pki, tmp_path):
    """``--listener-config listener.name.<l>.ssl.client.auth``: mTLS required on INTERNAL,
    none on EXTERNAL, while the broker-wide ``--ssl-client-auth`` says requested. A
    confluent-kafka client without a certificate is refused on INTERNAL and served on
    EXTERNAL; with one it gets in on INTERNAL as its mapped principal."""
    port, internal, external = free_port(), free_port(), free_port()
    b = BrokerProcess(tmp_path / "data", port=port, extra=[
        "--listeners", f"PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
        "--listener-security-protocol-map", "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,EXTERNAL:SSL",
        *_tls_args(pki, "requested"),
        "--listener-config", "listener.name.internal.ssl.client.auth=required",
        "--listener-config", "listener.name.External.ssl.client.auth=none"])  # names in any case, as Apache's
    t = pki / "tls"
    alice = {"ssl.certificate.location": str(t / "alice.pem"), "ssl.key.location": str(t / "alice.key")}
    with b.running():
        # no certificate: EXTERNAL serves it (and asks nobody for one: alice stays anonymous there) ...
        md = AdminClient(_ssl_conf(pki, external)).list_topics(timeout=10)
        assert [(x.host, x.port) for x in md.brokers.values()] == [("127.0.0.1", external)]
        AdminClient(_ssl_conf(pki, external, **alice)).list_topics(timeout=10)
        # ... INTERNAL refuses it in the handshake (one log line) and the client hears an error
        errors: list = []
        refused = AdminClient(_ssl_conf(pki, internal, error_cb=errors.append))

        def heard_refusal() -> bool:
            refused.poll(0.1)  # (serves error_cb)
            return bool(errors) and "tls_handshake_failed" in b.log_text()

        wait_for(heard_refusal, 10, "the refusal on INTERNAL")
        assert {e.code() for e in errors} <= {KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._SSL}
        line = next(x for x in b.log_text().splitlines() if "tls_handshake_failed" in x)
        assert "listener=INTERNAL" in line and "PEER_DID_NOT_RETURN_A_CERTIFICATE" in line, line
        # with a certificate INTERNAL takes it, mapped by the broker's rules
        md = AdminClient(_ssl_conf(pki, internal, **alice)).list_topics(timeout=10)
        assert [(x.host, x.port) for x in md.brokers.values()] == [("127.0.0.1", internal)]

        def authenticated() -> list[str]:
            return [x for x in b.log_text().splitlines() if "tls_client_authenticated" in x]

        wait_for(lambda: any("listener=INTERNAL" in x and "principal=User:alice" in x for x in authenticated()), 5,
                 "the mapped principal on INTERNAL")
        assert not any("listener=EXTERNAL" in x for x in authenticated())
        assert "Traceback" not in b.log_text()


# ----------------------------------------------------------------------------- a cluster over mTLS


@pytest.mark.cluster
def test_cluster_with_an_mtls_inter_broker_listener_commits_across_brokers(pki, tmp_path):
    # mTLS on the inter-broker listener alone, by its own ssl.client.auth (after ``--``: every
    # broker gets it): the peers present the broker certificate to each other
    c = ClusterProcess(tmp_path / "data", 3, extra=["--inter-broker-listener-name", "SSL",
                                                    "--group-initial-rebalance-delay-ms", "0",
                                                    *_tls_args(pki, "none"),
                                                    "--listener-config", "listener.name.ssl.ssl.client.auth=required"])
    ssl_base = free_ports(3)
    c.supervisor_args = ["--listeners", f"PLAINTEXT://127.0.0.1:{c.base_port},SSL://127.0.0.1:{ssl_base}"]
    with c.running():
        # every broker's heartbeat names its SSL endpoint: Metadata through SSL lists them all
        t = pki / "tls"
        conf = _ssl_conf(pki, ssl_base, **{"ssl.certificate.location": str(t / "alice.pem"),
                                           "ssl.key.location": str(t / "alice.key")})
        md = wait_for(lambda: (m := AdminClient(conf).list_topics(timeout=10)) and len(m.brokers) == 3 and m, 20,
                      "three brokers in Metadata over SSL")
        assert sorted(b.port for b in md.brokers.values()) == [ssl_base, ssl_base + 1, ssl_base + 2]
        plain = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=10)
        assert sorted(b.port for b in plain.brokers.values()) == c.ports

        topic = uniq("mtls-txn")
        create_topic(c.bootstrap, topic, 6)
        p = txn_producer(f"127.0.0.1:{ssl_base}", uniq("tx"), **{k: v for k, v in conf.items()
                                                                   if k != "bootstrap.servers"})
        p.init_transactions(20)
        p.begin_transaction()
        for i in range(60):
            p.produce(topic, f"m{i}".encode(), partition=i % 6)
        p.commit_transaction(30)
        got = read_to_end(c.bootstrap, topic, 6, "read_committed")
        assert sorted(values(got)) == sorted(f"m{i}".encode() for i in range(60))
        logs = [c.broker_log(i) for i in range(3)]
        # the brokers reached each other over mTLS (their certificate's DEFAULT principal) ...
        assert sum("User:CN=broker,O=kaas" in x for x in logs) >= 2
        # ... and no peer link failed (the markers went over them, not the queue on the volume)
        assert not any("peer_link_failed" in x or "tls_handshake_failed" in x for x in logs)
