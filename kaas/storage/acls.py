"""The cluster's ACLs: ``__cluster/security/acls.json``.

``{"format": 1, "acls": [{"resource_type": "TOPIC", "name": "t", "pattern_type": "LITERAL",
"principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW"}, ...]}``

Invariants:
    - one writer, the controller (other brokers forward CreateAcls/DeleteAcls to it);
      every write replaces the whole file (tmp + fsync + rename, ``storage.atomic``);
    - a file that does not parse, or holds an entry that is not a valid ACL, raises
      ``CorruptState``: it is never read as "no ACLs". No file at all is no ACLs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict, cast

from kaas.domain.acl import AclBinding, Operation, PatternType, Permission, ResourceType, invalid_binding
from kaas.errors import CorruptState
from kaas.storage import atomic

FORMAT = 1


class AclEntry(TypedDict):
    """One binding, its enums by name (``ResourceType``, ``PatternType``, ...)."""

    resource_type: str
    name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str


class AclsFile(TypedDict):
    """``acls.json``, format 1."""

    format: int
    acls: list[AclEntry]


def acls_path(cluster_dir: Path) -> Path:
    """Where the ACLs live under ``DATA/__cluster``."""
    return Path(cluster_dir) / "security" / "acls.json"


def encode(bindings: tuple[AclBinding, ...]) -> bytes:
    record: AclsFile = {"format": FORMAT, "acls": [
        {"resource_type": b.resource_type.name, "name": b.name, "pattern_type": b.pattern_type.name,
         "principal": b.principal, "host": b.host, "operation": b.operation.name,
         "permission": b.permission.name} for b in bindings]}
    return atomic.json_bytes(record)


def decode(path: Path, data: bytes) -> tuple[AclBinding, ...]:
    """The bindings of an ACL file's content.

    Raises:
        CorruptState: not a format-1 ACL file, or an entry that is not a valid ACL.
    """
    obj = cast(AclsFile, atomic.parse_json(path, data))
    if obj.get("format") != FORMAT or not isinstance(obj.get("acls"), list):
        raise CorruptState(str(path), f"not a format-{FORMAT} ACL file")
    out = []
    for i, e in enumerate(obj["acls"]):
        try:
            b = AclBinding(ResourceType[e["resource_type"]], str(e["name"]), PatternType[e["pattern_type"]],
                           str(e["principal"]), str(e["host"]), Operation[e["operation"]],
                           Permission[e["permission"]])
        except (KeyError, TypeError) as exc:
            raise CorruptState(str(path), f"entry {i}: {exc!r}") from None
        why = invalid_binding(b)
        if why is not None:
            raise CorruptState(str(path), f"entry {i}: {why}")
        out.append(b)
    return tuple(out)


class AclFile:
    """Read and (the controller only) write the ACL file.

    Args:
        path: ``acls_path(cluster_dir)``.
        fsync: fsync the writes (tests turn it off).
    """

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync

    def signature(self) -> tuple[int, int, int, int] | None:
        """``atomic.stat_signature`` of the file: a change means it should be read again."""
        return atomic.stat_signature(self.path)

    def read(self) -> tuple[AclBinding, ...]:
        """The ACLs as the file holds them now (none when there is no file).

        Raises:
            CorruptState: the file is unreadable as an ACL file.
            OSError: the file could not be read.
        """
        try:
            with open(self.path, "rb", buffering=0) as f:
                data = f.readall()
        except FileNotFoundError:
            return ()
        return decode(self.path, data)

    def write(self, bindings: tuple[AclBinding, ...]) -> None:
        """Replace the file with ``bindings``.

        Raises:
            OSError: the write failed; the previous file is intact.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(self.path, encode(bindings), fsync=self.fsync)
