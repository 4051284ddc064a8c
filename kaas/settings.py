"""Frozen broker settings: one field per `kaas broker` option."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kaas.listeners import Listener, single


@dataclass(frozen=True, slots=True)
class Settings:
    broker_id: int = 0
    # this start's incarnation id (kaas.storage.incarnation); empty: the broker draws one
    incarnation: str = ""
    data: Path = Path("./data")
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    advertise_host: str = "127.0.0.1"
    advertise_port: int = 9092
    # Kafka-style listeners (kaas.listeners); empty: the one PLAINTEXT listener of
    # listen_*/advertise_*, which otherwise name the inter-broker listener's addresses; each
    # may carry its own ssl.client.auth and sasl.enabled.mechanisms (--listener-config)
    listeners: tuple[Listener, ...] = ()
    inter_broker_listener: str = "PLAINTEXT"
    ssl_certfile: str | None = None  # PEM: the broker's certificate chain (SSL/SASL_SSL listeners, peer links)
    ssl_keyfile: str | None = None  # PEM: its private key
    ssl_keyfile_password: str | None = None
    ssl_cafile: str | None = None  # PEM: the CAs that client and peer certificates are checked against
    ssl_client_auth: str = "none"  # none | requested | required (ssl.client.auth); a listener's own wins
    ssl_principal_mapping_rules: str = "DEFAULT"  # ssl.principal.mapping.rules
    ssl_handshake_timeout_ms: int = 10_000
    max_request_size: int = 100 * 1024 * 1024
    auto_create_topics: bool = True
    num_partitions: int = 1
    segment_bytes: int = 128 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    retention_check_ms: int = 30_000
    segment_delete_delay_ms: int = 60_000  # log.segment.delete.delay.ms (file.delete.delay.ms)
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_io_max_bytes_per_second: float = 0.0  # 0: no bound
    index_interval_bytes: int = 4096
    message_max_bytes: int = 1024 * 1024 + 12
    # KIP-937, Kafka 4's defaults (KIP-1030 made after.max.ms one hour)
    log_message_timestamp_before_max_ms: int = 2**63 - 1
    log_message_timestamp_after_max_ms: int = 3_600_000
    session_timeout_ms: int = 3000
    heartbeat_ms: int = 500
    # a broker back from the dead coordinates groups again only this long after the
    # controller saw it return (kaas.domain.coordinators, docs/groups.rst)
    group_coordinator_rejoin_hold_ms: int = 30_000
    # SIGTERM: the whole graceful shutdown (drain, relinquish, own death notice) ends within
    # this; set it below Kubernetes' terminationGracePeriodSeconds (30 s by default)
    shutdown_grace_ms: int = 25_000
    transaction_max_timeout_ms: int = 15 * 60 * 1000
    producer_id_expiration_ms: int = 24 * 3600 * 1000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    group_initial_rebalance_delay_ms: int = 3000
    # committed offsets' retention (KIP-211; kaas.domain.groups.offset_expiry) and how often it is applied
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    group_min_session_timeout_ms: int = 1000
    group_max_session_timeout_ms: int = 30 * 60 * 1000
    # KIP-848 consumer groups (Kafka 4's defaults; a group's own consumer.* configs, bounded
    # by the min/max, win: kaas.domain.groups.configs)
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_min_heartbeat_interval_ms: int = 5_000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    group_consumer_migration_policy: str = "bidirectional"  # bidirectional|upgrade|downgrade|disabled
    group_consumer_max_size: int = 2**31 - 1
    # KIP-932 share groups (Kafka 4.4's defaults)
    group_share_session_timeout_ms: int = 45_000
    group_share_min_session_timeout_ms: int = 45_000
    group_share_max_session_timeout_ms: int = 60_000
    group_share_heartbeat_interval_ms: int = 5_000
    group_share_min_heartbeat_interval_ms: int = 5_000
    group_share_max_heartbeat_interval_ms: int = 15_000
    group_share_record_lock_duration_ms: int = 30_000
    group_share_min_record_lock_duration_ms: int = 15_000
    group_share_max_record_lock_duration_ms: int = 60_000
    group_share_delivery_count_limit: int = 5
    group_share_min_delivery_count_limit: int = 2
    group_share_max_delivery_count_limit: int = 10
    group_share_partition_max_record_locks: int = 2_000
    group_share_min_partition_max_record_locks: int = 100
    group_share_max_partition_max_record_locks: int = 4_000
    group_share_max_size: int = 200
    log_json: bool = False
    log_level: str = "info"
    fsync: bool = True
    marker_rpc: bool = True
    inotify: bool = True  # doorbells on a local data directory; off: polling only, as on NFS
    metrics_port: int = 0  # Prometheus /metrics; 0 = off
    cluster_id: str = "kaas-cluster"
    # SASL (issue 21; docs/security.rst). A listener whose protocol is SASL_* serves only
    # ApiVersions, SaslHandshake and SaslAuthenticate until the client has authenticated.
    sasl_enabled_mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")  # a listener's own wins
    sasl_allow_plaintext_credentials: bool = False  # PLAIN/OAUTHBEARER on SASL_PLAINTEXT (Apache has no such guard)
    connections_max_reauth_ms: int = 0  # KIP-368; 0: sessions do not expire
    sasl_oauthbearer_jwks_file: str = ""  # OAUTHBEARER: the JWKS whose keys sign the accepted JWTs
    sasl_oauthbearer_expected_issuer: str = ""
    sasl_oauthbearer_expected_audience: str = ""
    sasl_oauthbearer_sub_claim_name: str = "sub"
    authorizer: bool = False  # authorise every request against the ACLs (issue 21)
    super_users: str = ""  # super.users: principals always allowed, ``User:a;User:b``
    allow_everyone_if_no_acl_found: bool = False  # allow.everyone.if.no.acl.found
    # this broker's SCRAM credentials on a SASL_* inter-broker listener (its peer links and
    # presence connections authenticate as this principal; docs/security.rst, "Peers")
    inter_broker_sasl_username: str = ""
    inter_broker_sasl_password: str = ""
    inter_broker_sasl_mechanism: str = "SCRAM-SHA-512"
    extra: dict[str, object] = field(default_factory=dict)
    # Not an option: the topic-config defaults that dynamic broker configs (KIP-226) set,
    # topic config -> value (``kaas.broker_configs.effective``; ``kaas.configs.default``
    # reads them before the options).
    topic_defaults: dict[str, str] = field(default_factory=dict)

    @property
    def all_listeners(self) -> tuple[Listener, ...]:
        """The listeners this broker serves, in order (the configured ones, or the single
        PLAINTEXT listener of ``listen_*``/``advertise_*``)."""
        if self.listeners:
            return self.listeners
        return (single(self.listen_host, self.listen_port, self.advertise_host, self.advertise_port),)

    @property
    def inter_broker(self) -> Listener:
        """The listener peers connect to (``inter.broker.listener.name``)."""
        ls = self.all_listeners
        return next((x for x in ls if x.name == self.inter_broker_listener), ls[0])

    def listener(self, name: str) -> Listener | None:
        """The listener called ``name`` (upper case, as ``Session.listener``), if any."""
        return next((x for x in self.all_listeners if x.name == name), None)

    def ssl_client_auth_of(self, listener: Listener) -> str:
        """``ssl.client.auth`` on ``listener``: its own
        (``listener.name.<l>.ssl.client.auth``), else ``--ssl-client-auth`` on an SSL
        listener and ``none`` on a SASL_SSL one, as Apache does since KIP-684 (the
        broker-wide option never asks a SASL client for a certificate; only the listener's
        own setting does)."""
        if listener.ssl_client_auth is not None:
            return listener.ssl_client_auth
        return "none" if listener.protocol == "SASL_SSL" else self.ssl_client_auth

    def sasl_mechanisms_of(self, listener: str) -> tuple[str, ...]:
        """``sasl.enabled.mechanisms`` on the listener called ``listener``: its own
        (``listener.name.<l>.sasl.enabled.mechanisms``), else ``--sasl-enabled-mechanisms``."""
        entry = self.listener(listener)
        own = entry.sasl_enabled_mechanisms if entry is not None else None
        return own if own is not None else self.sasl_enabled_mechanisms

    @property
    def cluster_dir(self) -> Path:
        return self.data / "__cluster"

    @property
    def data_dir(self) -> Path:
        return self.data / "data"

    @property
    def run_dir(self) -> Path:
        return self.data / "run"
