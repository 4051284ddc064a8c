"""The TLS and listener options of ``kaas broker``, ``kaas certs`` and ``kaas cluster --secure``."""

from __future__ import annotations

import ssl

from click.testing import CliRunner

from kaas.cli import _secure_cluster, cli


def test_broker_refuses_contradicting_listener_options(tmp_path):
    r = CliRunner().invoke(cli, ["broker", "--data", str(tmp_path), "--listeners", "INTERNAL://:9092"])
    assert r.exit_code == 2 and "no security protocol defined for listener INTERNAL" in r.output
    r = CliRunner().invoke(cli, ["broker", "--data", str(tmp_path), "--listeners", "SSL://:9093"])
    assert r.exit_code == 2 and "inter-broker-listener-name" in r.output
    r = CliRunner().invoke(cli, ["broker", "--data", str(tmp_path), "--listeners", "PLAINTEXT://:9093",
                                 "--advertise", "h:1"])
    assert r.exit_code == 2 and "--advertised-listeners" in r.output
    r = CliRunner().invoke(cli, ["broker", "--data", str(tmp_path), "--listeners", "SSL://:9093",
                                 "--inter-broker-listener-name", "SSL"])
    assert r.exit_code == 2 and "--ssl-certfile" in r.output
    r = CliRunner().invoke(cli, ["broker", "--data", str(tmp_path), "--listeners", "SSL://:9093",
                                 "--inter-broker-listener-name", "SSL", "--ssl-certfile", str(tmp_path / "nope.pem")])
    assert r.exit_code == 2 and "do not load" in r.output


def test_certs_init_and_issue_make_a_chain_the_ssl_module_accepts(tmp_path):
    r = CliRunner().invoke(cli, ["certs", "init", str(tmp_path)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["certs", "issue", str(tmp_path), "alice", "--cn", "Alice", "--ou", "apps"])
    assert r.exit_code == 0, r.output
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "broker.pem", tmp_path / "broker.key")
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    client.load_cert_chain(tmp_path / "alice.pem", tmp_path / "alice.key")
    assert (tmp_path / "ca.key").stat().st_mode & 0o077 == 0
    before = (tmp_path / "ca.pem").read_bytes()
    CliRunner().invoke(cli, ["certs", "init", str(tmp_path)])
    assert (tmp_path / "ca.pem").read_bytes() == before  # kept


def test_secure_cluster_writes_the_client_properties(tmp_path):
    from kaas.storage import credentials
    from kaas.storage.paths import Layout

    listeners, extra = _secure_cluster(tmp_path, 3, "127.0.0.1", 9092)
    assert listeners == "SASL_SSL://127.0.0.1:9092"
    assert extra[:2] == ["--inter-broker-listener-name", "SASL_SSL"]
    opts = dict(zip(extra[::2], extra[1::2], strict=False))
    assert opts["--inter-broker-sasl-username"] == "kaas-broker"
    assert "--authorizer" in extra and extra[extra.index("--super-users") + 1] == "User:admin;User:kaas-broker"
    run = tmp_path / "run"
    props = dict(line.split("=", 1) for line in (run / "client.properties").read_text().splitlines())
    admin_pw = (run / "admin.password").read_text().strip()
    assert props == {"bootstrap.servers": "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094",
                     "security.protocol": "SASL_SSL",
                     "ssl.ca.location": str((run / "tls" / "ca.pem").resolve()),
                     "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": admin_pw}
    for f in ("admin.password", "broker.password", "client.properties"):
        assert (run / f).stat().st_mode & 0o077 == 0
    users = credentials.read(Layout(tmp_path).scram_credentials)
    assert "SCRAM-SHA-512" in users["admin"] and "SCRAM-SHA-512" in users["kaas-broker"]
    # a second start keeps the passwords
    _secure_cluster(tmp_path, 3, "127.0.0.1", 9092)
    assert (run / "admin.password").read_text().strip() == admin_pw


