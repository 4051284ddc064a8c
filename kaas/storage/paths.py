"""The data directory layout (design section 3), in one place."""

from __future__ import annotations

import hashlib
import os
import urllib.parse
from pathlib import Path

MAX_ENCODED = 200


class Layout:
    """Paths under one data directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.cluster = self.root / "__cluster"
        self.data = self.root / "data"
        self.run = self.root / "run"
        self.topics = self.cluster / "topics"
        self.brokers = self.cluster / "brokers"
        self.controller = self.cluster / "controller"
        self.producer_ids = self.cluster / "producer_ids"
        self.producer_fences = self.cluster / "producer_fences"
        self.txn_state = self.cluster / "txn_state"
        self.marker_queue = self.cluster / "marker_queue"
        self.consumer_offsets = self.cluster / "consumer_offsets"
        self.assignment = self.cluster / "assignment.json"
        self.deaths = self.cluster / "deaths"
        self.security = self.cluster / "security"
        self.scram_credentials = self.security / "scram-credentials.json"
        self.group_configs = self.cluster / "group_configs.json"
        self.features = self.cluster / "features.json"
        self.client_quotas = self.cluster / "client_quotas.json"

    def ensure(self) -> None:
        for d in (self.cluster, self.data, self.run, self.topics, self.brokers, self.controller,
                  self.producer_ids, self.producer_fences, self.txn_state, self.marker_queue,
                  self.consumer_offsets, self.deaths, self.security):
            d.mkdir(parents=True, exist_ok=True)

    def topic_file(self, topic: str) -> Path:
        return self.topics / f"{topic}.json"

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.data / topic / str(partition)

    def topic_dir(self, topic: str) -> Path:
        return self.data / topic

    def broker_file(self, broker_id: int) -> Path:
        return self.brokers / f"kaas-{broker_id}.json"

    def death_file(self, broker_id: int) -> Path:
        """The death notice of broker ``broker_id``: written only by its supervisor."""
        return self.deaths / f"kaas-{broker_id}.json"

    def pid_block_file(self, broker_id: int) -> Path:
        return self.producer_ids / f"kaas-{broker_id}.json"

    def fence_log(self, broker_id: int) -> Path:
        return self.producer_fences / f"kaas-{broker_id}.log"

    def slot_file(self, slot: int) -> Path:
        return self.txn_state / f"slot-{slot}.json"

    def marker_dir(self, broker_id: int) -> Path:
        return self.marker_queue / f"to-{broker_id}"

    def group_file(self, group: str) -> Path:
        return self.consumer_offsets / f"{encode_name(group)}.json"

    def pid_file(self, broker_id: int) -> Path:
        return self.run / f"kaas-{broker_id}.pid"


def encode_name(name: str) -> str:
    """A file-name-safe, reversible encoding of an arbitrary id (group ids may hold '/')."""
    if name == "":
        return "%"
    enc = urllib.parse.quote(name, safe="-_").replace(".", "%2E")
    if len(enc) > MAX_ENCODED:
        # Too long for a file name: a readable prefix plus a digest of the whole id. Such a
        # name is not reversible; readers take the id from the file's own content.
        enc = enc[:120] + "~" + hashlib.sha256(name.encode()).hexdigest()
    return enc


def is_digest_name(enc: str) -> bool:
    return "~" in enc


def decode_name(enc: str) -> str:
    """The id of an ``encode_name`` result (not for digest names: see ``is_digest_name``)."""
    if enc == "%":
        return ""
    return urllib.parse.unquote(enc)


def volume_bytes(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path`` (DescribeLogDirs, as
    Apache reports a log directory's: the size, and what an unprivileged writer may still
    use).

    Raises:
        OSError: the path cannot be examined.
    """
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
