"""Frozen broker settings: one field per `kaas broker` option."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SERVED_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT")  # SSL and SASL_SSL: the TLS branch


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``NAME://HOST:PORT`` of ``--listeners``."""

    name: str
    host: str
    port: int
    security_protocol: str


def parse_listeners(value: str) -> tuple[Listener, ...]:
    """Parse Kafka's ``listeners`` (``SASL_PLAINTEXT://127.0.0.1:9092,PLAINTEXT://:9093``).

    Minimal form (the TLS branch adds ``--listener-security-protocol-map`` and SSL): a
    listener's name is its security protocol, PLAINTEXT or SASL_PLAINTEXT; an empty host
    is 127.0.0.1.

    Raises:
        ValueError: malformed, a name used twice, or a protocol not served.
    """
    out: list[Listener] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, hostport = item.partition("://")
        host, colon, port = hostport.rpartition(":")
        if not sep or not colon or not port.isdigit() or not name:
            raise ValueError(f"{item!r} is not NAME://HOST:PORT")
        name = name.upper()
        if name not in SECURITY_PROTOCOLS:
            raise ValueError(f"listener {name}: the name must be a security protocol {SECURITY_PROTOCOLS}")
        if name not in SERVED_PROTOCOLS:
            raise ValueError(f"listener {name}: only {SERVED_PROTOCOLS} are served")
        if any(li.name == name for li in out):
            raise ValueError(f"listener {name} given twice")
        out.append(Listener(name, host.strip("[]") or "127.0.0.1", int(port), name))
    if not out:
        raise ValueError("no listener given")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Settings:
    broker_id: int = 0
    data: Path = Path("./data")
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    advertise_host: str = "127.0.0.1"
    advertise_port: int = 9092
    max_request_size: int = 100 * 1024 * 1024
    auto_create_topics: bool = True
    num_partitions: int = 1
    segment_bytes: int = 128 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    retention_check_ms: int = 30_000
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_io_max_bytes_per_second: float = 0.0  # 0: no bound
    index_interval_bytes: int = 4096
    message_max_bytes: int = 1024 * 1024 + 12
    session_timeout_ms: int = 3000
    heartbeat_ms: int = 500
    transaction_max_timeout_ms: int = 15 * 60 * 1000
    producer_id_expiration_ms: int = 24 * 3600 * 1000
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 1000
    group_max_session_timeout_ms: int = 30 * 60 * 1000
    log_json: bool = False
    log_level: str = "info"
    fsync: bool = True
    marker_rpc: bool = True
    inotify: bool = True  # doorbells on a local data directory; off: polling only, as on NFS
    metrics_port: int = 0  # Prometheus /metrics; 0 = off
    cluster_id: str = "kaas-cluster"
    # SASL (issue 21; docs/security.rst). A listener whose protocol is SASL_* serves only
    # ApiVersions, SaslHandshake and SaslAuthenticate until the client has authenticated.
    listeners: tuple[Listener, ...] = ()  # empty: one PLAINTEXT listener on listen_host:listen_port
    sasl_enabled_mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")
    sasl_allow_plaintext_credentials: bool = False  # PLAIN/OAUTHBEARER on SASL_PLAINTEXT (Apache has no such guard)
    connections_max_reauth_ms: int = 0  # KIP-368; 0: sessions do not expire
    sasl_oauthbearer_jwks_file: str = ""  # OAUTHBEARER: the JWKS whose keys sign the accepted JWTs
    sasl_oauthbearer_expected_issuer: str = ""
    sasl_oauthbearer_expected_audience: str = ""
    sasl_oauthbearer_sub_claim_name: str = "sub"
    authorizer: bool = False  # authorise every request against the ACLs (issue 21)
    super_users: str = ""  # super.users: principals always allowed, ``User:a;User:b``
    allow_everyone_if_no_acl_found: bool = False  # allow.everyone.if.no.acl.found
    extra: dict = field(default_factory=dict)

    @property
    def cluster_dir(self) -> Path:
        return self.data / "__cluster"

    @property
    def data_dir(self) -> Path:
        return self.data / "data"

    @property
    def run_dir(self) -> Path:
        return self.data / "run"
