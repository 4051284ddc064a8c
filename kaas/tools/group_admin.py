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

# Apache's messages of DeleteGroups and OffsetDelete error codes, as its exceptions say them
MESSAGES = {
    ErrorCode.non_empty_group: "The group is not empty.",
    ErrorCode.group_id_not_found: "The group id does not exist.",
    ErrorCode.group_authorization_failed: "Not authorized to access group: Group authorization failed.",
    ErrorCode.group_subscribed_to_topic: "The consumer group is actively subscribed to the topic",
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.topic_authorization_failed: "Not authorized to access topics: [Topic authorization failed.]",
}


def _groups_arg(f):  # type: ignore[no-untyped-def]
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


def _report_delete(kind: str, result: dict[str, ErrorCode], as_json: bool) -> None:
    rows = [{"group": g, "deleted": code == ErrorCode.none,
             "error": None if code == ErrorCode.none else code_name(code)} for g, code in result.items()]
    ok = [r["group"] for r in rows if r["deleted"]]
    failed = [r for r in rows if not r["deleted"]]

    def human() -> list[str]:
        if not failed:
            return [f"Deletion of requested {kind} groups ({', '.join(repr(g) for g in ok)}) was successful."]
        lines = [f"Error: Deletion of some {kind} groups failed:"]
        for r in failed:
            code = ErrorCode[str(r["error"]).lower()]
            lines.append(f"* Group '{r['group']}' could not be deleted due to: {r['error']}: "
                         f"{MESSAGES.get(code, code_name(code))}")
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
        req = OffsetDeleteRequest(group_id=GroupId(group), topics=tuple(
            OffsetDeleteRequestTopic(name=TopicName(t), partitions=tuple(
                OffsetDeleteRequestPartition(partition_index=i32(p)) for p in (ps if ps is not None else [-1])))
            for t, ps in wanted.items()))

        def attempt() -> OffsetDeleteResponse:
            r: OffsetDeleteResponse = c.call(c.group_coordinator(group), req)
            if r.error_code in RETRIABLE:
                raise RetriableError(r.error_code, f"OffsetDelete({group})")
            return r
        r = retry(attempt)
    rows = [{"topic": t.name, "partition": int(p.partition_index) if p.partition_index >= 0 else None,
             "status": "Successful" if p.error_code == ErrorCode.none else
             f"Error: {MESSAGES.get(p.error_code, code_name(p.error_code))}",
             "error": None if p.error_code == ErrorCode.none else code_name(p.error_code)}
            for t in r.topics for p in t.partitions]
    rows.sort(key=lambda x: (x["topic"], x["partition"] if x["partition"] is not None else -1))
    top = r.error_code
    failed = top != ErrorCode.none or any(x["error"] for x in rows)
    out = {"group_id": group, "error": None if top == ErrorCode.none else code_name(top), "partitions": rows}

    def human() -> list[str]:
        if top == ErrorCode.none and not failed:
            head = f"Request succeed for deleting offsets with topic {', '.join(wanted)} group {group}"
        elif top == ErrorCode.non_empty_group:
            head = f"Error: Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty."
        elif top == ErrorCode.group_id_not_found:
            head = f"Error: '{group}' does not exist."
        else:
            head = "Error: Encounter some partition level error, see the follow-up details:"
        return [head, "", table([{**x, "partition": x["partition"] if x["partition"] is not None else
                                  "Not Provided"} for x in rows], ["topic", "partition", "status"])]

    emit(out, as_json, human)
    if failed:
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
        _report_delete("share", result, as_json)


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
