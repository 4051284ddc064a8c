"""Dynamic broker configs (KIP-226): ``__cluster/broker_configs.json``.

``{"format": 1, "version": n, "default": {name: value}, "brokers": {"<id>": {name: value}}}``:
the cluster-wide default layer (a BROKER resource named ``""``) and each broker's own layer
(the resource named by its id).

Invariants:
    - one writer, the controller (other brokers forward AlterConfigs and
      IncrementalAlterConfigs to it); every write replaces the whole file (tmp + fsync +
      rename) with ``version`` one above the version it was computed from;
    - every broker reads it afresh (close-to-open) when ``stat`` says it changed, and at
      least once a second whatever ``stat`` says (NFS may cache attributes);
    - a file that does not parse is ``CorruptState``, never "no dynamic configs"; no file
      is no dynamic configs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, cast

from kaas.errors import CorruptState
from kaas.storage import atomic

FORMAT = 1


class BrokerConfigsRecord(TypedDict):
    """The dynamic broker config file, format 1: the cluster default layer, and each
    broker's own layer by its id (as a string)."""

    format: int
    version: int
    default: dict[str, str]
    brokers: dict[str, dict[str, str]]


@dataclass(frozen=True, slots=True)
class BrokerConfigs:
    """One version of the file: the default layer and the per-broker layers."""

    version: int = 0
    default: dict[str, str] = field(default_factory=dict)
    brokers: dict[int, dict[str, str]] = field(default_factory=dict)

    def layer(self, resource_name: str) -> dict[str, str]:
        """The layer of a BROKER resource (``""``: the default) as a new dict."""
        if resource_name == "":
            return dict(self.default)
        return dict(self.brokers.get(int(resource_name), {}))

    def with_layer(self, resource_name: str, layer: dict[str, str]) -> BrokerConfigs:
        """A copy with ``layer`` as the resource's layer and the next version."""
        brokers = {b: dict(v) for b, v in self.brokers.items()}
        default = dict(self.default)
        if resource_name == "":
            default = dict(layer)
        elif layer:
            brokers[int(resource_name)] = dict(layer)
        else:
            brokers.pop(int(resource_name), None)
        return BrokerConfigs(self.version + 1, default, brokers)

    def to_json(self) -> BrokerConfigsRecord:
        return {"format": FORMAT, "version": self.version, "default": dict(sorted(self.default.items())),
                "brokers": {str(b): dict(sorted(v.items())) for b, v in sorted(self.brokers.items())}}

    @classmethod
    def from_json(cls, path: Path, raw: Mapping[str, object]) -> BrokerConfigs:
        """The file's JSON object (its members whatever the file holds: checked here)."""
        obj = cast(BrokerConfigsRecord, raw)
        try:
            if obj.get("format") != FORMAT:
                raise ValueError(f"format {obj.get('format')!r}")
            default = obj["default"]
            brokers = obj["brokers"]
            if not isinstance(default, dict) or not isinstance(brokers, dict):
                raise ValueError("default and brokers must be objects")
            return cls(int(obj["version"]), {str(k): str(v) for k, v in default.items()},
                       {int(b): {str(k): str(v) for k, v in layer.items()} for b, layer in brokers.items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptState(str(path), f"bad broker config file: {exc}") from None


def broker_configs_path(cluster_dir: Path) -> Path:
    """Where the dynamic broker configs live under ``DATA/__cluster``."""
    return Path(cluster_dir) / "broker_configs.json"


class BrokerConfigFile:
    """Read and (the controller only) write the dynamic broker configs."""

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync

    def signature(self) -> tuple[int, int, int, int] | None:
        """``atomic.stat_signature`` of the file: a change means it should be read again."""
        return atomic.stat_signature(self.path)

    def read(self) -> BrokerConfigs:
        """The file as it is now (empty layers when there is none).

        Raises:
            CorruptState: the file does not parse as a broker config file.
        """
        obj = atomic.read_json(self.path)
        if obj is None:
            return BrokerConfigs()
        return BrokerConfigs.from_json(self.path, obj)

    def write(self, configs: BrokerConfigs) -> None:
        """Replace the file (the controller only).

        Raises:
            OSError: the write failed; the previous file is intact.
        """
        atomic.write_json(self.path, configs.to_json(), fsync=self.fsync)
