"""Wire-protocol plumbing shared by ``kaas topics``, ``kaas groups`` and ``kaas txn``:
bootstrap, a pool of connections per broker, metadata, coordinator look-up, retries of
retriable errors. Requests are kio request objects (their class names the API and version)."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.types import TopicName
from kio.static.primitive import i8
from kio.static.protocol import RequestPayload

from kaas.client import SaslConfig, SaslFailed, WireClient, parse_properties

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

GROUP, TRANSACTION = 0, 1  # FindCoordinator key types

RETRIABLE = frozenset({
    ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator, ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.unknown_leader_epoch, ErrorCode.request_timed_out,
})


def code_name(code: int) -> str:
    """The Kafka name of an error code (``UNKNOWN_TOPIC_OR_PARTITION``)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"ERROR_{code}"


class RetriableError(Exception):
    """A retriable Kafka error: the caller's ``retry`` tries again until its deadline."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(f"{what}: {code_name(code)}")
        self.code = code


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for hp in bootstrap.split(","):
        hp = hp.strip()
        if not hp:
            continue
        host, _, port = hp.rpartition(":")
        if not host or not port.isdigit():
            raise click.BadParameter(f"{hp!r} is not HOST:PORT", param_hint="--bootstrap")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise click.BadParameter("no HOST:PORT given", param_hint="--bootstrap")
    return out


def read_client_properties(path: Path) -> dict[str, str]:
    """librdkafka-style client properties (``kaas.client.parse_properties``) of
    ``--command-config``.

    Raises:
        click.BadParameter: a line that is not ``key=value``.
    """
    try:
        return parse_properties(Path(path).read_text(), str(path))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--command-config") from None


PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def sasl_from_properties(props: dict[str, str]) -> SaslConfig | None:
    """The SASL settings of client properties (``security.protocol``, ``sasl.mechanism``,
    ``sasl.username``, ``sasl.password``); None for PLAINTEXT and SSL.

    Raises:
        click.BadParameter: an unknown protocol or a missing setting.
    """
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise click.BadParameter(f"security.protocol {protocol} is not one of {', '.join(PROTOCOLS)}",
                                 param_hint="--command-config")
    if not protocol.startswith("SASL_"):
        return None
    mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "")).upper()
    missing = [k for k, v in (("sasl.mechanism", mechanism), ("sasl.username", props.get("sasl.username")),
                              ("sasl.password", props.get("sasl.password"))) if not v]
    if missing:
        raise click.BadParameter(f"missing {', '.join(missing)}", param_hint="--command-config")
    return SaslConfig(mechanism, props["sasl.username"], props["sasl.password"])


def ssl_from_properties(props: dict[str, str]) -> ssl.SSLContext | None:
    """The TLS context of client properties: for security.protocol SSL or SASL_SSL, the
    brokers' certificates checked against ``ssl.ca.location`` (else the system's CAs) and
    their host names (unless ``ssl.endpoint.identification.algorithm`` is empty or none),
    with ``ssl.certificate.location``/``ssl.key.location`` as the client certificate;
    None for PLAINTEXT and SASL_PLAINTEXT.

    Raises:
        click.BadParameter: a file does not load.
    """
    if props.get("security.protocol", "PLAINTEXT").upper() not in ("SSL", "SASL_SSL"):
        return None
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=props.get("ssl.ca.location") or None)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if props.get("ssl.endpoint.identification.algorithm", "https").lower() in ("", "none"):
            ctx.check_hostname = False
        if props.get("ssl.certificate.location"):
            ctx.load_cert_chain(props["ssl.certificate.location"], props.get("ssl.key.location") or None,
                                props.get("ssl.key.password") or None)
    except (OSError, ssl.SSLError) as exc:
        raise click.BadParameter(f"TLS settings: {exc}", param_hint="--command-config") from None
    return ctx


class Cluster:
    """Connections to the brokers of one cluster, opened lazily and closed on exit.

    Args:
        bootstrap: ``HOST:PORT[,HOST:PORT...]``.
        timeout: socket timeout per request, seconds.
        sasl: authenticate every connection with these credentials.
        ssl_context: connect over TLS with this context (SSL/SASL_SSL listeners).
    """

    def __init__(self, bootstrap: str, timeout: float = 15.0, sasl: SaslConfig | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.timeout = timeout
        self.sasl = sasl
        self.ssl_context = ssl_context
        self._conns: dict[tuple[str, int], WireClient] = {}
        self.brokers: dict[int, tuple[str, int]] = {}
        self.controller_id = -1

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for wc in self._conns.values():
            try:
                wc.close()
            except OSError:
                pass
        self._conns.clear()

    def call_at(self, addr: tuple[str, int], req: RequestPayload) -> Any:
        """One request (a kio request object) to the broker at ``addr``; the kio response.
        A broken connection is reopened once.

        The response's class is the one of the request's key and version, known only when
        it is decoded: callers name it where they take the result (``r: XResponse = ...``)."""
        for attempt in (0, 1):
            wc = self._conns.get(addr)
            try:
                if wc is None:
                    wc = self._conns[addr] = WireClient(addr[0], addr[1], timeout=self.timeout, sasl=self.sasl,
                                                            ssl_context=self.ssl_context)
                return wc.call_entity(req)
            except SaslFailed as exc:
                raise click.ClickException(f"broker {addr[0]}:{addr[1]}: {exc}") from None
            except OSError as exc:
                bad = self._conns.pop(addr, None)
                if bad is not None:
                    bad.close()
                if attempt:
                    raise click.ClickException(f"broker {addr[0]}:{addr[1]}: {exc}") from None
        raise AssertionError("unreachable")

    def call(self, broker_id: int, req: RequestPayload) -> Any:
        if broker_id not in self.brokers:
            self.metadata([])
        if broker_id not in self.brokers:
            raise RetriableError(ErrorCode.leader_not_available, f"broker {broker_id} is not in the metadata")
        return self.call_at(self.brokers[broker_id], req)

    def call_any(self, req: RequestPayload) -> Any:
        """One request to the first bootstrap (or known) broker that answers."""
        last: click.ClickException | None = None
        for addr in list(dict.fromkeys([*self.brokers.values(), *self.bootstrap])):
            try:
                return self.call_at(addr, req)
            except click.ClickException as exc:
                last = exc
        raise click.ClickException(f"no broker answered: {last.message if last else 'none given'}")

    def call_controller(self, req: RequestPayload) -> Any:
        """One request to the controller the last Metadata named, else to any broker."""
        if self.controller_id in self.brokers:
            return self.call(self.controller_id, req)
        return self.call_any(req)

    def metadata(self, topics: list[str] | None) -> MetadataResponse:
        """Metadata v12 for ``topics`` (None: every topic; []: none), never auto-creating.
        Refreshes the broker list and the controller id."""
        md: MetadataResponse = self.call_any(MetadataRequest(
            topics=None if topics is None else tuple(MetadataRequestTopic(name=TopicName(t), topic_id=None)
                                                     for t in topics),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        self.brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        self.controller_id = md.controller_id
        return md

    def broker_ids(self) -> list[int]:
        if not self.brokers:
            self.metadata([])
        return sorted(self.brokers)

    def coordinator(self, key: str, key_type: int = GROUP) -> int:
        """The broker id coordinating ``key``, a group (``GROUP``) or a transactional id
        (``TRANSACTION``), by FindCoordinator v3.

        Raises:
            RetriableError: a retriable error code (for ``retry``).
            click.ClickException: any other error code.
        """
        r: FindCoordinatorResponse = self.call_any(FindCoordinatorRequest(key=key, key_type=i8(key_type)))
        if r.error_code != ErrorCode.none:
            if r.error_code in RETRIABLE:
                raise RetriableError(r.error_code, f"FindCoordinator({key})")
            raise click.ClickException(f"FindCoordinator({key}): {code_name(r.error_code)}")
        self.brokers[r.node_id] = (r.host, r.port)
        return r.node_id

    def group_coordinator(self, group: str) -> int:
        """The broker id coordinating ``group``."""
        return self.coordinator(group, GROUP)


def retry(fn: Callable[[], T], timeout: float = 15.0) -> T:
    """Call ``fn`` until it stops raising ``RetriableError`` or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except RetriableError as exc:
            if time.monotonic() > deadline:
                raise click.ClickException(str(exc)) from None
            time.sleep(0.2)


def bootstrap_option(f: F) -> F:
    return click.option("--bootstrap", "--bootstrap-server", "bootstrap", required=True,
                        envvar="KAAS_BOOTSTRAP", help="HOST:PORT[,HOST:PORT...] of any broker(s).")(f)


def command_config_option(f: F) -> F:
    return click.option("--command-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                        default=None, envvar="KAAS_COMMAND_CONFIG",
                        help="Client properties (key=value, as librdkafka's): security.protocol (PLAINTEXT, SSL, "
                             "SASL_PLAINTEXT, SASL_SSL), ssl.ca.location, sasl.mechanism (PLAIN, SCRAM-SHA-256, "
                             "SCRAM-SHA-512), sasl.username, sasl.password; e.g. DATA/run/client.properties "
                             "of kaas cluster --secure.")(f)


def open_cluster(bootstrap: str, command_config: Path | None) -> Cluster:
    """A ``Cluster`` with the security settings of ``command_config`` (None: PLAINTEXT)."""
    if command_config is None:
        return Cluster(bootstrap)
    props = read_client_properties(command_config)
    return Cluster(bootstrap, sasl=sasl_from_properties(props), ssl_context=ssl_from_properties(props))


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout, for scripts.")(f)
