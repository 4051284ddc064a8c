"""``kaas acls list|add|remove``: the cluster's ACLs over the wire protocol, like Apache's
kafka-acls (DescribeAcls, CreateAcls, DeleteAcls).

``kaas acls add --allow-principal User:alice --operation Write --topic t`` adds one ACL per
(principal, host, operation, resource); ``remove`` takes the same options as a filter
(options left out match anything); ``list`` shows what a filter matches.
"""

from __future__ import annotations

from pathlib import Path

import click
from kio.schema.create_acls.v1.request import AclCreation, CreateAclsRequest
from kio.schema.create_acls.v1.response import CreateAclsResponse
from kio.schema.delete_acls.v1.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.delete_acls.v1.response import DeleteAclsResponse
from kio.schema.describe_acls.v1.request import DescribeAclsRequest
from kio.schema.describe_acls.v1.response import DescribeAclsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from kaas.domain.acl import CLUSTER_NAME, Operation, PatternType, Permission, ResourceType
from kaas.tools._wire import F, bootstrap_option, code_name, command_config_option, json_option, open_cluster
from kaas.tools.output import emit, table

COLUMNS = ["resource_type", "name", "pattern_type", "principal", "host", "operation", "permission"]
_OPS = [o.name.lower() for o in Operation if o not in (Operation.UNKNOWN, Operation.ANY)]


def _op(name: str) -> Operation:
    return Operation[name.upper().replace("-", "_")]


def _resources(topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...],
               cluster: bool) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in topics] + [(ResourceType.GROUP, g) for g in groups]
    out += [(ResourceType.TRANSACTIONAL_ID, x) for x in txn_ids]
    if cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def resource_options(f: F) -> F:
    for opt in reversed([
        click.option("--topic", "topics", multiple=True, help="A topic (or prefix, with --resource-pattern-type "
                     "prefixed; '*' for every topic)."),
        click.option("--group", "groups", multiple=True, help="A consumer group."),
        click.option("--transactional-id", "txn_ids", multiple=True, help="A transactional id."),
        click.option("--cluster", is_flag=True, help="The cluster resource (kafka-cluster)."),
        click.option("--resource-pattern-type", "pattern", default=None,
                     type=click.Choice(["literal", "prefixed", "match", "any"], case_sensitive=False),
                     help="How names match (add: literal by default; list/remove: any)."),
        click.option("--operation", "operations", multiple=True, type=click.Choice(_OPS, case_sensitive=False),
                     help="An operation: read, write, create, delete, alter, describe, cluster_action, "
                          "describe_configs, alter_configs, idempotent_write, all."),
    ]):
        f = opt(f)
    return f


def _rows_of_describe(r: DescribeAclsResponse) -> list[dict[str, str]]:
    return [{"resource_type": ResourceType(x.resource_type).name, "name": x.resource_name,
             "pattern_type": PatternType(x.pattern_type).name, "principal": a.principal, "host": a.host,
             "operation": Operation(a.operation).name, "permission": Permission(a.permission_type).name}
            for x in r.resources for a in x.acls]


@click.group("acls")
def acls() -> None:
    """List, add and remove ACLs (brokers run with --authorizer)."""


@acls.command("list")
@resource_options
@click.option("--principal", default=None, help="Only the ACLs of this principal (User:NAME).")
@bootstrap_option
@command_config_option
@json_option
def list_(topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool,
          pattern: str | None, operations: tuple[str, ...], principal: str | None, bootstrap: str,
          command_config: Path | None, as_json: bool) -> None:
    """The ACLs matching the options (every ACL when none is given)."""
    resources: list[tuple[ResourceType, str | None]] = [
        *_resources(topics, groups, txn_ids, cluster)] or [(ResourceType.ANY, None)]
    ptype = PatternType[(pattern or "any").upper()]
    rows: list[dict[str, str]] = []
    with open_cluster(bootstrap, command_config) as c:
        for rt, name in resources:
            for op in [_op(o) for o in operations] or [Operation.ANY]:
                r: DescribeAclsResponse = c.call_any(DescribeAclsRequest(
                    resource_type_filter=i8(int(rt)), resource_name_filter=name, pattern_type_filter=i8(int(ptype)),
                    principal_filter=principal, host_filter=None, operation=i8(int(op)),
                    permission_type=i8(int(Permission.ANY))))
                if r.error_code != ErrorCode.none:
                    raise click.ClickException(f"DescribeAcls: {code_name(r.error_code)}"
                                               + (f": {r.error_message}" if r.error_message else ""))
                rows += [x for x in _rows_of_describe(r) if x not in rows]
    emit(rows, as_json, lambda: table(rows, COLUMNS))


