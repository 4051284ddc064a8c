"""``kaas groups delete|delete-offsets`` and ``kaas share-groups delete|delete-offsets``, as
Apache's kafka-consumer-groups and kafka-share-groups ``--delete`` and ``--delete-offsets``.

``delete`` sends DeleteGroups to each group's coordinator: a group with members is refused
(NON_EMPTY_GROUP), as in Apache. ``delete-offsets`` sends OffsetDelete (a consumer group's
committed offsets of some partitions; refused for a partition the group is subscribed to)
or DeleteShareGroupOffsets (a share group's state of whole topics; the group must be
empty). The human output is Apache's lines and columns; ``--json`` one document.
"""

from __future__ import annotations

from pathlib import Path

import click
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_groups.v2.response import DeleteGroupsResponse
from kio.schema.delete_share_group_offsets.v0 import request as share_req
from kio.schema.delete_share_group_offsets.v0.response import DeleteShareGroupOffsetsResponse
from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_delete.v0.response import OffsetDeleteResponse
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from kaas.tools._wire import (
    RETRIABLE,
    Cluster,
    F,
    RetriableError,
    bootstrap_option,
    code_name,
    command_config_option,
    json_option,
    open_cluster,
    retry,
)
from kaas.tools.output import emit, table

__all__ = ["delete", "delete_offsets", "share_groups"]

# Apache's exceptions of DeleteGroups and OffsetDelete error codes: (class, message), as its tools print them
EXCEPTIONS = {
    ErrorCode.non_empty_group: ("GroupNotEmptyException", "The group is not empty."),
    ErrorCode.group_id_not_found: ("GroupIdNotFoundException", "The group id does not exist."),
    ErrorCode.group_authorization_failed: ("GroupAuthorizationException", "Group authorization failed."),
    ErrorCode.group_subscribed_to_topic: ("GroupSubscribedToTopicException",
                                          "The consumer group is actively subscribed to the topic"),
    ErrorCode.unknown_topic_or_partition: ("UnknownTopicOrPartitionException",
                                           "This server does not host this topic-partition."),
    ErrorCode.topic_authorization_failed: ("TopicAuthorizationException", "Topic authorization failed."),
}


def exception_text(code: ErrorCode) -> str:
    """How Apache's group tools print an error: its exception's class and message."""
    if code not in EXCEPTIONS:
        return code_name(code)
    cls, message = EXCEPTIONS[code]
    return f"org.apache.kafka.common.errors.{cls}: {message}"


def _groups_arg(f: F) -> F:
    f = click.option("--group", "group_opts", multiple=True, help="A group to delete (repeatable; as Apache's "
                                                                 "--group).")(f)
    return click.argument("group_args", nargs=-1, metavar="[GROUP]...")(f)


def _delete_groups(c: Cluster, names: list[str]) -> dict[str, ErrorCode]:
    """DeleteGroups of each group at its coordinator: group -> error code."""
    out: dict[str, ErrorCode] = {}
    for group in names:
        def attempt(group: str = group) -> ErrorCode:
            r: DeleteGroupsResponse = c.call(c.group_coordinator(group),
                                             DeleteGroupsRequest(groups_names=(GroupId(group),)))
            code = r.results[0].error_code
            if code in RETRIABLE:
                raise RetriableError(code, f"DeleteGroups({group})")
            return code
        out[group] = retry(attempt)
    return out


def _report_delete(kind: str, result: dict[str, ErrorCode], as_json: bool,
                   messages: dict[str, str] | None = None) -> None:
    """Apache's lines of a ``--delete`` (``messages``: a group's own error text)."""
    messages = messages or {}
    rows = [{"group": g, "deleted": code == ErrorCode.none,
             "error": None if code == ErrorCode.none else code_name(code)} for g, code in result.items()]
    ok = [r["group"] for r in rows if r["deleted"]]
    failed = [r for r in rows if not r["deleted"]]

    def human() -> list[str]:
        if not failed:
            return [f"Deletion of requested {kind} groups ({', '.join(repr(g) for g in ok)}) was successful."]
        lines = ["", f"Error: Deletion of some {kind} groups failed:"]
        for r in failed:
            lines.append(f"* Group '{r['group']}' could not be deleted due to: "
                         + messages.get(str(r["group"]), exception_text(ErrorCode[str(r["error"]).lower()])))
        if ok:
            lines.append(f"These {kind} groups were deleted successfully: " + ", ".join(repr(g) for g in ok))
        return lines

    emit(rows, as_json, human)
    if failed:
        raise click.exceptions.Exit(1)


