"""The broker's topics as a modern group (KIP-848 consumer groups, KIP-932 share groups)
sees them: ids, names and partition counts, versioned so that a group recomputes what
depends on them only when they change.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["TopicImage", "TopicInfo"]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: str
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class TopicImage:
    """The broker's topics as a group sees them. ``version`` changes whenever they do (the
    groups recompute what depends on them only then)."""

    version: int
    by_name: Mapping[str, TopicInfo]
    by_id: Mapping[str, TopicInfo]

    @classmethod
    def of(cls, version: int, topics: Iterable[TopicInfo]) -> TopicImage:
        ts = list(topics)
        return cls(version, {t.name: t for t in ts}, {t.topic_id: t for t in ts})
