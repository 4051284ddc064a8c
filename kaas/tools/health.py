"""``kaas health``: is one broker up? An ApiVersions request to it, exit 0 when it answers
without error, 1 otherwise. The container image's health check and the Kubernetes
readiness and liveness probes run it against their own broker (``127.0.0.1:9092``).

ApiVersions is answered before authentication (clients send it first on every
connection), so on a SASL listener the probe needs no credentials, only the TLS settings
of a SASL_SSL or SSL listener (``--command-config``: ``security.protocol``,
``ssl.ca.location``); ``sasl.*`` properties are ignored.
"""

from __future__ import annotations

from pathlib import Path

import click

from kaas.client import WireClient
from kaas.tools._wire import command_config_option, parse_bootstrap, read_client_properties, ssl_from_properties


@click.command("health")
@click.option("--bootstrap", "--bootstrap-server", "bootstrap", default="127.0.0.1:9092", show_default=True,
              envvar="KAAS_HEALTH_BOOTSTRAP", help="HOST:PORT of the broker to probe (the first, if several).")
@command_config_option
@click.option("--timeout", type=float, default=3.0, show_default=True, help="Seconds for the connection and answer.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing; the exit status says it.")
def health(bootstrap: str, command_config: Path | None, timeout: float, quiet: bool) -> None:
    """Exit 0 when the broker answers ApiVersions, 1 when it does not (refused, timed out,
    a TLS failure, an error code)."""
    host, port = parse_bootstrap(bootstrap)[0]
    ctx = ssl_from_properties(read_client_properties(command_config)) if command_config else None
    try:
        with WireClient(host, port, timeout=timeout, ssl_context=ctx) as wc:
            r = wc.call(18, 3, {"client_software_name": "kaas-health", "client_software_version": "1"})
        code = int(r.error_code)
    except (OSError, ValueError) as exc:
        if not quiet:
            click.echo(f"{host}:{port}: not healthy: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(1) from None
    if code != 0:
        if not quiet:
            click.echo(f"{host}:{port}: not healthy: ApiVersions error {code}", err=True)
        raise SystemExit(1)
    if not quiet:
        click.echo(f"{host}:{port}: ok ({len(r.api_keys)} APIs)")
