"""``__cluster/features.json``: the cluster's finalized feature levels (KIP-584) and their
epoch: ``{"format": 1, "epoch": n, "levels": {feature: level}}``.

Invariants:
    - one writer, the controller: it creates the file (exclusive create, the new-cluster
      levels of ``domain.features``, epoch 1) when it finds none, and replaces it (tmp +
      fsync + rename) for each UpdateFeatures that changes a level, with ``epoch`` one above
      the epoch it was computed from; other brokers forward UpdateFeatures to it;
    - every level is an int >= 1 (a feature at 0 leaves the map); the epoch never falls;
    - a file that does not parse is ``CorruptState``, never "no features"; no file yet is
      the new-cluster levels at epoch 0 (what the controller is about to write).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, cast

from kaas.domain import features
from kaas.errors import CorruptState
from kaas.storage import atomic

FORMAT = 1


class FeaturesRecord(TypedDict):
    """``features.json``, format 1: each finalized feature's level, and the epoch of
    the last change."""

    format: int
    epoch: int
    levels: dict[str, int]


@dataclass(frozen=True, slots=True)
class FinalizedFeatures:
    """One version of the file."""

    epoch: int = 0
    levels: dict[str, int] = field(default_factory=features.default_levels)

    def with_levels(self, levels: dict[str, int]) -> FinalizedFeatures:
        """The next version: ``levels`` at the next epoch."""
        return FinalizedFeatures(self.epoch + 1, dict(levels))

    def to_json(self) -> FeaturesRecord:
        return {"format": FORMAT, "epoch": self.epoch, "levels": dict(sorted(self.levels.items()))}

    @classmethod
    def from_json(cls, path: Path, raw: Mapping[str, object]) -> FinalizedFeatures:
        """The file's JSON object, checked.

        Raises:
            CorruptState: not a format-1 features file, or a level that is not an int >= 1.
        """
        obj = cast(FeaturesRecord, raw)
        try:
            if obj.get("format") != FORMAT:
                raise ValueError(f"format {obj.get('format')!r}")
            epoch, levels = obj["epoch"], obj["levels"]
            if type(epoch) is not int or epoch < 0:
                raise ValueError(f"epoch {epoch!r}")
            if not isinstance(levels, dict):
                raise ValueError("levels must be an object")
            for name, level in levels.items():
                if type(level) is not int or not 1 <= level <= 0x7FFF:
                    raise ValueError(f"{name}: level {level!r}")
            return cls(epoch, dict(levels))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptState(str(path), f"bad features file: {exc}") from None


class FeaturesFile:
    """Read and (the controller only) write the finalized features."""

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync

    def signature(self) -> tuple[int, int, int, int] | None:
        """``atomic.stat_signature`` of the file: a change means it should be read again."""
        return atomic.stat_signature(self.path)

    def read(self) -> FinalizedFeatures:
        """The file as it is now (the new-cluster levels at epoch 0 when there is none).

        Raises:
            CorruptState: the file does not parse as a features file.
            OSError: it could not be read.
        """
        obj = atomic.read_json(self.path)
        if obj is None:
            return FinalizedFeatures()
        return FinalizedFeatures.from_json(self.path, obj)

    def exists(self) -> bool:
        return self.path.exists()

    def create(self) -> bool:
        """Create the file with the new-cluster levels at epoch 1 unless it exists (the
        controller, when it finds none). True when this call created it."""
        first = FinalizedFeatures().with_levels(features.default_levels())
        return atomic.create_exclusive(self.path, atomic.json_bytes(first.to_json()), fsync=self.fsync)

    def write(self, version: FinalizedFeatures) -> None:
        """Replace the file (the controller only).

        Raises:
            OSError: the write failed; the previous file is intact.
        """
        atomic.write_json(self.path, version.to_json(), fsync=self.fsync)
