"""The cluster view of ``kaas inspect cluster``: the assignment, the controller epoch
files, broker heartbeats, topics, partitions (high watermark from the segment files),
dynamic broker configs and deleted topics, with the coordinators' files
(``_coordinators``)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from kaas.domain.assignment import Assignment
from kaas.errors import CorruptState
from kaas.storage import trash
from kaas.storage.broker_configs import BrokerConfigFile, broker_configs_path
from kaas.storage.group_configs import GroupConfigFile
from kaas.storage.paths import Layout
from kaas.storage.topics import TopicMeta
from kaas.tools.inspect_data._coordinators import (
    FenceLogRow,
    GroupRow,
    MarkerQueueRow,
    PidBlockRow,
    fence_logs,
    groups,
    marker_queues,
    pid_blocks,
)
from kaas.tools.inspect_data._files import Ages, listdir, named, read_json, size_of, utc
from kaas.tools.inspect_data._segments import SEGMENT_RE, log_end


class LeaderRow(TypedDict):
    leader: int
    epoch: int


class AssignmentView(TypedDict, total=False):
    """``present`` and ``error`` always; the rest once the file parses."""

    present: bool
    error: str | None
    version: int
    controller_epoch: int
    brokers: list[int]
    age_s: float | None
    txn_slot_owners: dict[str, int]
    partitions: dict[str, list[LeaderRow]]


class ControllerFile(TypedDict):
    epoch: int
    file: str
    age_s: float | None
    broker_id: object  # as the file says
    error: str | None


class ControllerView(TypedDict):
    epoch: int | None
    broker_id: object
    epoch_files: list[ControllerFile]


class HeartbeatRow(TypedDict):
    """A broker's heartbeat file; the fields but ``file``, ``age_s``, ``stale`` and
    ``error`` as the file says (None when it does not parse)."""

    file: str
    broker_id: object
    counter: object
    address: str | None
    pid: object
    applied_version: object
    draining: object
    controller_epoch: object
    age_s: float | None
    stale: bool
    error: str | None


class TopicRow(TypedDict):
    name: str
    topic_id: str | None
    partitions: int | None
    configs: dict[str, str] | None
    error: str | None


class PartitionRow(TypedDict):
    """A partition; ``manifest_*`` and ``log_start_offset`` as its manifest says."""

    topic: str
    partition: int
    leader: int | None
    leader_epoch: int | None
    manifest_epoch: object
    high_watermark: int | None
    manifest_high_watermark: object
    log_start_offset: object
    segments: int
    bytes: int
    error: str | None


class DeletedTopicRow(TypedDict):
    directory: str
    due: str
    due_ms: int


class BrokerConfigRow(TypedDict):
    resource: str
    configs: str | None
    error: str | None


class ClusterView(TypedDict):
    """What ``kaas inspect cluster --json`` prints."""

    directory: str
    assignment: AssignmentView
    controller: ControllerView
    brokers: list[HeartbeatRow]
    marker_queues: list[MarkerQueueRow]
    fence_logs: list[FenceLogRow]
    pid_blocks: list[PidBlockRow]
    topics: list[TopicRow]
    partitions: list[PartitionRow]
    groups: list[GroupRow]
    deleted_topics: list[DeletedTopicRow]
    broker_configs: list[BrokerConfigRow]
    group_configs: list[BrokerConfigRow]


def kv(d: object) -> str | None:
    """A config map as ``k=v,...`` sorted by key; None when empty or not a map."""
    if not isinstance(d, dict) or not d:
        return None
    return ",".join(f"{k}={v}" for k, v in sorted(d.items()))


def _assignment(layout: Layout, age: Ages) -> tuple[AssignmentView, Assignment | None]:
    obj, err = read_json(layout.assignment)
    out = AssignmentView(present=obj is not None or err is not None, error=err)
    if obj is None:
        return out, None
    try:
        asg = Assignment.from_json(obj)
    except ValueError as exc:
        out["error"] = str(exc)
        return out, None
    owners: dict[str, int] = {}
    for owner in asg.txn_slots.values():
        owners[str(owner)] = owners.get(str(owner), 0) + 1
    out.update({"version": asg.version, "controller_epoch": asg.controller_epoch, "brokers": list(asg.brokers),
                "age_s": age(layout.assignment), "txn_slot_owners": owners,
                "partitions": {t: [LeaderRow(leader=p.leader, epoch=p.epoch) for p in row]
                               for t, row in sorted(asg.partitions.items())}})
    return out, asg


def _controllers(layout: Layout, age: Ages) -> list[ControllerFile]:
    out = []
    for name, n in named(layout.controller, "epoch-", ""):
        if not n.isdigit():
            continue
        obj, err = read_json(layout.controller / name)
        out.append(ControllerFile(epoch=int(n), file=name, age_s=age(layout.controller / name),
                                  broker_id=obj.get("broker_id") if isinstance(obj, dict) else None, error=err))
    return sorted(out, key=lambda c: c["epoch"])


def _heartbeats(layout: Layout, age: Ages, session_timeout_ms: int) -> list[HeartbeatRow]:
    out = []
    for name, _ in named(layout.brokers, "kaas-", ".json"):
        path = layout.brokers / name
        obj, err = read_json(path)
        a = age(path)
        row = HeartbeatRow(file=name, broker_id=None, counter=None, address=None, pid=None, applied_version=None,
                           draining=None, controller_epoch=None, age_s=a,
                           stale=a is not None and a * 1000 > session_timeout_ms, error=err)
        if isinstance(obj, dict):
            row.update({"broker_id": obj.get("broker_id"), "counter": obj.get("counter"),
                        "address": f"{obj.get('host')}:{obj.get('port')}", "pid": obj.get("pid"),
                        "applied_version": obj.get("applied_version"), "draining": obj.get("draining"),
                        "controller_epoch": obj.get("controller_epoch")})
        out.append(row)
    return sorted(out, key=lambda r: (not isinstance(r["broker_id"], int), r["broker_id"] or 0, r["file"]))


def _topics(layout: Layout) -> list[TopicRow]:
    out = []
    for name, topic in named(layout.topics, "", ".json"):
        if name.startswith("."):
            continue
        path = layout.topics / name
        obj, err = read_json(path)
        row = TopicRow(name=topic, topic_id=None, partitions=None, configs=None, error=err)
        if obj is not None:
            try:
                if not isinstance(obj, dict):
                    raise CorruptState(str(path), "bad topic file: not an object")
                meta = TopicMeta.from_json(obj, str(path))
                row.update({"topic_id": str(meta.topic_id), "partitions": meta.partitions, "configs": meta.configs})
            except CorruptState as exc:
                row["error"] = str(exc)
        out.append(row)
    return out


def _partitions(layout: Layout, asg: Assignment | None, topics: list[TopicRow]) -> list[PartitionRow]:
    """Every partition named by the assignment or present on disk, with its manifest and
    its high watermark read from its segments (the manifest's copy is written only at a
    hand-over: ``manifest_high_watermark``)."""
    out = []
    names = {t for t in listdir(layout.data) if not t.startswith(".")} | {r["name"] for r in topics}
    names |= set(asg.partitions) if asg else set()
    for t in sorted(names):
        nums = {int(p) for p in listdir(layout.data / t) if p.isdigit()}
        if asg and t in asg.partitions:
            nums |= set(range(len(asg.partitions[t])))
        for p in sorted(nums):
            pdir = layout.partition_dir(t, p)
            leader = asg.leader_of(t, p) if asg else None
            doc, err = read_json(pdir / "manifest.json")
            m = doc if isinstance(doc, dict) else {}
            segs = [f for f in listdir(pdir) if SEGMENT_RE.match(f)]
            try:
                end = log_end(pdir)
            except OSError as exc:
                end, err = None, err or f"segment unreadable: {exc}"
            out.append(PartitionRow(
                topic=t, partition=p, leader=leader.leader if leader else None,
                leader_epoch=leader.epoch if leader else None, manifest_epoch=m.get("epoch"),
                high_watermark=end, manifest_high_watermark=m.get("high_watermark"),
                log_start_offset=m.get("log_start_offset"),
                segments=len(segs), bytes=sum(size_of(pdir / f) for f in segs), error=err))
    return out


def _broker_configs(layout: Layout) -> list[BrokerConfigRow]:
    """The dynamic broker configs file: one row per layer (``<default>`` or a broker id)."""
    try:
        bc = BrokerConfigFile(broker_configs_path(layout.cluster)).read()
    except (CorruptState, OSError) as exc:
        return [BrokerConfigRow(resource="-", configs=None, error=str(exc))]
    rows = [BrokerConfigRow(resource="<default>", configs=kv(bc.default), error=None)] if bc.default else []
    rows += [BrokerConfigRow(resource=str(b), configs=kv(layer), error=None) for b, layer in sorted(bc.brokers.items())]
    return rows


def _group_configs(layout: Layout) -> list[BrokerConfigRow]:
    """The group configs file (KIP-848/932): one row per group that sets configs."""
    try:
        gc = GroupConfigFile(layout.group_configs).read()
    except (CorruptState, OSError) as exc:
        return [BrokerConfigRow(resource="-", configs=None, error=str(exc))]
    return [BrokerConfigRow(resource=g, configs=kv(c), error=None) for g, c in sorted(gc.groups.items())]


def cluster_view(data: Path, session_timeout_ms: int) -> ClusterView:
    """The cluster's state as its files under ``data`` show it; a heartbeat older than
    ``session_timeout_ms`` is marked stale."""
    layout = Layout(data)
    age = Ages()
    assignment, asg = _assignment(layout, age)
    controllers = _controllers(layout, age)
    current = controllers[-1] if controllers else None
    topics = _topics(layout)
    return ClusterView(
        directory=str(data), assignment=assignment,
        controller=ControllerView(epoch=current["epoch"] if current else None,
                                  broker_id=current["broker_id"] if current else None, epoch_files=controllers),
        brokers=_heartbeats(layout, age, session_timeout_ms), marker_queues=marker_queues(layout, age),
        fence_logs=fence_logs(layout, age), pid_blocks=pid_blocks(layout), topics=topics,
        partitions=_partitions(layout, asg, topics), groups=groups(layout, age),
        deleted_topics=[DeletedTopicRow(directory=name, due=utc(due) if due else "now", due_ms=due)
                        for name, due in trash.pending_topics(layout.data)],
        broker_configs=_broker_configs(layout), group_configs=_group_configs(layout))
