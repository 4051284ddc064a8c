"""The one ``kaas`` command: ``kaas broker``, ``kaas cluster`` and the tools."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from kaas.listeners import CLIENT_AUTH_MODES  # stdlib only: cheap at start-up

if TYPE_CHECKING:
    from kaas.forking import Forked
    from kaas.settings import Settings


def _hostport(value: str, default_port: int = 9092) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host:
        return value or "127.0.0.1", default_port
    return host.strip("[]"), int(port)


def _without_test_libraries() -> None:
    """Keep hypothesis (and, through its trio hooks, pytest) and rich out of a broker process.

    kio registers hypothesis strategies for its field types whenever hypothesis is
    importable. In a development or CI venv that put hypothesis, trio.testing and pytest
    into every broker: about 220 more modules, 17 MiB more RSS per broker and 0.2 s more
    at start (which a restart after a crash waits for). structlog's console renderer
    likewise imports rich, when installed, for pretty tracebacks: another 0.06 s of CPU
    at every start, for log lines that go to a file. A broker never draws examples and
    logs plain tracebacks, so the imports are made to fail (``sys.modules[name] = None``),
    only when nothing has imported hypothesis or kio (structlog or rich) yet: an
    in-process caller keeps what it has."""
    import sys

    if "hypothesis" not in sys.modules and "kio" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]
    if "rich" not in sys.modules and "structlog" not in sys.modules:
        sys.modules["rich"] = None  # type: ignore[assignment]


FIRST_APIS = (18, 3)
"""ApiVersions and Metadata: the requests every client opens with, whose handler modules
``preload_broker`` imports besides what ``kaas broker`` imports."""


def preload_broker(all_handlers: bool = False) -> None:
    """Import what ``kaas broker`` imports, once, in a process that then forks brokers
    (``kaas cluster --fork-brokers``, ``kaas.testing``'s fork server): each fork starts
    with them in memory instead of importing them again.

    The handler modules (each with the kio classes of all its versions: about 0.4 s of
    CPU, most of the import) are left to each broker to import at its API's first
    request, except the ``FIRST_APIS`` (``all_handlers``: every one, for a process that
    forks brokers for a long time).

    The cyclic garbage collector is off meanwhile: the imports make objects that all stay,
    and collecting while they are made cost about a tenth of the import's CPU."""
    import gc

    _without_test_libraries()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        import trio  # noqa: F401

        import kaas.allocator  # noqa: F401
        import kaas.log  # noqa: F401
        import kaas.net.server  # noqa: F401
        import kaas.settings  # noqa: F401
        from kaas.handlers import registry

        registry.load_all(None if all_handlers else FIRST_APIS)
    finally:
        if was_enabled:
            gc.enable()


def fork_broker(argv: list[str], logf: BinaryIO | int) -> Forked:
    """``cluster.supervisor.Launch`` by fork (``kaas.forking``): ``argv`` is the
    supervisor's ``[python, -m, kaas.cli, broker, ...]``; the child runs ``kaas broker ...``
    from this process's imports."""
    from kaas.forking import fork_command

    assert argv[1:3] == ["-m", "kaas.cli"], argv
    return fork_command(main, argv[3:], stdout=logf)


class _LazyGroup(click.Group):
    """The tool commands (``txn``, ``topics``, ``groups``, ``acls``, ``inspect``, ``users``, ``health``, ...) are
    imported only when one of them runs or help lists them, so ``kaas broker`` starts without their imports."""

    LAZY = {
        "txn": "kaas.tools.txn:txn",
        "acls": "kaas.tools.acls:acls",
        "topics": "kaas.tools.topics:topics",
        "groups": "kaas.tools.groups:groups",
        "inspect": "kaas.tools.inspect_data:inspect",
        "users": "kaas.tools.users:users",
        "certs": "kaas.tools.certs:certs",
        "health": "kaas.tools.health:health",
        "features": "kaas.tools.features:features",
        "configs": "kaas.tools.configs:configs",
        "share-groups": "kaas.tools.group_admin:share_groups",
        "get-offsets": "kaas.tools.records:get_offsets",
        "delete-records": "kaas.tools.records:delete_records",
        "console": "kaas.tools.console:console",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.LAZY))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.LAZY and cmd_name not in self.commands:
            import importlib

            module, _, attr = self.LAZY[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)


