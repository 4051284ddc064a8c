"""Listeners as Apache Kafka configures them (``listeners``, ``advertised.listeners``,
``listener.security.protocol.map``, ``inter.broker.listener.name``, and the
listener-prefixed ``listener.name.<listener>.<key>`` settings): parsing and checks.

A leaf utility (stdlib only): ``kaas.cli`` and ``cluster.supervisor`` parse the options
with it, ``Settings`` holds its ``Listener`` entries.

Invariants:
    - names are upper-cased (Apache's ``ListenerName.normalised``) and unique, and so are
      the bound (host, port) pairs;
    - every listener has a security protocol from the map;
    - every advertised listener is a listener, and none advertises 0.0.0.0 or ::;
    - the inter-broker listener is advertised;
    - a listener's own ``ssl_client_auth`` is set only on a TLS listener, its own
      ``sasl_enabled_mechanisms`` (never empty) only on a SASL listener; None means the
      broker-wide option.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
_WILDCARD = ("", "0.0.0.0", "::")
CLIENT_AUTH_MODES = ("none", "requested", "required")  # ssl.client.auth
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")  # what kaas serves

# Apache's listener-prefixed configs (KIP-103): ``listener.name.<listener, lower case>.<key>``.
# Only the keys kaas honours per listener are accepted; any other is refused, never
# accepted and ignored.
LISTENER_PREFIX = "listener.name."
LISTENER_KEYS = {"ssl.client.auth": "ssl_client_auth", "sasl.enabled.mechanisms": "sasl_enabled_mechanisms"}

# Apache's EndPoint regex: NAME://host:port, the host possibly empty or a [v6 literal]
_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


class ListenerError(ValueError):
    """A listener option that Apache Kafka would refuse as well; the message says why."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One ``NAME://host:port`` entry."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener of a broker: where it binds, what it tells clients, its protocol.

    ``advertised`` is False for a listener left out of ``advertised.listeners`` (it
    accepts connections, but Metadata never names it)."""

    name: str
    host: str
    port: int
    protocol: str = "PLAINTEXT"
    advertised_host: str = "127.0.0.1"
    advertised_port: int = 9092
    advertised: bool = True
    # its own settings (``--listener-config``); None: the broker-wide option
    ssl_client_auth: str | None = None  # listener.name.<l>.ssl.client.auth
    sasl_enabled_mechanisms: tuple[str, ...] | None = None  # listener.name.<l>.sasl.enabled.mechanisms

    @property
    def config_prefix(self) -> str:
        """``listener.name.<name in lower case>.``: Apache's ``ListenerName.configPrefix``."""
        return f"{LISTENER_PREFIX}{self.name.lower()}."

    @property
    def tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS


def parse_endpoints(value: str, option: str = "listeners") -> list[Endpoint]:
    """``PLAINTEXT://127.0.0.1:9092,SSL://:9093`` -> endpoints, in order.

    Raises:
        ListenerError: an entry is not NAME://host:port, or a name repeats.
    """
    out: list[Endpoint] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        m = _ENDPOINT.match(entry)
        if m is None:
            raise ListenerError(f"{option}: unable to parse {entry!r} to a broker endpoint (NAME://host:port)")
        name, host, port = m.group(1).strip().upper(), m.group(2), int(m.group(3))
        if not name or not re.fullmatch(r"[A-Z0-9_.\-]+", name):
            raise ListenerError(f"{option}: bad listener name {m.group(1)!r}")
        if not 0 <= port <= 65535:
            raise ListenerError(f"{option}: port {port} of {name} is out of range")
        if any(e.name == name for e in out):
            raise ListenerError(f"{option}: each listener must have a different name, {name} repeats")
        out.append(Endpoint(name, host, port))
    return out


def parse_protocol_map(value: str | None) -> dict[str, str]:
    """``INTERNAL:SSL,EXTERNAL:SASL_SSL`` -> {name: protocol}. None or empty: the default map
    (each protocol's name maps to itself); a map given replaces it, as in Apache.

    Raises:
        ListenerError: an entry is not NAME:PROTOCOL, the protocol is unknown, or a name repeats.
    """
    out: dict[str, str] = {}
    for raw in (value or DEFAULT_PROTOCOL_MAP).split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, proto = entry.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not name or not proto:
            raise ListenerError(f"listener-security-protocol-map: {entry!r} is not NAME:PROTOCOL")
        if proto not in PROTOCOLS:
            raise ListenerError(f"listener-security-protocol-map: unknown security protocol {proto!r} "
                                f"(one of {', '.join(PROTOCOLS)})")
        if name in out:
            raise ListenerError(f"listener-security-protocol-map: {name} is mapped twice")
        out[name] = proto
    return out


