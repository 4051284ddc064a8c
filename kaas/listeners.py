"""Listeners as Apache Kafka configures them (``listeners``, ``advertised.listeners``,
``listener.security.protocol.map``, ``inter.broker.listener.name``): parsing and checks.

A leaf utility (stdlib only): ``kaas.cli`` and ``cluster.supervisor`` parse the options
with it, ``Settings`` holds its ``Listener`` entries.

Invariants:
    - names are upper-cased (Apache's ``ListenerName.normalised``) and unique, and so are
      the bound (host, port) pairs;
    - every listener has a security protocol from the map;
    - every advertised listener is a listener, and none advertises 0.0.0.0 or ::;
    - the inter-broker listener is advertised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
_WILDCARD = ("", "0.0.0.0", "::")

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
