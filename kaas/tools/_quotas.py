"""The client-quota and SCRAM side of ``kaas configs`` (``--entity-type clients|users``), as
Apache's kafka-configs: DescribeClientQuotas and AlterClientQuotas for the quotas of a user,
a client id, their defaults and combinations; DescribeUserScramCredentials and
AlterUserScramCredentials for ``SCRAM-SHA-256=[password=...]`` configs of a user."""

from __future__ import annotations

import re
from dataclasses import dataclass

import click
from kio.schema.alter_client_quotas.v1 import request as alter_req
from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.alter_user_scram_credentials.v0.response import AlterUserScramCredentialsResponse
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.describe_client_quotas.v1.response import DescribeClientQuotasResponse
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.describe_user_scram_credentials.v0.response import DescribeUserScramCredentialsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i8, i32

from kaas.domain import scram
from kaas.tools._wire import Cluster, code_name

__all__ = ["Entity", "QUOTA_KEYS", "alter_quotas", "alter_scram", "describe_quotas", "describe_scram",
           "java_double", "quota_text"]

# Apache's QuotaConfig client and user quota names
QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage",
                        "controller_mutation_rate"})
IP_KEYS = frozenset({"connection_creation_rate"})
WIRE_TYPE = {"users": "user", "clients": "client-id", "ips": "ip"}
LABEL = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
ORDER = {"user": 0, "client-id": 1, "ip": 2}
EXACT, DEFAULT, ANY = 0, 1, 2  # DescribeClientQuotas match types
SCRAM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_NAMES = {v: k for k, v in SCRAM_CODES.items()}
DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True)
class Entity:
    """One part of a quota entity: its wire type (``user``, ``client-id``) and name (""
    for the type's default; None in a describe filter: any name)."""

    kind: str
    name: str | None