@acls.command()
@resource_options
@click.option("--allow-principal", "allow", multiple=True, help="Principal to allow (User:NAME, User:*).")
@click.option("--deny-principal", "deny", multiple=True, help="Principal to deny.")
@click.option("--host", "hosts", multiple=True, help="Client host the ACL applies to (default '*').")
@bootstrap_option
@command_config_option
def add(topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool,
        pattern: str | None, operations: tuple[str, ...], allow: tuple[str, ...], deny: tuple[str, ...],
        hosts: tuple[str, ...], bootstrap: str, command_config: Path | None) -> None:
    """Add an ACL for each principal x host x operation x resource given."""
    resources = _resources(topics, groups, txn_ids, cluster)
    if not resources or not operations or not (allow or deny):
        raise click.UsageError("give a resource, --operation and --allow-principal or --deny-principal")
    ptype = PatternType[(pattern or "literal").upper()]
    creations = tuple(
        AclCreation(resource_type=i8(int(rt)), resource_name=name, resource_pattern_type=i8(int(ptype)),
                    principal=p, host=h, operation=i8(int(_op(o))), permission_type=i8(int(perm)))
        for rt, name in resources for o in operations for h in (hosts or ("*",))
        for perm, principals in ((Permission.ALLOW, allow), (Permission.DENY, deny)) for p in principals)
    with open_cluster(bootstrap, command_config) as c:
        r: CreateAclsResponse = c.call_controller(CreateAclsRequest(creations=creations))
    bad = [(cr, x) for cr, x in zip(creations, r.results) if x.error_code != ErrorCode.none]
    for cr, x in bad:
        click.echo(f"{cr.principal} {Operation(cr.operation).name} {cr.resource_name}: "
                   f"{code_name(x.error_code)} {x.error_message or ''}".rstrip(), err=True)
    if bad:
        raise click.ClickException(f"{len(bad)} of {len(creations)} ACLs not added")
    click.echo(f"added {len(creations)} ACL(s)")


@acls.command()
@resource_options
@click.option("--principal", "principals", multiple=True, help="Only the ACLs of this principal.")
@click.option("--host", default=None, help="Only the ACLs of this host.")
@bootstrap_option
@command_config_option
@json_option
def remove(topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...], cluster: bool,
           pattern: str | None, operations: tuple[str, ...], principals: tuple[str, ...], host: str | None,
           bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """Remove every ACL matching the options (a resource must be given)."""
    resources = _resources(topics, groups, txn_ids, cluster)
    if not resources:
        raise click.UsageError("give a resource (--topic, --group, --transactional-id or --cluster)")
    ptype = PatternType[(pattern or "any").upper()]
    filters = tuple(
        DeleteAclsFilter(resource_type_filter=i8(int(rt)), resource_name_filter=name,
                         pattern_type_filter=i8(int(ptype)), principal_filter=p, host_filter=host,
                         operation=i8(int(op)), permission_type=i8(int(Permission.ANY)))
        for rt, name in resources for op in ([_op(o) for o in operations] or [Operation.ANY])
        for p in (principals or (None,)))
    with open_cluster(bootstrap, command_config) as c:
        r: DeleteAclsResponse = c.call_controller(DeleteAclsRequest(filters=filters))
    rows: list[dict[str, str]] = []
    for fr in r.filter_results:
        if fr.error_code != ErrorCode.none:
            raise click.ClickException(f"DeleteAcls: {code_name(fr.error_code)} {fr.error_message or ''}".rstrip())
        rows += [{"resource_type": ResourceType(m.resource_type).name, "name": m.resource_name,
                  "pattern_type": PatternType(m.pattern_type).name, "principal": m.principal, "host": m.host,
                  "operation": Operation(m.operation).name, "permission": Permission(m.permission_type).name}
                 for m in fr.matching_acls]
    emit(rows, as_json, lambda: table(rows, COLUMNS) + f"\nremoved {len(rows)} ACL(s)")