@click.command("delete")
@_groups_arg
@bootstrap_option
@command_config_option
@json_option
def delete(group_args: tuple[str, ...], group_opts: tuple[str, ...], bootstrap: str, command_config: Path | None,
           as_json: bool) -> None:
    """Delete GROUPs (DeleteGroups): their committed offsets and state; a group with members is refused."""
    names = list(dict.fromkeys(group_args + group_opts))
    if not names:
        raise click.UsageError("name a group (GROUP or --group)")
    with open_cluster(bootstrap, command_config) as c:
        _report_delete("consumer", _delete_groups(c, names), as_json)


def _partitions(c: Cluster, specs: tuple[str, ...]) -> dict[str, list[int] | None]:
    """``--topic TOPIC[:P,P...]`` specs: topic -> partitions (None: every partition, or an
    unknown topic, which the broker then answers for)."""
    out: dict[str, list[int] | None] = {}
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if sep:
            try:
                out[topic] = sorted({int(p) for p in parts.split(",") if p.strip()})
            except ValueError:
                raise click.BadParameter(f"{spec!r} is not TOPIC or TOPIC:P,P", param_hint="--topic") from None
        else:
            out[topic] = None
    whole = [t for t, ps in out.items() if ps is None]
    if whole:
        for t in c.metadata(whole).topics:
            if t.name is not None and t.error_code == ErrorCode.none:
                out[t.name] = sorted(int(p.partition_index) for p in t.partitions)
    return out


@click.command("delete-offsets")
@click.argument("group")
@click.option("--topic", "topic_specs", multiple=True, required=True, metavar="TOPIC[:P,P...]",
              help="A topic (every partition) or some of its partitions; repeatable.")
@bootstrap_option
@command_config_option
@json_option
def delete_offsets(group: str, topic_specs: tuple[str, ...], bootstrap: str, command_config: Path | None,
                   as_json: bool) -> None:
    """Delete GROUP's committed offsets of the partitions named (OffsetDelete); refused
    for a partition the group is subscribed to while it has members."""
    with open_cluster(bootstrap, command_config) as c:
        wanted = _partitions(c, topic_specs)
        known = {t: ps for t, ps in wanted.items() if ps is not None}
        req = OffsetDeleteRequest(group_id=GroupId(group), topics=tuple(
            OffsetDeleteRequestTopic(name=TopicName(t), partitions=tuple(
                OffsetDeleteRequestPartition(partition_index=i32(p)) for p in ps)) for t, ps in known.items()))

        def attempt() -> OffsetDeleteResponse:
            r: OffsetDeleteResponse = c.call(c.group_coordinator(group), req)
            if r.error_code in RETRIABLE:
                raise RetriableError(r.error_code, f"OffsetDelete({group})")
            return r
        r = retry(attempt)
    top = r.error_code
    codes: dict[tuple[str, int | None], ErrorCode] = {(t, None): ErrorCode.unknown_topic_or_partition
                                                      for t, ps in wanted.items() if ps is None}
    for t, ps in known.items():  # a group-level error is every partition's (as Apache shows it)
        codes.update({(t, p): top for p in ps})
    codes.update({(t.name, int(p.partition_index)): p.error_code for t in r.topics for p in t.partitions
                  if top == ErrorCode.none})
    rows = [{"topic": t, "partition": p, "error": None if code == ErrorCode.none else code_name(code),
             "status": "Successful" if code == ErrorCode.none else f"Error: {exception_text(code)}"}
            for (t, p), code in sorted(codes.items(), key=lambda x: (x[0][0], -1 if x[0][1] is None else x[0][1]))]
    out = {"group_id": group, "error": None if top == ErrorCode.none else code_name(top), "partitions": rows}

    def human() -> list[str]:
        if top == ErrorCode.none:
            head = [f"Request succeeded for deleting offsets from group {group}."]
        else:
            head = ["", f"Error: {EXCEPTIONS[top][1] if top in EXCEPTIONS else code_name(top)}"]
        return [*head, "", table(rows, ["topic", "partition", "status"])]

    emit(out, as_json, human)
    if top != ErrorCode.none or any(x["error"] for x in rows):
        raise click.exceptions.Exit(1)