# The KIP-848 (consumer groups) and KIP-932 (share groups) settings: one ``kaas broker``
# option per Settings field, under Apache's names (all read-only configs in Apache 4.2).
_GROUP_OPTIONS: tuple[tuple[str, str], ...] = (
    ("group_consumer_session_timeout_ms", "A consumer-protocol member (KIP-848) without a heartbeat for this long "
                                          "is removed; a group's consumer.session.timeout.ms wins"),
    ("group_consumer_min_session_timeout_ms", "The smallest consumer.session.timeout.ms a group may set"),
    ("group_consumer_max_session_timeout_ms", "The largest consumer.session.timeout.ms a group may set"),
    ("group_consumer_heartbeat_interval_ms", "The heartbeat interval given to consumer-protocol members; a "
                                             "group's consumer.heartbeat.interval.ms wins"),
    ("group_consumer_min_heartbeat_interval_ms", "The smallest consumer.heartbeat.interval.ms a group may set"),
    ("group_consumer_max_heartbeat_interval_ms", "The largest consumer.heartbeat.interval.ms a group may set"),
    ("group_consumer_assignors", "The server-side assignors, uniform and range (or Apache's class names "
                                 "org.apache.kafka.coordinator.group.assignor.UniformAssignor/RangeAssignor); the "
                                 "first is used when a member names none"),
    ("group_consumer_migration_policy", "Which online conversions between classic and consumer groups are "
                                        "allowed"),
    ("group_consumer_max_size", "The most members a consumer-protocol group may have"),
    ("group_share_session_timeout_ms", "A share-group member (KIP-932) without a heartbeat for this long is "
                                       "removed; a group's share.session.timeout.ms wins"),
    ("group_share_min_session_timeout_ms", "The smallest share.session.timeout.ms a group may set"),
    ("group_share_max_session_timeout_ms", "The largest share.session.timeout.ms a group may set"),
    ("group_share_heartbeat_interval_ms", "The heartbeat interval given to share-group members; a group's "
                                          "share.heartbeat.interval.ms wins"),
    ("group_share_min_heartbeat_interval_ms", "The smallest share.heartbeat.interval.ms a group may set"),
    ("group_share_max_heartbeat_interval_ms", "The largest share.heartbeat.interval.ms a group may set"),
    ("group_share_record_lock_duration_ms", "How long a share consumer holds an acquired record (1000..3600000); "
                                            "a group's share.record.lock.duration.ms wins"),
    ("group_share_min_record_lock_duration_ms", "The smallest share.record.lock.duration.ms a group may set "
                                                "(1000..30000)"),
    ("group_share_max_record_lock_duration_ms", "The largest share.record.lock.duration.ms a group may set "
                                                "(30000..3600000)"),
    ("group_share_delivery_count_limit", "Deliveries of a record to a share group before it is archived (2..10); "
     "a group's share.delivery.count.limit wins"),
    ("group_share_min_delivery_count_limit", "The smallest share.delivery.count.limit a group may set (2..5)"),
    ("group_share_max_delivery_count_limit", "The largest share.delivery.count.limit a group may set (5..25)"),
    ("group_share_partition_max_record_locks", "Records a share-partition may have acquired at once (100..10000); "
     "a group's share.partition.max.record.locks wins"),
    ("group_share_min_partition_max_record_locks", "The smallest share.partition.max.record.locks a group may set "
     "(100..2000)"),
    ("group_share_max_partition_max_record_locks", "The largest share.partition.max.record.locks a group may set "
     "(2000..10000)"),
    ("group_share_max_size", "The most members a share group may have (1..1000)"),
)


def _group_options(f: Any) -> Any:
    """Decorate ``broker`` with the options of ``_GROUP_OPTIONS`` (defaults: ``Settings``)."""
    from kaas.settings import Settings

    defaults = Settings()
    for field, text in reversed(_GROUP_OPTIONS):
        default = getattr(defaults, field)
        kind: Any = int
        if field == "group_consumer_assignors":
            default, kind = ",".join(default), str
        elif field == "group_consumer_migration_policy":
            kind = click.Choice(["bidirectional", "upgrade", "downgrade", "disabled"], case_sensitive=False)
        f = click.option(f"--{field.replace('_', '-')}", field, type=kind, default=default, show_default=True,
                         help=f"{text} ({field.replace('_', '.')}).")(f)
    return f



