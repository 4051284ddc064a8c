"""Group configs (KIP-848, KIP-932): ``__cluster/group_configs.json``.

``{"format": 1, "version": n, "groups": {"<group id>": {name: value}}}``: each group's own
configs (a GROUP config resource), whether or not the group exists: a config may be set
before the first member joins, and stays when the group is deleted (as in Apache, where
group configs live in the cluster metadata, apart from the group). The file lists no group
to ListGroups: that reads ``consumer_offsets/`` and the coordinators.

Invariants:
    - one writer, the controller (other brokers forward AlterConfigs and
      IncrementalAlterConfigs to it); every write replaces the whole file (tmp + fsync +
      rename) with ``version`` one above the version it was computed from; a group whose
      configs are all deleted leaves the file;
    - every broker reads it afresh (close-to-open) when ``stat`` says it changed, and at
      least once a second whatever ``stat`` says (NFS may cache attributes);
    - a file that does not parse, or holds a name or value no validation would have
      written, is ``CorruptState``, never "no group configs"; no file is no group configs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, cast

from kaas.domain.groups import configs as group_configs
from kaas.errors import CorruptState
from kaas.storage import atomic

FORMAT = 1


class GroupConfigsRecord(TypedDict):
    """The group config file, format 1: each group's own configs."""

    format: int
    version: int
    groups: dict[str, dict[str, str]]


@dataclass(frozen=True, slots=True)
class GroupConfigs:
    """One version of the file: each group's configs (only groups that set some)."""

    version: int = 0
    groups: dict[str, dict[str, str]] = field(default_factory=dict)

    def of(self, group_id: str) -> dict[str, str]:
        """The configs ``group_id`` sets, as a new dict (empty when none)."""
        return dict(self.groups.get(group_id, {}))

    def with_group(self, group_id: str, configs: dict[str, str]) -> GroupConfigs:
        """A copy with ``configs`` as the group's configs (none: the group leaves the file)
        and the next version."""
        groups = {g: dict(c) for g, c in self.groups.items()}
        if configs:
            groups[group_id] = dict(configs)
        else:
            groups.pop(group_id, None)
        return GroupConfigs(self.version + 1, groups)

    def to_json(self) -> GroupConfigsRecord:
        return {"format": FORMAT, "version": self.version,
                "groups": {g: dict(sorted(c.items())) for g, c in sorted(self.groups.items())}}

    @classmethod
    def from_json(cls, path: Path, raw: Mapping[str, object]) -> GroupConfigs:
        """The file's JSON object, checked member by member.

        Raises:
            CorruptState: not a format-1 group config file, or a name or value that
                ``domain.groups.configs.validate`` would never have let through.
        """
        obj = cast(GroupConfigsRecord, raw)
        try:
            if obj.get("format") != FORMAT:
                raise ValueError(f"format {obj.get('format')!r}")
            groups = obj["groups"]
            if not isinstance(groups, dict):
                raise ValueError("groups must be an object")
            out: dict[str, dict[str, str]] = {}
            for group_id, configs in groups.items():
                if not isinstance(configs, dict) or not configs:
                    raise ValueError(f"group {group_id!r}: configs must be a non-empty object")
                for name, value in configs.items():
                    why = group_configs.check_stored(name, value) if isinstance(value, str) else "not a string"
                    if why is not None:
                        raise ValueError(f"group {group_id!r}: {name}: {why}")
                out[str(group_id)] = dict(configs)
            return cls(int(obj["version"]), out)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptState(str(path), f"bad group config file: {exc}") from None


class GroupConfigFile:
    """Read and (the controller only) write the group configs."""

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync

    def signature(self) -> tuple[int, int, int, int] | None:
        """``atomic.stat_signature`` of the file: a change means it should be read again."""
        return atomic.stat_signature(self.path)

    def read(self) -> GroupConfigs:
        """The file as it is now (no group configs when there is none).

        Raises:
            CorruptState: the file does not parse as a group config file.
            OSError: it could not be read.
        """
        obj = atomic.read_json(self.path)
        if obj is None:
            return GroupConfigs()
        return GroupConfigs.from_json(self.path, obj)

    def write(self, configs: GroupConfigs) -> None:
        """Replace the file (the controller only).

        Raises:
            OSError: the write failed; the previous file is intact.
        """
        atomic.write_json(self.path, configs.to_json(), fsync=self.fsync)