# --------------------------------------------------------------------------- share groups


@click.group("share-groups")
def share_groups() -> None:
    """Delete share groups (KIP-932) and their offsets, as kafka-share-groups (describe,
    list and reset-offsets: kaas groups)."""


@share_groups.command("delete")
@_groups_arg
@bootstrap_option
@command_config_option
@json_option
def share_delete(group_args: tuple[str, ...], group_opts: tuple[str, ...], bootstrap: str,
                 command_config: Path | None, as_json: bool) -> None:
    """Delete share GROUPs (DeleteGroups): their state of every share partition; a group with members is refused."""
    from kaas.tools.share_groups import share_group

    names = list(dict.fromkeys(group_args + group_opts))
    if not names:
        raise click.UsageError("name a group (GROUP or --group)")
    with open_cluster(bootstrap, command_config) as c:
        result: dict[str, ErrorCode] = {}
        for g in names:  # as Apache: a group that is not a share group is not deleted here
            result[g] = ErrorCode.none if share_group(c, g) is not None else ErrorCode.group_id_not_found
        result.update(_delete_groups(c, [g for g, code in result.items() if code == ErrorCode.none]))
        not_share = {g: f"org.apache.kafka.common.errors.GroupIdNotFoundException: Group '{g}' is not a share group."
                     for g, code in result.items() if code == ErrorCode.group_id_not_found}
        _report_delete("share", result, as_json, not_share)


@share_groups.command("delete-offsets")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, required=True, help="A topic whose share state is deleted; "
                                                                      "repeatable.")
@bootstrap_option
@command_config_option
@json_option
def share_delete_offsets(group: str, topics: tuple[str, ...], bootstrap: str, command_config: Path | None,
                         as_json: bool) -> None:
    """Delete share GROUP's state of TOPICs (DeleteShareGroupOffsets): the next member starts
    them anew at share.auto.offset.reset; the group must be empty."""
    with open_cluster(bootstrap, command_config) as c:
        req = share_req.DeleteShareGroupOffsetsRequest(group_id=GroupId(group), topics=tuple(
            share_req.DeleteShareGroupOffsetsRequestTopic(topic_name=TopicName(t)) for t in dict.fromkeys(topics)))

        def attempt() -> DeleteShareGroupOffsetsResponse:
            r: DeleteShareGroupOffsetsResponse = c.call(c.group_coordinator(group), req)
            if r.error_code in RETRIABLE:
                raise RetriableError(r.error_code, f"DeleteShareGroupOffsets({group})")
            return r
        r = retry(attempt)
    rows = [{"topic": t.topic_name, "status": "Successful" if t.error_code == ErrorCode.none else
             f"Error: {t.error_message or code_name(t.error_code)}",
             "error": None if t.error_code == ErrorCode.none else code_name(t.error_code)}
            for t in sorted(r.responses, key=lambda t: t.topic_name)]
    out = {"group_id": group, "error": None if r.error_code == ErrorCode.none else code_name(r.error_code),
           "message": r.error_message, "topics": rows}
    if r.error_code != ErrorCode.none:
        emit(out, as_json, lambda: f"Error: {r.error_message or code_name(r.error_code)}")
        raise click.exceptions.Exit(1)
    emit(out, as_json, lambda: table(rows, ["topic", "status"]))
    if any(x["error"] for x in rows):
        raise click.exceptions.Exit(1)
