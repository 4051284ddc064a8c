"""The one ``kaas`` command: ``kaas broker``, ``kaas cluster`` and the tools."""

from __future__ import annotations

from pathlib import Path

import click


def _hostport(value: str, default_port: int = 9092) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host:
        return value or "127.0.0.1", default_port
    return host.strip("[]"), int(port)


def _without_test_libraries() -> None:
    """Keep hypothesis (and, through its trio hooks, pytest) out of a broker process.

    kio registers hypothesis strategies for its field types whenever hypothesis is
    importable. In a development or CI venv that put hypothesis, trio.testing and pytest
    into every broker: about 220 more modules, 17 MiB more RSS per broker and 0.2 s more
    at start (which a restart after a crash waits for). A broker never draws examples, so
    the import is made to fail (``sys.modules[name] = None``), only when nothing has
    imported hypothesis or kio yet (an in-process caller keeps what it has)."""
    import sys

    if "hypothesis" not in sys.modules and "kio" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]


class _LazyGroup(click.Group):
    """The tool commands (``txn``, ``topics``, ``groups``, ``acls``, ``inspect``, ``users``) are imported only when
    one of them runs or help lists them, so ``kaas broker`` starts without their imports."""

    LAZY = {
        "txn": "kaas.tools.txn:txn",
        "acls": "kaas.tools.acls:acls",
        "topics": "kaas.tools.topics:topics",
        "groups": "kaas.tools.groups:groups",
        "inspect": "kaas.tools.inspect_data:inspect",
        "users": "kaas.tools.users:users",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.LAZY))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.LAZY and cmd_name not in self.commands:
            import importlib

            module, _, attr = self.LAZY[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"auto_envvar_prefix": "KAAS", "help_option_names": ["-h", "--help"]})
def cli() -> None:
    """kaas: a Kafka-wire-compatible broker cluster on a shared data directory."""


@cli.command()
@click.option("--id", "broker_id", type=int, default=0, show_default=True, help="Broker id (ordinal).")
@click.option("--data", type=click.Path(path_type=Path), default=Path("./data"), show_default=True,
              help="Shared data directory.")
@click.option("--listen", default="127.0.0.1:9092", show_default=True, help="HOST:PORT to listen on.")
@click.option("--advertise", default=None, help="HOST:PORT clients should use (default: --listen).")
@click.option("--auto-create-topics/--no-auto-create-topics", default=True, show_default=True,
              help="Create unknown topics on Metadata/Produce (auto.create.topics.enable).")
@click.option("--num-partitions", type=int, default=1, show_default=True,
              help="Partitions of an auto-created topic (num.partitions).")
@click.option("--segment-bytes", type=int, default=128 * 1024 * 1024, show_default=True,
              help="Roll a new log segment at this size (segment.bytes).")
@click.option("--retention-ms", type=int, default=7 * 24 * 3600 * 1000, show_default=True,
              help="Delete closed segments older than this (retention.ms; -1 = forever).")
@click.option("--retention-bytes", type=int, default=-1, show_default=True,
              help="Delete old segments beyond this partition size (retention.bytes; -1 = no limit).")
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
@click.option("--session-timeout-ms", type=int, default=3000, show_default=True,
              help="Broker liveness timeout on the shared volume.")
@click.option("--transaction-max-timeout-ms", type=int, default=15 * 60 * 1000, show_default=True,
              help="Largest transaction.timeout.ms a producer may ask for.")
@click.option("--producer-id-expiration-ms", type=int, default=24 * 3600 * 1000, show_default=True,
              help="Forget idle producers' idempotence state after this (producer.id.expiration.ms).")
@click.option("--group-initial-rebalance-delay-ms", type=int, default=3000, show_default=True,
              help="Wait for more members before the first rebalance of an empty group.")
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
@click.option("--listeners", default=None,
              help="Kafka-style NAME://HOST:PORT[,...] to listen on, NAME being PLAINTEXT or SASL_PLAINTEXT "
                   "(listeners); replaces --listen, the first one is advertised.")
@click.option("--sasl-enabled-mechanisms", default="SCRAM-SHA-256,SCRAM-SHA-512", show_default=True,
              help="SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
                   "(sasl.enabled.mechanisms).")
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
@click.option("--log-json", is_flag=True, help="JSON log lines instead of key-value console output.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]), help="Lowest level logged.")
def broker(broker_id, data, listen, advertise, log_json, log_level, listeners, sasl_enabled_mechanisms,
           **opts) -> None:
    """Run one broker process."""
    _without_test_libraries()
    import trio

    from kaas import allocator, log
    from kaas.net.server import serve_broker
    from kaas.settings import Settings, parse_listeners

    parsed = ()
    if listeners:
        try:
            parsed = parse_listeners(listeners)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--listeners") from None
        listen = f"{parsed[0].host}:{parsed[0].port}"
    mechanisms = tuple(m.strip().upper() for m in sasl_enabled_mechanisms.split(",") if m.strip())
    unknown = set(mechanisms) - {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"}
    if unknown:
        raise click.BadParameter(f"unknown mechanisms {sorted(unknown)}", param_hint="--sasl-enabled-mechanisms")
    if "OAUTHBEARER" in mechanisms:
        missing = [f"--sasl-oauthbearer-{k.replace('_', '-')}" for k in ("jwks_file", "expected_issuer",
                                                                         "expected_audience")
                   if not opts[f"sasl_oauthbearer_{k}"]]
        if missing:
            raise click.BadParameter(f"OAUTHBEARER needs {', '.join(missing)}", param_hint="--sasl-enabled-mechanisms")
    opts.update(listeners=parsed, sasl_enabled_mechanisms=mechanisms)
    lhost, lport = _hostport(listen)
    default_host = lhost if lhost not in ("0.0.0.0", "::") else "127.0.0.1"
    ahost, aport = _hostport(advertise) if advertise else (default_host, lport)
    settings = Settings(
        broker_id=broker_id, data=data, listen_host=lhost, listen_port=lport,
        advertise_host=ahost, advertise_port=aport, log_json=log_json, log_level=log_level,
        auto_create_topics=opts.pop("auto_create_topics"), **opts,
    )
    log.configure(json=log_json, level=log_level, broker_id=broker_id)
    allocator.tune()
    trio.run(serve_broker, settings)


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
@click.argument("broker_args", nargs=-1, type=click.UNPROCESSED)
def cluster(brokers, data, base_port, host, first_id, restart_delay, metrics_base_port, broker_args) -> None:
    """Supervise N brokers over one data directory (extra args go to every broker)."""
    from cluster.supervisor import run_supervisor

    run_supervisor(brokers=brokers, data=data, base_port=base_port, host=host, first_id=first_id,
                   restart_delay=restart_delay, metrics_base_port=metrics_base_port,
                   broker_args=list(broker_args))


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="kaas")


if __name__ == "__main__":
    main()