@click.group(cls=_LazyGroup, context_settings={"auto_envvar_prefix": "KAAS", "help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kaas", message="kaas %(version)s")
def cli() -> None:
    """kaas: a Kafka-wire-compatible broker cluster on a shared data directory."""


@cli.command()
@click.option("--id", "broker_id", type=int, default=0, show_default=True, help="Broker id (ordinal).")
@click.option("--data", type=click.Path(path_type=Path), default=Path("./data"), show_default=True,
              help="Shared data directory.")
@click.option("--listen", default="127.0.0.1:9092", show_default=True, help="HOST:PORT to listen on.")
@click.option("--advertise", default=None, help="HOST:PORT clients should use (default: --listen).")
@click.option("--listeners", default=None,
              help="Kafka-style listeners, NAME://HOST:PORT,... (listeners; e.g. "
                   "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093); replaces --listen (--advertise: "
                   "use --advertised-listeners).")
@click.option("--advertised-listeners", default=None,
              help="NAME://HOST:PORT,... clients are told to use (advertised.listeners; default: --listeners).")
@click.option("--listener-security-protocol-map", default=None,
              help="NAME:PROTOCOL,... for each listener (listener.security.protocol.map; default: PLAINTEXT, SSL, "
                   "SASL_PLAINTEXT and SASL_SSL map to themselves).")
@click.option("--inter-broker-listener-name", default=None,
              help="The listener peers connect to (inter.broker.listener.name; default: PLAINTEXT).")
@click.option("--listener-config", multiple=True, metavar="KEY=VALUE",
              help="One listener's own setting, in Apache's listener-prefixed form "
                   "listener.name.<listener>.<key>=<value> (repeatable; the name in any case): "
                   "ssl.client.auth (none|requested|required; SSL and SASL_SSL listeners) or "
                   "sasl.enabled.mechanisms (SASL_PLAINTEXT and SASL_SSL listeners), e.g. "
                   "listener.name.internal.ssl.client.auth=required. A listener without one takes "
                   "--ssl-client-auth / --sasl-enabled-mechanisms; any other key is refused.")
@click.option("--ssl-certfile", default=None, help="PEM certificate chain of this broker (TLS listeners, peer links).")
@click.option("--ssl-keyfile", default=None, help="PEM private key of --ssl-certfile.")
@click.option("--ssl-keyfile-password", default=None, help="Password of an encrypted --ssl-keyfile.")
@click.option("--ssl-cafile", default=None,
              help="PEM CA certificates that client certificates and peer brokers' certificates are checked against.")
@click.option("--ssl-client-auth", type=click.Choice(CLIENT_AUTH_MODES), default="none",
              show_default=True,
              help="Client certificates on SSL listeners (ssl.client.auth; a SASL_SSL listener asks for them "
                   "only with its own setting, as Apache since KIP-684); a listener's own "
                   "listener.name.<listener>.ssl.client.auth (--listener-config) wins.")
@click.option("--ssl-handshake-timeout-ms", type=int, default=10_000, show_default=True,
              help="A TLS connection that has not finished its handshake by then is closed.")
@click.option("--ssl-principal-mapping-rules", default="DEFAULT", show_default=True,
              help="Principal of a client certificate's subject: DEFAULT, RULE:pattern/replacement/[LU], ... "
                   "(ssl.principal.mapping.rules).")
@click.option("--auto-create-topics/--no-auto-create-topics", default=True, show_default=True,
              help="Create unknown topics on Metadata (auto.create.topics.enable).")
@click.option("--num-partitions", type=int, default=1, show_default=True,
              help="Partitions of an auto-created topic (num.partitions).")
@click.option("--segment-bytes", type=int, default=128 * 1024 * 1024, show_default=True,
              help="Roll a new log segment at this size (segment.bytes).")
@click.option("--retention-ms", type=int, default=7 * 24 * 3600 * 1000, show_default=True,
              help="Delete segments whose records are all older than this (retention.ms; -1 = forever).")
@click.option("--retention-bytes", type=int, default=-1, show_default=True,
              help="Delete old segments beyond this partition size (retention.bytes; -1 = no limit).")
@click.option("--segment-delete-delay-ms", type=int, default=60_000, show_default=True,
              help="How long a deleted segment's files, and a deleted topic's, stay on the volume (renamed "
                   "*.deleted) before they are removed (log.segment.delete.delay.ms; the topic default of "
                   "file.delete.delay.ms).")
@click.option("--retention-check-ms", type=int, default=30_000, show_default=True,
              help="How often retention runs (log.retention.check.interval.ms).")
@click.option("--log-cleaner-backoff-ms", type=int, default=15_000, show_default=True,
              help="How often the log cleaner looks for compacted partitions to clean (log.cleaner.backoff.ms).")
@click.option("--log-cleaner-io-max-bytes-per-second", type=float, default=0.0, show_default=True,
              help="Bound on the cleaner's read+write rate per pass (log.cleaner.io.max.bytes.per.second; 0 = none).")
@click.option("--max-request-size", type=int, default=100 * 1024 * 1024, show_default=True,
              help="Largest request frame accepted (socket.request.max.bytes).")
@click.option("--message-max-bytes", type=int, default=1024 * 1024 + 12, show_default=True,
              help="Largest record batch accepted (message.max.bytes).")
@click.option("--log-message-timestamp-before-max-ms", type=int, default=2**63 - 1, show_default=True,
              help="Refuse a CreateTime record timestamp more than this before the broker's clock "
                   "(log.message.timestamp.before.max.ms, KIP-937; the topic's message.timestamp.before.max.ms wins).")
@click.option("--log-message-timestamp-after-max-ms", type=int, default=3_600_000, show_default=True,
              help="Refuse a CreateTime record timestamp more than this after the broker's clock "
                   "(log.message.timestamp.after.max.ms, KIP-937; the topic's message.timestamp.after.max.ms wins).")
@click.option("--session-timeout-ms", type=int, default=3000, show_default=True,
              help="Broker liveness timeout on the shared volume.")
@click.option("--group-coordinator-rejoin-hold-ms", type=click.IntRange(min=0), default=30_000, show_default=True,
              help="A broker back from the dead coordinates groups again only this long after the "
                   "controller saw it return (0: at once).")
@click.option("--shutdown-grace-ms", type=int, default=25_000, show_default=True,
              help="On SIGTERM: drain, hand over and exit within this (keep it below Kubernetes' "
                   "terminationGracePeriodSeconds).")
@click.option("--transaction-max-timeout-ms", type=int, default=15 * 60 * 1000, show_default=True,
              help="Largest transaction.timeout.ms a producer may ask for.")
@click.option("--producer-id-expiration-ms", type=int, default=24 * 3600 * 1000, show_default=True,
              help="Forget idle producers' idempotence state after this (producer.id.expiration.ms), "
                   "counted from their last append by the broker's clock.")
@click.option("--transactional-id-expiration-ms", type=int, default=7 * 24 * 3600 * 1000, show_default=True,
              help="Forget a transactional id with no transaction open after this long without a request, "
                   "by the coordinator's clock (transactional.id.expiration.ms).")
@click.option("--group-initial-rebalance-delay-ms", type=int, default=3000, show_default=True,
              help="Wait for more members before the first rebalance of an empty group.")
@click.option("--offsets-retention-minutes", type=click.IntRange(min=1), default=7 * 24 * 60, show_default=True,
              help="Remove a group's committed offsets once it has been empty this long, and offsets "
                   "committed without group membership this long after their commit "
                   "(offsets.retention.minutes, KIP-211).")
@click.option("--offsets-retention-check-interval-ms", type=click.IntRange(min=1), default=600_000,
              show_default=True,
              help="How often expired offsets are looked for (offsets.retention.check.interval.ms).")
@_group_options
@click.option("--fsync/--no-fsync", default=True, show_default=True,
              help="fsync appends for acks=all and state files (leave on outside of tests).")
@click.option("--marker-rpc/--no-marker-rpc", default=True, show_default=True,
              help="Hand transaction markers to peer leaders with WriteTxnMarkers; off: only through "
                   "the marker queue on the data directory.")
@click.option("--inotify/--no-inotify", default=True, show_default=True,
              help="Wake on changes of the data directory through inotify (a doorbell; where the "
                   "volume is NFS it sees nothing of other hosts); off: polling only, as on NFS.")
@click.option("--metrics-port", type=int, default=0, show_default=True,
              help="Serve Prometheus /metrics over HTTP on this port of the listen host (0 = off).")
@click.option("--sasl-enabled-mechanisms", default="SCRAM-SHA-256,SCRAM-SHA-512", show_default=True,
              help="SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER "
                   "(sasl.enabled.mechanisms); a listener's own listener.name.<listener>.sasl.enabled.mechanisms "
                   "(--listener-config) wins.")
@click.option("--sasl-allow-plaintext-credentials/--no-sasl-allow-plaintext-credentials", default=False,
              show_default=True,
              help="Offer PLAIN and OAUTHBEARER on SASL_PLAINTEXT listeners too, where passwords and tokens "
                   "cross the network in clear (kaas only: Apache has no such guard).")
@click.option("--sasl-oauthbearer-jwks-file", default="",
              help="OAUTHBEARER: JWKS file of the keys that sign accepted JWTs (RS256/ES256; re-read when it "
                   "changes; Apache: sasl.oauthbearer.jwks.endpoint.url with a file: URL).")
@click.option("--sasl-oauthbearer-expected-issuer", default="",
              help="OAUTHBEARER: the iss every token must carry (sasl.oauthbearer.expected.issuer).")
@click.option("--sasl-oauthbearer-expected-audience", default="",
              help="OAUTHBEARER: an aud every token must carry (sasl.oauthbearer.expected.audience).")
@click.option("--sasl-oauthbearer-sub-claim-name", default="sub", show_default=True,
              help="OAUTHBEARER: the claim naming the principal (sasl.oauthbearer.sub.claim.name).")
@click.option("--connections-max-reauth-ms", type=int, default=0, show_default=True,
              help="A SASL session must re-authenticate within this (connections.max.reauth.ms; 0 = never).")
@click.option("--authorizer/--no-authorizer", default=False, show_default=True,
              help="Authorise every request against the cluster's ACLs (Apache's semantics).")
@click.option("--super-users", default="", show_default=True,
              help="super.users: principals allowed everything, e.g. 'User:admin;User:ops'.")
@click.option("--allow-everyone-if-no-acl-found", is_flag=True, default=False,
              help="allow.everyone.if.no.acl.found: a resource no ACL names is open to all.")
@click.option("--inter-broker-sasl-username", default="",
              help="The SCRAM user this broker authenticates as to its peers when the inter-broker listener "
                   "is SASL_PLAINTEXT or SASL_SSL (Apache: the listener's JAAS config); make it a super user.")
@click.option("--inter-broker-sasl-password-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="File holding that user's password (its first line; kept off the command line).")
@click.option("--inter-broker-sasl-mechanism", type=click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
              default="SCRAM-SHA-512", show_default=True,
              help="SCRAM mechanism of the peer connections (sasl.mechanism.inter.broker.protocol).")
@click.option("--incarnation", default="", metavar="HEX",
              help="This start's incarnation id (32 hex digits; a supervisor passes the one its death notice "
                   "will name). Default: a random one.")
@click.option("--log-json", is_flag=True, help="JSON log lines instead of key-value console output.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]), help="Lowest level logged.")
def broker(broker_id: int, data: Path, listen: str, advertise: str | None, listeners: str | None,
           advertised_listeners: str | None, listener_security_protocol_map: str | None,
           inter_broker_listener_name: str | None, listener_config: tuple[str, ...], log_json: bool,
           log_level: str, sasl_enabled_mechanisms: str, **opts: Any) -> None:
    """Run one broker process."""
    _without_test_libraries()
    import trio

    from kaas import allocator, log
    from kaas.listeners import Listener, ListenerError, apply_listener_configs, parse_mechanisms, resolve, single
    from kaas.net.server import serve_broker
    from kaas.settings import Settings

    entries: tuple[Listener, ...] = ()
    inter_broker = "PLAINTEXT"
    if listeners or advertised_listeners or listener_security_protocol_map or inter_broker_listener_name:
        if advertise:  # (--listen, the launchers' habit, is replaced by --listeners)
            raise click.UsageError("--advertise is the shorthand of one PLAINTEXT listener's advertised address; "
                                   "with --listeners use --advertised-listeners")
        try:
            entries, inter_broker = resolve(listeners or f"PLAINTEXT://{listen}", advertised_listeners,
                                            listener_security_protocol_map, inter_broker_listener_name)
        except ListenerError as exc:
            raise click.BadParameter(str(exc), param_hint="listeners") from None
        ib = next(e for e in entries if e.name == inter_broker)
        lhost, lport, ahost, aport = ib.host or "0.0.0.0", ib.port, ib.advertised_host, ib.advertised_port
    else:
        lhost, lport = _hostport(listen)
        default_host = lhost if lhost not in ("0.0.0.0", "::") else "127.0.0.1"
        ahost, aport = _hostport(advertise) if advertise else (default_host, lport)
    if listener_config:
        try:
            entries = apply_listener_configs(entries or (single(lhost, lport, ahost, aport),), listener_config)
        except ListenerError as exc:
            raise click.BadParameter(str(exc), param_hint="--listener-config") from None
    try:
        mechanisms = parse_mechanisms(sasl_enabled_mechanisms)
    except ListenerError as exc:
        raise click.BadParameter(str(exc), param_hint="--sasl-enabled-mechanisms") from None
    opts.update(sasl_enabled_mechanisms=mechanisms)
    password_file = opts.pop("inter_broker_sasl_password_file")
    if bool(password_file) != bool(opts["inter_broker_sasl_username"]):
        raise click.UsageError("--inter-broker-sasl-username and --inter-broker-sasl-password-file go together")
    opts["inter_broker_sasl_password"] = (password_file.read_text().splitlines() or [""])[0] if password_file else ""
    from kaas.domain.groups.configs import parse_assignors, settings_problem

    try:
        opts["group_consumer_assignors"] = parse_assignors(opts["group_consumer_assignors"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--group-consumer-assignors") from None
    from kaas.storage import incarnation

    try:  # the process's incarnation (tmp names) is the broker's (heartbeats, notices)
        opts["incarnation"] = incarnation.adopt(opts["incarnation"]) if opts["incarnation"] else incarnation.current()
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--incarnation") from None
    settings = Settings(
        broker_id=broker_id, data=data, listen_host=lhost, listen_port=lport,
        advertise_host=ahost, advertise_port=aport, listeners=entries, inter_broker_listener=inter_broker,
        log_json=log_json, log_level=log_level, auto_create_topics=opts.pop("auto_create_topics"), **opts,
    )
    problem = _sasl_problem(settings)
    if problem:
        raise click.BadParameter(problem[1], param_hint=problem[0])
    group_problem = settings_problem(settings)  # Apache's checks of the group.* settings
    if group_problem:
        raise click.BadParameter(group_problem[1], param_hint="--" + group_problem[0].replace(".", "-"))
    _check_tls(settings)
    log.configure(json=log_json, level=log_level, broker_id=broker_id)
    allocator.tune()
    trio.run(serve_broker, settings)


def _check_tls(settings: Settings) -> None:
    """Load every TLS listener's context and the principal mapping rules before the broker
    starts, so that a bad certificate, key or rule stops ``kaas broker`` with its reason.

    Raises:
        click.BadParameter: a TLS option is wrong.
    """
    if not any(e.tls for e in settings.all_listeners):
        return
    from kaas.domain.principal import RuleError
    from kaas.net.tls import TLSConfigError, principal_rules, server_context

    try:
        for entry in settings.all_listeners:
            if entry.tls:
                server_context(settings, entry)
        principal_rules(settings)
    except (TLSConfigError, RuleError) as exc:
        raise click.BadParameter(str(exc), param_hint="ssl options") from None


def _sasl_problem(settings: Settings) -> tuple[str, str] | None:
    """What the SASL options contradict, as (option, one-line reason), checked before the
    broker starts; None: nothing.

    - OAUTHBEARER, in ``--sasl-enabled-mechanisms`` or a listener's own list, needs its
      JWKS file, issuer and audience;
    - a SASL_PLAINTEXT listener's own list may name PLAIN or OAUTHBEARER only with
      ``--sasl-allow-plaintext-credentials`` (otherwise they would be offered nowhere: an
      accepted and ignored setting);
    - with peer credentials, ``--inter-broker-sasl-mechanism`` must be enabled on the
      inter-broker listener (Apache's check of ``sasl.mechanism.inter.broker.protocol``),
      or no peer link could authenticate.
    """
    from kaas.handlers._sasl import CLEARTEXT

    sasl = [e for e in settings.all_listeners if e.sasl]
    lists = [settings.sasl_enabled_mechanisms, *(e.sasl_enabled_mechanisms or () for e in sasl)]
    if any("OAUTHBEARER" in m for m in lists):
        missing = [f"--sasl-oauthbearer-{k.replace('_', '-')}" for k in ("jwks_file", "expected_issuer",
                                                                         "expected_audience")
                   if not getattr(settings, f"sasl_oauthbearer_{k}")]
        if missing:
            where = "--sasl-enabled-mechanisms" if "OAUTHBEARER" in lists[0] else "--listener-config"
            return where, f"OAUTHBEARER needs {', '.join(missing)}"
    for e in sasl:
        clear = [m for m in e.sasl_enabled_mechanisms or () if m in CLEARTEXT]
        if clear and e.protocol == "SASL_PLAINTEXT" and not settings.sasl_allow_plaintext_credentials:
            return "--listener-config", (f"{e.config_prefix}sasl.enabled.mechanisms: {', '.join(clear)} on the "
                                         f"SASL_PLAINTEXT listener {e.name} needs --sasl-allow-plaintext-credentials "
                                         "(the secret would cross the network in clear)")
    ib = settings.inter_broker
    mechanism = settings.inter_broker_sasl_mechanism
    if ib.sasl and settings.inter_broker_sasl_username and mechanism not in settings.sasl_mechanisms_of(ib.name):
        own = ib.sasl_enabled_mechanisms is not None
        source = f"{ib.config_prefix}sasl.enabled.mechanisms" if own else "--sasl-enabled-mechanisms"
        return ("--listener-config" if own else "--inter-broker-sasl-mechanism",
                f"--inter-broker-sasl-mechanism {mechanism} is not enabled on the inter-broker listener {ib.name} "
                f"({source}: {','.join(settings.sasl_mechanisms_of(ib.name)) or 'none'}): no peer could authenticate")
    return None


@cli.command()
@click.option("--brokers", type=int, default=1, show_default=True, help="Number of brokers to run.")
@click.option("--data", type=click.Path(path_type=Path), default=Path("./data"), show_default=True,
              help="Shared data directory.")
@click.option("--base-port", type=int, default=9092, show_default=True, help="Port of broker 0; broker i uses +i.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Listen and advertise host.")
@click.option("--first-id", type=int, default=0, show_default=True,
              help="Id of the first broker (several supervisors on several hosts use disjoint ranges).")
@click.option("--restart-delay", type=float, default=1.0, show_default=True,
              help="Seconds before a broker that died is restarted.")
@click.option("--metrics-base-port", type=int, default=0, show_default=True,
              help="Prometheus port of broker 0; broker i gets +i (passed as --metrics-port; 0 = off).")
@click.option("--listeners", default=None,
              help="Broker 0's --listeners (NAME://HOST:PORT,...); broker i gets every port +i "
                   "(default: one PLAINTEXT listener at --host:--base-port).")
@click.option("--advertised-listeners", default=None,
              help="Broker 0's --advertised-listeners; broker i gets every port +i.")
@click.option("--secure", is_flag=True,
              help="TLS, SCRAM and ACLs: a local CA and broker certificate in DATA/run/tls (kaas certs init), "
                   "one SASL_SSL listener per broker at --host:--base-port+i for clients and peers (SCRAM-SHA-512, "
                   "peers as User:kaas-broker), the users admin and kaas-broker (passwords in DATA/run/*.password), "
                   "the authoriser with both super users, and the admin's client settings in "
                   "DATA/run/client.properties.")
@click.option("--fork-brokers/--exec-brokers", default=True, show_default=True,
              help="--fork-brokers: import the broker's code once in the supervisor and fork every broker (and "
                   "every restart) from it: a broker serves within milliseconds of its start instead of after "
                   "~0.3 s of imports of its own. The brokers then run the code the supervisor loaded: restart "
                   "the supervisor to pick up an upgrade. --exec-brokers: start every broker (and every restart) "
                   "as a new interpreter, which loads the code installed at that moment.")
@click.argument("broker_args", nargs=-1, type=click.UNPROCESSED)
def cluster(brokers: int, data: Path, base_port: int, host: str, first_id: int, restart_delay: float,
            metrics_base_port: int, listeners: str | None, advertised_listeners: str | None, secure: bool,
            fork_brokers: bool, broker_args: tuple[str, ...]) -> None:
    """Supervise N brokers over one data directory (extra args go to every broker)."""
    if fork_brokers:
        preload_broker()
    else:
        _without_test_libraries()  # (the supervisor's own imports reach kio too)
    from cluster.supervisor import exec_broker, run_supervisor
    from kaas.listeners import ListenerError

    args = list(broker_args)
    if secure:
        if listeners:
            raise click.UsageError("--secure makes its own listeners; give one or the other")
        listeners, extra = _secure_cluster(Path(data), brokers, host, base_port)
        args = extra + args
    try:
        run_supervisor(brokers=brokers, data=data, base_port=base_port, host=host, first_id=first_id,
                       restart_delay=restart_delay, metrics_base_port=metrics_base_port,
                       broker_args=args, listeners=listeners, advertised_listeners=advertised_listeners,
                       launch=fork_broker if fork_brokers else exec_broker)
    except ListenerError as exc:
        raise click.BadParameter(str(exc), param_hint="listeners") from None


SECURE_ADMIN = "admin"
SECURE_BROKER = "kaas-broker"  # the broker principal of kaas cluster --secure


def _password_file(path: Path) -> str:
    """The password in ``path`` (mode 0600), made (random) when the file is not there."""
    import secrets

    if path.exists():
        password = (path.read_text().splitlines() or [""])[0]
        if password:
            path.chmod(0o600)
            return password
    password = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    path.chmod(0o600)
    return password


def _secure_cluster(data: Path, brokers: int, host: str, base_port: int) -> tuple[str, list[str]]:
    """``kaas cluster --secure``, before the brokers start: the dev CA and certificates in
    DATA/run/tls, the SCRAM users ``admin`` and ``kaas-broker`` (their passwords in
    DATA/run/admin.password and DATA/run/broker.password, 0600, all kept across runs) written
    to the credentials file as ``kaas users add --data`` does, DATA/run/client.properties
    (the admin's), and broker 0's listeners and the broker options: one SASL_SSL listener
    for clients and peers, SCRAM-SHA-512 between brokers, the authoriser on with both users
    super users."""
    from kaas.tools.certs import init_dev
    from kaas.tools.users import add_offline

    run = data / "run"
    tls_dir = run / "tls"
    sans = ("127.0.0.1", "::1", "localhost") + ((host,) if host not in ("127.0.0.1", "localhost", "0.0.0.0") else ())
    made = init_dev(tls_dir, sans=sans)
    ca, cert = made["ca"], made["broker"]
    admin_pw = _password_file(run / "admin.password")
    broker_pw_file = run / "broker.password"
    broker_pw = _password_file(broker_pw_file)
    add_offline(data, SECURE_ADMIN, admin_pw)
    add_offline(data, SECURE_BROKER, broker_pw)
    adv = host if host not in ("0.0.0.0", "::") else "127.0.0.1"
    bootstrap = ",".join(f"{adv}:{base_port + i}" for i in range(brokers))
    props = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
             "ssl.ca.location": str(ca.cert.resolve()), "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.username": SECURE_ADMIN, "sasl.password": admin_pw}
    path = run / "client.properties"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in props.items()))
    path.chmod(0o600)
    click.echo(f"[kaas-cluster] client settings ({path}):", err=True)
    for k, v in props.items():
        click.echo(f"[kaas-cluster]   {k}={'<in ' + str(run / 'admin.password') + '>' if k == 'sasl.password' else v}",
                   err=True)
    extra = ["--inter-broker-listener-name", "SASL_SSL", "--ssl-certfile", str(cert.cert.resolve()),
             "--ssl-keyfile", str(cert.key.resolve()), "--ssl-cafile", str(ca.cert.resolve()),
             "--inter-broker-sasl-username", SECURE_BROKER,
             "--inter-broker-sasl-password-file", str(broker_pw_file.resolve()),
             "--authorizer", "--super-users", f"User:{SECURE_ADMIN};User:{SECURE_BROKER}"]
    return f"SASL_SSL://{host}:{base_port}", extra


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="kaas")


if __name__ == "__main__":
    main()
