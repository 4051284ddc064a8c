"""``__cluster/client_quotas.json``: the client quotas (KIP-546):
``{"format": 1, "version": n, "entries": [{"entity": {"user": "alice", "client-id": null},
"quotas": {"producer_byte_rate": 1048576.0}}]}`` (a null name: the default entity).

Invariants:
    - one writer, the controller (other brokers forward AlterClientQuotas to it); every
      write replaces the whole file (tmp + fsync + rename) with ``version`` one above the
      version it was computed from; an entity whose quotas are all removed leaves the file;
    - a file that does not parse, or holds an entry ``domain.client_quotas`` would never have
      written, is ``CorruptState``, never "no quotas"; no file is no quotas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, cast

from kaas.domain import client_quotas
from kaas.domain.client_quotas import Entity
from kaas.errors import CorruptState
from kaas.storage import atomic

FORMAT = 1


class QuotaEntry(TypedDict):
    """One entity (its entity types' names; None: the default of that type) and its quotas."""

    entity: dict[str, str | None]
    quotas: dict[str, float]


class ClientQuotasRecord(TypedDict):
    """The client quota file, format 1."""

    format: int
    version: int
    entries: list[QuotaEntry]


@dataclass(frozen=True, slots=True)
class ClientQuotas:
    """One version of the file: each entity's quotas (only entities that have some)."""

    version: int = 0
    entries: dict[Entity, dict[str, float]] = field(default_factory=dict)

    def with_entries(self, changed: dict[Entity, dict[str, float]]) -> ClientQuotas:
        """The next version, with ``changed`` entities' quotas replaced (empty: removed)."""
        entries = {e: dict(q) for e, q in self.entries.items()}
        for entity, quotas in changed.items():
            if quotas:
                entries[entity] = dict(quotas)
            else:
                entries.pop(entity, None)
        return ClientQuotas(self.version + 1, entries)

    def to_json(self) -> ClientQuotasRecord:
        return {"format": FORMAT, "version": self.version,
                "entries": [{"entity": dict(e), "quotas": dict(sorted(q.items()))}
                            for e, q in sorted(self.entries.items(), key=lambda x: repr(x[0]))]}

    @classmethod
    def from_json(cls, path: Path, raw: Mapping[str, object]) -> ClientQuotas:
        """The file's JSON object, checked entry by entry.

        Raises:
            CorruptState: not a format-1 quota file, or an entry no validation would write.
        """
        obj = cast(ClientQuotasRecord, raw)
        try:
            if obj.get("format") != FORMAT:
                raise ValueError(f"format {obj.get('format')!r}")
            entries: dict[Entity, dict[str, float]] = {}
            for item in obj["entries"]:
                names, quotas = item["entity"], item["quotas"]
                if not isinstance(names, dict) or not isinstance(quotas, dict):
                    raise ValueError("entity and quotas must be objects")
                if any(n is not None and not isinstance(n, str) for n in names.values()):
                    raise ValueError(f"entity {names!r}: names must be strings or null")
                entity: Entity = tuple(sorted(names.items()))
                why = client_quotas.check_stored(entity, quotas)
                if why is not None or entity in entries:
                    raise ValueError(f"entity {names!r}: {why or 'listed twice'}")
                entries[entity] = {k: float(v) for k, v in quotas.items()}
            return cls(int(obj["version"]), entries)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptState(str(path), f"bad client quota file: {exc}") from None


class ClientQuotaFile:
    """Read and (the controller only) write the client quotas."""

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync

    def signature(self) -> tuple[int, int, int, int] | None:
        return atomic.stat_signature(self.path)

    def read(self) -> ClientQuotas:
        """The file as it is now (no quotas when there is none).

        Raises:
            CorruptState: the file does not parse as a quota file.
            OSError: it could not be read.
        """
        obj = atomic.read_json(self.path)
        if obj is None:
            return ClientQuotas()
        return ClientQuotas.from_json(self.path, obj)

    def write(self, quotas: ClientQuotas) -> None:
        """Replace the file (the controller only).

        Raises:
            OSError: the write failed; the previous file is intact.
        """
        atomic.write_json(self.path, quotas.to_json(), fsync=self.fsync)
