"""The subscribed topics of a modern group over the topic image: what of them exists (name,
id, partitions), which is what a target assignment depends on. A consumer group keeps a
digest of it (``metadata_signature``, its ``signature`` on file), a share group the map
itself (its ``metadata`` on file); either recomputes the assignment when it moves.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from kaas.domain.groups.modern.topic_image import TopicImage

__all__ = ["metadata_signature", "subscribed_metadata"]


def subscribed_metadata(names: Iterable[str], image: TopicImage) -> dict[str, tuple[str, int]]:
    """Each subscribed topic that exists: name -> (topic id, partitions)."""
    out = {}
    for name in names:
        t = image.by_name.get(name)
        if t is not None:
            out[name] = (t.topic_id, t.partitions)
    return out


def metadata_signature(metadata: Mapping[str, tuple[str, int]]) -> str:
    """A digest of ``subscribed_metadata`` (sha256 over the sorted names, their ids and
    partition counts): equal digests, equal metadata."""
    h = hashlib.sha256()
    for name in sorted(metadata):
        topic_id, partitions = metadata[name]
        h.update(f"{name}\0{topic_id}\0{partitions}\n".encode())
    return h.hexdigest()
