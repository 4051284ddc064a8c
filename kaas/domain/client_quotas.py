"""Client quotas (KIP-546 admin API, KIP-55 precedence): entities, the quota keys Apache 4.4
takes for each, AlterClientQuotas' validation, DescribeClientQuotas' filter, and the
effective quota of a connection (``effective``), with Apache's messages.

An *entity* is a set of (type, name) pairs, at most one per type: ``user``, ``client-id``
(alone or together) or ``ip`` (alone); a name of None is the type's *default* entity.
User and client-id entities take ``producer_byte_rate``, ``consumer_byte_rate`` (LONG),
``request_percentage`` and ``controller_mutation_rate`` (DOUBLE); an ip entity takes
``connection_creation_rate`` (INT).

Pure: no I/O (an ip name that is not an address literal is checked by the caller's
``resolvable``). ``storage.client_quotas`` is the file.

Invariants:
    - ``alter_entry`` never returns a quota Apache would refuse: a known key of the
      entity's kind, a finite value > 0, integral and in range for LONG and INT keys;
    - ``effective`` follows KIP-55's order for each key separately: the most specific
      entity that sets the key wins; ``quota_for_tags(metric_tags(...))``, Apache's own
      two-step lookup that enforcement uses, gives the same quota for any non-empty
      user and client id.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["CLIENT_ID", "IP", "USER", "Entity", "Op", "Quotas", "Refusal", "alter_entry", "check_stored",
           "describe", "effective", "entity_text", "metric_tags", "parse_entity", "quota_for_tags", "user_name"]

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
EXACT, DEFAULT, SPECIFIED = 0, 1, 2  # DescribeClientQuotas' match types

LONG, INT, DOUBLE = "LONG", "INT", "DOUBLE"
CLIENT_KEYS = {"producer_byte_rate": LONG, "consumer_byte_rate": LONG, "request_percentage": DOUBLE,
               "controller_mutation_rate": DOUBLE}
IP_KEYS = {"connection_creation_rate": INT}
_LIMITS = {LONG: (2**63 - 1, "a LONG"), INT: (2**31 - 1, "an INT")}

Entity = tuple[tuple[str, str | None], ...]
"""(type, name) pairs sorted by type; name None: the default entity of the type."""
Quotas = Mapping[Entity, Mapping[str, float]]


@dataclass(frozen=True, slots=True)
class Op:
    """One op of an AlterClientQuotas entry: set ``key`` to ``value``, or remove it."""

    key: str
    value: float
    remove: bool = False


@dataclass(frozen=True, slots=True)
class Refusal:
    """Apache's error (a kio ErrorCode name) and message."""

    error: str
    message: str


def _invalid(message: str) -> Refusal:
    return Refusal("invalid_request", message)