def test_supervisor_derives_each_brokers_listeners(tmp_path, monkeypatch):
    import subprocess

    from cluster.supervisor import Supervisor

    sup = Supervisor(brokers=2, data=tmp_path, base_port=1, first_id=4,
                     listeners="SSL://127.0.0.1:9192,PLAINTEXT://:9092", advertised_listeners="SSL://h:19192")
    assert sup.bootstrap == "h:19192,h:19193"  # the first (advertised) listener's
    spawned = []

    class Proc:
        pid = 1

    monkeypatch.setattr(subprocess, "Popen", lambda argv, **kw: spawned.append(argv) or Proc())
    sup._spawn(sup.children[1])
    argv = spawned[0]
    assert argv[argv.index("--listeners") + 1] == "SSL://127.0.0.1:9193,PLAINTEXT://:9093"
    assert argv[argv.index("--advertised-listeners") + 1] == "SSL://h:19193"
    assert "--listen" not in argv


def _broker(tmp_path, *args: str):
    return CliRunner().invoke(cli, ["broker", "--data", str(tmp_path), *args])


def test_broker_refuses_listener_configs_it_would_not_honour(tmp_path):
    """Every refusal is one line naming the key, before anything listens."""
    two = ["--listeners", "PLAINTEXT://127.0.0.1:1,INTERNAL://127.0.0.1:2,EXTERNAL://127.0.0.1:3",
           "--listener-security-protocol-map", "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,EXTERNAL:SASL_PLAINTEXT",
           "--ssl-certfile", "broker.pem"]
    cases = [
        (["--listener-config", "listener.name.internal.ssl.client.auth=required"],  # (no --ssl-cafile)
         "listener.name.internal.ssl.client.auth=required needs --ssl-cafile"),
        (["--listener-config", "listener.name.dmz.ssl.client.auth=required"], "no listener DMZ"),
        (["--listener-config", "listener.name.internal.ssl.keystore.location=k.jks"], "does not take"),
        (["--listener-config", "listener.name.internal.ssl.client.auth=yes"], "one of none, requested, required"),
        (["--listener-config", "listener.name.external.sasl.enabled.mechanisms=PLAIN"],
         "needs --sasl-allow-plaintext-credentials"),
        (["--listener-config", "listener.name.external.sasl.enabled.mechanisms=OAUTHBEARER"],
         "OAUTHBEARER needs --sasl-oauthbearer-jwks-file"),
    ]
    for extra, message in cases:
        r = _broker(tmp_path, *two, *extra)
        assert r.exit_code == 2 and message in r.output, (extra, r.output)
        assert "--listener-config" in r.output or "ssl options" in r.output
    # the one PLAINTEXT listener of --listen has nothing to override
    r = _broker(tmp_path, "--listener-config", "listener.name.plaintext.ssl.client.auth=required")
    assert r.exit_code == 2 and "the protocol of PLAINTEXT is PLAINTEXT" in r.output


def test_broker_refuses_an_inter_broker_mechanism_its_listener_does_not_enable(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("secret\n")
    r = _broker(tmp_path, "--listeners", "SASL_PLAINTEXT://127.0.0.1:1", "--inter-broker-listener-name",
                "SASL_PLAINTEXT", "--inter-broker-sasl-username", "kaas-broker",
                "--inter-broker-sasl-password-file", str(pw),
                "--listener-config", "listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-256")
    assert r.exit_code == 2, r.output
    assert ("--inter-broker-sasl-mechanism SCRAM-SHA-512 is not enabled on the inter-broker listener SASL_PLAINTEXT "
            "(listener.name.sasl_plaintext.sasl.enabled.mechanisms: SCRAM-SHA-256)") in r.output


def test_supervisor_passes_listener_configs_to_every_broker(tmp_path, monkeypatch):
    import subprocess

    from cluster.supervisor import Supervisor

    item = "listener.name.internal.ssl.client.auth=required"
    sup = Supervisor(brokers=2, data=tmp_path, base_port=1, listeners="INTERNAL://127.0.0.1:9192,EXTERNAL://:9092",
                     broker_args=["--listener-config", item])
    spawned = []

    class Proc:
        pid = 1

    monkeypatch.setattr(subprocess, "Popen", lambda argv, **kw: spawned.append(argv) or Proc())
    for child in sup.children:
        sup._spawn(child)
    assert [argv[argv.index("--listener-config") + 1] for argv in spawned] == [item, item]