def parse_mechanisms(value: str) -> tuple[str, ...]:
    """``scram-sha-512, PLAIN`` -> ("SCRAM-SHA-512", "PLAIN"): upper-cased, in order
    (``sasl.enabled.mechanisms``).

    Raises:
        ListenerError: a mechanism kaas does not serve.
    """
    out = tuple(m.strip().upper() for m in value.split(",") if m.strip())
    unknown = [m for m in out if m not in SASL_MECHANISMS]
    if unknown:
        raise ListenerError(f"unknown mechanisms {', '.join(unknown)} (one of {', '.join(SASL_MECHANISMS)})")
    return out


def _split_listener_config(item: str, names: list[str]) -> tuple[str, str, str, str]:
    """``listener.name.internal.ssl.client.auth=required`` -> (the key as given, "INTERNAL",
    "ssl.client.auth", "required"). The listener part matches case-insensitively (Apache
    upper-cases names; a name may hold dots, so the key is found at the end).

    Raises:
        ListenerError: not KEY=VALUE under ``listener.name.``, or a key kaas does not
            honour per listener.
    """
    full, sep, value = item.partition("=")
    full, value = full.strip(), value.strip()
    if not sep or not full.startswith(LISTENER_PREFIX):
        raise ListenerError(f"{item!r} is not {LISTENER_PREFIX}<listener>.<key>=<value>")
    rest = full[len(LISTENER_PREFIX):]
    for key in LISTENER_KEYS:
        if rest.endswith("." + key) and len(rest) > len(key) + 1:
            return full, rest[: -len(key) - 1].upper(), key, value
    honoured = ", ".join(LISTENER_KEYS)
    for name in sorted(names, key=len, reverse=True):
        if rest.upper().startswith(name + ".") and len(rest) > len(name) + 1:
            raise ListenerError(f"{full}: kaas does not take {rest[len(name) + 1:]!r} per listener "
                                f"(only {honoured})")
    raise ListenerError(f"{full}: neither a listener of this broker ({', '.join(names)}) nor a per-listener "
                        f"key kaas takes ({honoured})")


def apply_listener_configs(listeners: tuple[Listener, ...], items: list[str] | tuple[str, ...]
                           ) -> tuple[Listener, ...]:
    """Set the listener-prefixed settings (``--listener-config``) on the listeners they name.

    Args:
        listeners: the broker's listeners (``resolve``).
        items: ``listener.name.<listener>.<key>=<value>`` entries, ``<key>`` one of
            ``LISTENER_KEYS``: ``ssl.client.auth`` (``none``, ``requested``, ``required``;
            on SSL and SASL_SSL listeners) and ``sasl.enabled.mechanisms`` (a non-empty
            comma-separated list; on SASL_PLAINTEXT and SASL_SSL listeners).

    Returns:
        the listeners in the same order, each with its own settings.

    Raises:
        ListenerError: an entry does not parse, names no listener of this broker, a key kaas
            does not honour per listener or one the listener's protocol has no use for, a
            bad value, or a key given twice for one listener.
    """
    by_name = {x.name: x for x in listeners}
    auth: dict[str, str] = {}  # ssl_client_auth by listener name
    mechanisms: dict[str, tuple[str, ...]] = {}  # sasl_enabled_mechanisms by listener name
    for item in items:
        full, name, key, value = _split_listener_config(item, list(by_name))
        entry = by_name.get(name)
        if entry is None:
            raise ListenerError(f"{full}: no listener {name} (the listeners: {', '.join(by_name)})")
        if key == "ssl.client.auth":
            if not entry.tls:
                raise ListenerError(f"{full}: the protocol of {name} is {entry.protocol}; ssl.client.auth applies to "
                                    "SSL and SASL_SSL listeners")
            mode = value.lower()
            if mode not in CLIENT_AUTH_MODES:
                raise ListenerError(f"{full}={value}: one of {', '.join(CLIENT_AUTH_MODES)}")
            if name in auth:
                raise ListenerError(f"{full} is given twice")
            auth[name] = mode
        else:
            if not entry.sasl:
                raise ListenerError(f"{full}: the protocol of {name} is {entry.protocol}; sasl.enabled.mechanisms "
                                    "applies to SASL_PLAINTEXT and SASL_SSL listeners")
            try:
                parsed = parse_mechanisms(value)
            except ListenerError as exc:
                raise ListenerError(f"{full}: {exc}") from None
            if not parsed:
                raise ListenerError(f"{full}: empty; a SASL listener needs at least one mechanism")
            if name in mechanisms:
                raise ListenerError(f"{full} is given twice")
            mechanisms[name] = parsed
    return tuple(replace(x, ssl_client_auth=auth.get(x.name, x.ssl_client_auth),
                         sasl_enabled_mechanisms=mechanisms.get(x.name, x.sasl_enabled_mechanisms))
                 if x.name in auth or x.name in mechanisms else x for x in listeners)


