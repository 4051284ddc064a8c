"""The finalized feature levels on a running broker (KIP-584): the last good copy of
``__cluster/features.json`` (``storage.features``), polled by ``tasks.features``; what
ApiVersions advertises; the levels the feature-gated APIs check (``level``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kaas.broker.polled import PolledFile
from kaas.storage.features import FeaturesFile, FinalizedFeatures

if TYPE_CHECKING:
    from kaas.storage.paths import Layout

UNKNOWN_EPOCH = -1  # ApiVersions' FinalizedFeaturesEpoch when no good copy was ever read


class FeatureStore(PolledFile[FinalizedFeatures]):
    """The finalized features this broker applied.

    Args:
        layout: the data directory (``layout.features`` is the file).
        fsync: fsync the controller's writes.
    """

    def __init__(self, layout: Layout, *, fsync: bool = True) -> None:
        self.file = FeaturesFile(layout.features, fsync=fsync)
        self._advertised: tuple[int, tuple[tuple[str, int], ...]] = (UNKNOWN_EPOCH, ())
        super().__init__("features", self.file.signature, self.file.read,
                         lambda f: {"epoch": f.epoch, "levels": f.levels})

    def level(self, feature: str) -> int | None:
        """The finalized level of ``feature`` (0: off), or None when no good copy of the file
        was ever read (the gated APIs then answer KAFKA_STORAGE_ERROR)."""
        if self.current is None:
            return None
        return self.current.levels.get(feature, 0)

    def apply(self, content: FinalizedFeatures) -> bool:
        changed = super().apply(content)
        if changed:
            self._advertised = (content.epoch, tuple(sorted(content.levels.items())))
        return changed

    def advertised(self) -> tuple[int, tuple[tuple[str, int], ...]]:
        """(epoch, sorted finalized levels) for ApiVersions: (-1, ()) before a good read
        (computed once per applied version: ApiVersions asks per request)."""
        return self._advertised