def entity_text(entity: Entity) -> str:
    """Apache's ClientQuotaEntity text: ``ClientQuotaEntity(entries={client-id=c, user=u})``."""
    inner = ", ".join(f"{t}={'null' if n is None else n}" for t, n in entity)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def parse_entity(pairs: Sequence[tuple[str, str | None]], resolvable: Callable[[str], bool]) -> Entity | Refusal:
    """An AlterClientQuotas entity, checked as Apache checks it (a later pair of a type
    replaces an earlier one, as in Apache).

    Args:
        pairs: the request's (type, name) pairs in its order.
        resolvable: whether an ip name that is no address literal resolves as a host.
    """
    if not pairs:
        return _invalid("Invalid empty client quota entity")
    names: dict[str, str | None] = {}
    for etype, name in pairs:
        if etype not in ENTITY_TYPES:
            return _invalid(f"Unhandled client quota entity type: {etype}")
        if name == "":
            return _invalid(f"Empty {etype} not supported")
        names[etype] = name
    if IP in names:
        if len(names) > 1:
            return _invalid("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
        ip = names[IP]
        if ip is not None and not is_ip_literal(ip) and not resolvable(ip):
            return _invalid(f"{ip} is not a valid IP or resolvable host.")
    return tuple(sorted(names.items()))


def _check_value(key: str, kind: str, value: float) -> str | None:
    if not math.isfinite(value):
        return f"Quota {key} must be a finite number"
    if kind in _LIMITS:
        limit, what = _LIMITS[kind]
        if value > limit:
            return f"Proposed value for {key} is too large for {what}."
        if value != math.floor(value):
            return f"{key} cannot be a fractional value."
    if value <= 0:
        return f"Quota {key} must be greater than 0"
    return None


def keys_of(entity: Entity) -> dict[str, str]:
    """The quota keys (and their types) an entity takes."""
    return IP_KEYS if any(t == IP for t, _ in entity) else CLIENT_KEYS


def alter_entry(old: Mapping[str, float], entity: Entity, ops: Sequence[Op]) -> dict[str, float] | Refusal:
    """The entity's quotas after ``ops`` (an empty dict: the entity has none left), or the
    refusal: a key given twice, an unknown key, a bad value. A removal is not checked
    (Apache removes any key, known or not)."""
    seen: set[str] = set()
    for op in ops:
        if op.key in seen:
            return _invalid(f"Ignoring duplicate entity {entity_text(entity)}")
        seen.add(op.key)
    keys = keys_of(entity)
    new = dict(old)
    for op in ops:
        if op.remove:
            new.pop(op.key, None)
            continue
        kind = keys.get(op.key)
        if kind is None:
            return _invalid(f"Invalid configuration key {op.key}")
        why = _check_value(op.key, kind, op.value)
        if why is not None:
            return _invalid(why)
        new[op.key] = float(op.value)
    return new


def check_stored(entity: Entity, quotas: Mapping[str, float]) -> str | None:
    """Why a stored entry could not have been written by ``alter_entry``, or None."""
    types = [t for t, _ in entity]
    if not entity or len(set(types)) != len(types) or any(t not in ENTITY_TYPES or n == "" for t, n in entity):
        return f"bad entity {entity!r}"
    if IP in types and len(types) > 1:
        return "ip combined with user or client-id"
    if not quotas:
        return "no quotas"
    keys = keys_of(entity)
    for key, value in quotas.items():
        if key not in keys:
            return f"unknown key {key}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{key}: not a number"
        why = _check_value(key, keys[key], float(value))
        if why is not None:
            return why
    return None


def _filter(components: Sequence[tuple[str, int, str | None]]) -> tuple[dict[str, str | None], set[str]] | Refusal:
    """(exact matches: type -> name or None for default, types that must be present)."""
    exact: dict[str, str | None] = {}
    present: set[str] = set()
    for etype, match_type, match in components:
        if etype == "":
            return _invalid("Invalid empty entity type.")
        if etype in exact or etype in present:
            return _invalid(f"Entity type {etype} cannot appear more than once in the filter.")
        if etype not in ENTITY_TYPES:
            return Refusal("unsupported_version", f"Unsupported entity type {etype}")
        if match_type == EXACT:
            if match is None:
                return _invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[etype] = match
        elif match_type == DEFAULT:
            if match is not None:
                return _invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[etype] = None
        elif match_type == SPECIFIED:
            if match is not None:
                return _invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            present.add(etype)
        else:
            return _invalid(f"Unknown match type {match_type}")
    named = set(exact) | present
    if IP in named and named & {USER, CLIENT_ID}:
        return _invalid("Invalid entity filter component combination. IP filter component should not be used "
                        "with user or clientId filter component.")
    return exact, present


def describe(quotas: Quotas, components: Sequence[tuple[str, int, str | None]],
             strict: bool) -> list[tuple[Entity, dict[str, float]]] | Refusal:
    """DescribeClientQuotas: the entities matching every component (and, ``strict``, no
    other type), sorted, with their quotas; or the refusal of a bad filter.

    Args:
        components: (entity type, match type: 0 exact, 1 default, 2 any, match string).
    """
    f = _filter(components)
    if isinstance(f, Refusal):
        return f
    exact, present = f
    out = []
    for entity, values in quotas.items():
        names = dict(entity)
        if strict and len(names) != len(exact) + len(present):
            continue
        if all(t in names and names[t] == n for t, n in exact.items()) and all(t in names for t in present):
            out.append((entity, dict(values)))
    return sorted(out, key=lambda e: [(t, n is not None, n or "") for t, n in e[0]])


def _precedence(user: str, client_id: str) -> Iterable[Entity]:
    """KIP-55's order, most specific first."""
    yield ((CLIENT_ID, client_id), (USER, user))
    yield ((CLIENT_ID, None), (USER, user))
    yield ((USER, user),)
    yield ((CLIENT_ID, client_id), (USER, None))
    yield ((CLIENT_ID, None), (USER, None))
    yield ((USER, None),)
    yield ((CLIENT_ID, client_id),)
    yield ((CLIENT_ID, None),)


def effective(quotas: Quotas, key: str, *, user: str = "", client_id: str = "",
              ip: str | None = None) -> tuple[float, Entity] | None:
    """The quota ``key`` a connection runs under, and the entity that sets it; None when
    no entity sets it (unlimited).

    Args:
        key: a quota key (``producer_byte_rate`` ... or ``connection_creation_rate``).
        user: the connection's principal name (KafkaPrincipal's name).
        client_id: the request's client id.
        ip: the connection's address (``connection_creation_rate`` only).
    """
    order: Iterable[Entity]
    if key in IP_KEYS:
        order = (((IP, ip),), ((IP, None),)) if ip is not None else (((IP, None),),)
    else:
        order = _precedence(user, client_id)
    for entity in order:
        got = quotas.get(entity)
        if got is not None and key in got:
            return got[key], entity
    return None


def _shape(entity: Entity) -> str:
    types = {t for t, _ in entity}
    return "uc" if types == {USER, CLIENT_ID} else "u" if types == {USER} else "c" if types == {CLIENT_ID} else "ip"


def metric_tags(quotas: Quotas, key: str, *, user: str, client_id: str) -> tuple[str, str]:
    """The (user, client-id) a connection's usage of quota ``key`` is counted under:
    Apache's ``quotaMetricTags``. Every connection with the same tags shares one window
    (a user quota: all that user's client ids; a default client-id quota: each client id
    its own); a part that the resolved quota does not name is "".

    With quotas of one kind only (client-id, user, or user and client-id together) the
    tags are that kind's; otherwise the walk of KIP-55's levels decides, as Apache's.
    """
    having = [e for e, q in quotas.items() if key in q]
    shapes = {_shape(e) for e in having} - {"ip"}
    if not shapes or shapes == {"c"}:
        return "", client_id
    if shapes == {"u"}:
        return user, ""
    if shapes == {"uc"}:
        return user, client_id
    present = set(having)
    levels = (
        (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
        (((CLIENT_ID, None), (USER, user)), (user, client_id)),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
        (((CLIENT_ID, None), (USER, None)), (user, client_id)),
        (((USER, None),), (user, "")),
    )
    for entity, tags in levels:
        if entity in present:
            return tags
    return "", client_id


def quota_for_tags(quotas: Quotas, key: str, user_tag: str, client_tag: str) -> float | None:
    """The quota ``key`` of a window's tags (Apache's ``quotaLimit``): the most specific
    entity of the tags' kind that sets it, falling back to that kind's defaults; None:
    unlimited."""
    if user_tag and client_tag:
        order: tuple[Entity, ...] = (((CLIENT_ID, client_tag), (USER, user_tag)), ((CLIENT_ID, None), (USER, user_tag)),
                                     ((CLIENT_ID, client_tag), (USER, None)), ((CLIENT_ID, None), (USER, None)))
    elif user_tag:
        order = (((USER, user_tag),), ((USER, None),))
    elif client_tag:
        order = (((CLIENT_ID, client_tag),), ((CLIENT_ID, None),))
    else:
        return None
    for entity in order:
        got = quotas.get(entity)
        if got is not None and key in got:
            return got[key]
    return None


def user_name(principal: str) -> str:
    """A principal's name (``User:alice`` -> ``alice``), as quota user entities name it."""
    return principal.split(":", 1)[1] if ":" in principal else principal