def _advertisable(host: str) -> str:
    """The address a wildcard bind is advertised as (kaas's rule: loopback, where Apache
    takes the canonical host name)."""
    return "127.0.0.1" if host in _WILDCARD else host


def resolve(listeners: str, advertised: str | None = None, protocol_map: str | None = None,
            inter_broker: str | None = None) -> tuple[tuple[Listener, ...], str]:
    """Check the four options together, as Apache's KafkaConfig does.

    Args:
        listeners: the ``listeners`` value.
        advertised: ``advertised.listeners``; None or empty: the listeners themselves (a
            wildcard host advertised as 127.0.0.1).
        protocol_map: ``listener.security.protocol.map``; None: the default map.
        inter_broker: ``inter.broker.listener.name``; None: ``PLAINTEXT`` (Apache's
            ``security.inter.broker.protocol`` default), which must then exist.

    Returns:
        the listeners in the given order, and the inter-broker listener's name.

    Raises:
        ListenerError: the options contradict each other; the message names the rule.
    """
    bound = parse_endpoints(listeners, "listeners")
    if not bound:
        raise ListenerError("listeners: at least one listener is needed")
    protos = parse_protocol_map(protocol_map)
    seen: dict[tuple[str, int], str] = {}
    for e in bound:
        if e.name not in protos:
            raise ListenerError(f"no security protocol defined for listener {e.name} "
                                f"(listener-security-protocol-map: {','.join(f'{k}:{v}' for k, v in protos.items())})")
        key = (e.host, e.port)
        if e.port and key in seen:
            raise ListenerError(f"listeners: {seen[key]} and {e.name} both bind {e}")
        seen[key] = e.name
    if advertised:
        adv = {e.name: e for e in parse_endpoints(advertised, "advertised-listeners")}
        unknown = sorted(set(adv) - {e.name for e in bound})
        if unknown:
            raise ListenerError(f"advertised-listeners: {', '.join(unknown)} not among the listeners "
                                f"({', '.join(e.name for e in bound)}); advertised listener names must be "
                                "equal to or a subset of the ones defined in listeners")
        for e in adv.values():
            if e.host in ("0.0.0.0", "::"):
                raise ListenerError(f"advertised-listeners cannot use the nonroutable meta-address {e.host} ({e})")
    else:
        adv = {e.name: Endpoint(e.name, _advertisable(e.host), e.port) for e in bound}
    out = []
    for e in bound:
        a = adv.get(e.name)
        out.append(Listener(e.name, e.host, e.port, protos[e.name],
                            (a.host or "127.0.0.1") if a else _advertisable(e.host),
                            a.port if a else e.port, a is not None))
    ib = (inter_broker or "PLAINTEXT").strip().upper()
    if ib not in adv:
        raise ListenerError(f"inter-broker-listener-name must be a listener name defined in advertised-listeners; "
                            f"{ib} is not (the valid options: {', '.join(sorted(adv))})")
    return tuple(out), ib


def shift_ports(value: str, offset: int) -> str:
    """The same listener list with every port moved by ``offset`` (port 0 stays 0): how
    ``kaas cluster`` derives broker i's listeners from broker 0's.

    Raises:
        ListenerError: an entry does not parse.
    """
    return ",".join(str(Endpoint(e.name, e.host, e.port + offset if e.port else 0))
                    for e in parse_endpoints(value))


def single(host: str, port: int, advertised_host: str, advertised_port: int) -> Listener:
    """The one PLAINTEXT listener of ``--listen``/``--advertise`` (and of a ``Settings``
    made without listeners)."""
    return Listener("PLAINTEXT", host, port, "PLAINTEXT", advertised_host, advertised_port)