def java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` writes it (kafka-configs prints quotas so):
    ``262144.0``, ``1.0E7``, ``1.5E-4``: the shortest digits that read back the same."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    for places in range(17):
        text = f"{value:.{places}e}"
        if float(text) == value:
            break
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}E{int(exponent)}"


def quota_text(parts: list[Entity]) -> str:
    """Apache's name of a quota entity: ``user-principal 'alice', client-id 'c1'``, ``the
    default client-id``."""
    order = sorted(parts, key=lambda p: ORDER[p.kind])
    return ", ".join(f"the default {LABEL[p.kind]}" if not p.name else f"{LABEL[p.kind]} '{p.name}'"
                     for p in order)


def describe_quotas(c: Cluster, parts: list[Entity]) -> list[tuple[list[Entity], dict[str, float]]]:
    """The quota entities matching ``parts`` strictly (no other entity types), each with
    its quotas, sorted by entity."""
    comps = tuple(ComponentData(entity_type=p.kind, match_type=i8(ANY if p.name is None else
                                                                  DEFAULT if p.name == "" else EXACT),
                                match=p.name or None) for p in parts)
    r: DescribeClientQuotasResponse = c.call_any(DescribeClientQuotasRequest(components=comps, strict=True))
    if r.error_code != ErrorCode.none:
        raise click.ClickException(f"DescribeClientQuotas: {code_name(r.error_code)} {r.error_message or ''}")
    out = []
    for e in r.entries or ():
        ents = [Entity(d.entity_type, d.entity_name if d.entity_name is not None else "") for d in e.entity]
        out.append((ents, {v.key: float(v.value) for v in sorted(e.values, key=lambda v: v.key)}))
    out.sort(key=lambda x: [(p.kind, p.name or "") for p in x[0]])
    return out


def alter_quotas(c: Cluster, parts: list[Entity], add: dict[str, str], delete: list[str]) -> None:
    """Set ``add`` and remove ``delete`` on one quota entity (AlterClientQuotas), after
    Apache's checks: only quota keys, numeric values, deleted keys set now.

    Raises:
        click.ClickException: a check or the broker refused.
    """
    keys = IP_KEYS if parts[0].kind == "ip" else QUOTA_KEYS
    unknown = sorted((set(add) | set(delete)) - keys)
    if unknown:
        raise click.ClickException(f"Only {'connection ' if keys is IP_KEYS else ''}quota configs can be changed "
                                   f"for {quota_text(parts)}. "
                                   f"Unexpected config names: {','.join(unknown)}")
    values: dict[str, float] = {}
    for k, v in add.items():
        try:
            values[k] = float(v)
        except ValueError:
            raise click.ClickException(f"Cannot parse quota configuration value for {k}: {v}") from None
    now = describe_quotas(c, parts)
    current = now[0][1] if now else {}
    invalid = [k for k in delete if k not in current]
    if invalid:
        raise click.ClickException(f"Invalid config(s): {','.join(invalid)}")
    ops = tuple([alter_req.OpData(key=k, value=f64(v), remove=False) for k, v in values.items()]
                + [alter_req.OpData(key=k, value=f64(0.0), remove=True) for k in delete])
    entry = alter_req.EntryData(entity=tuple(alter_req.EntityData(entity_type=p.kind, entity_name=p.name or None)
                                             for p in parts), ops=ops)
    r: AlterClientQuotasResponse = c.call_controller(alter_req.AlterClientQuotasRequest(entries=(entry,),
                                                                                        validate_only=False))
    for e in r.entries:
        if e.error_code != ErrorCode.none:
            raise click.ClickException(f"AlterClientQuotas: {code_name(e.error_code)} {e.error_message or ''}")


def describe_scram(c: Cluster, users: list[str] | None) -> list[tuple[str, list[tuple[str, int]]]]:
    """(user, [(mechanism, iterations)]) of ``users`` (None: every user) with SCRAM
    credentials; a named user without any is left out, as Apache prints nothing for it."""
    r: DescribeUserScramCredentialsResponse = c.call_any(DescribeUserScramCredentialsRequest(
        users=None if users is None else tuple(UserName(name=u) for u in users)))
    if r.error_code not in (ErrorCode.none, ErrorCode.resource_not_found):
        raise click.ClickException(f"DescribeUserScramCredentials: {code_name(r.error_code)}")
    return [(x.user, [(SCRAM_NAMES.get(int(i.mechanism), f"UNKNOWN_{i.mechanism}"), int(i.iterations))
                      for i in x.credential_infos])
            for x in r.results if x.error_code == ErrorCode.none and x.credential_infos]


_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.S)


def alter_scram(c: Cluster, user: str, add: dict[str, str], delete: list[str]) -> None:
    """Upsert ``SCRAM-SHA-*=[iterations=N,]password=P`` and delete mechanisms of ``user``
    (AlterUserScramCredentials; the salted password is computed here).

    Raises:
        click.ClickException: a malformed credential or the broker refused.
    """
    from kaas.tools.users import _upsertions

    ups = []
    for mech, text in add.items():
        m = _CREDENTIAL.fullmatch(text)
        if m is None:
            raise click.ClickException(f"Invalid credential property {mech}={text}")
        iterations = int(m.group(1)) if m.group(1) and m.group(1) != "-1" else DEFAULT_ITERATIONS
        if iterations < scram.MIN_ITERATIONS:
            raise click.ClickException(f"Iterations {iterations} is less than the minimum {scram.MIN_ITERATIONS} "
                                       f"required for {mech}")
        ups += _upsertions(user, m.group(2), iterations, [mech])
    r: AlterUserScramCredentialsResponse = c.call_controller(AlterUserScramCredentialsRequest(
        deletions=tuple(ScramCredentialDeletion(name=user, mechanism=i8(SCRAM_CODES[m])) for m in delete),
        upsertions=tuple(ScramCredentialUpsertion(name=u.user, mechanism=i8(u.mechanism), iterations=i32(u.iterations),
                                                  salt=u.salt, salted_password=u.salted_password) for u in ups)))
    failed = [x for x in r.results if x.error_code != ErrorCode.none]
    if failed:
        raise click.ClickException(f"{user}: {code_name(failed[0].error_code)} {failed[0].error_message or ''}")
