"""The authoriser, pure: ACL bindings, Apache Kafka's matching rules, and the filters of
DescribeAcls/DeleteAcls. No I/O, no clock: a snapshot of bindings in, decisions out.

Apache's semantics (``AclAuthorizer``/``StandardAuthorizer``), as kept here:

- a binding is (resource type, resource name, pattern type) + (principal, host,
  operation, permission);
- a LITERAL pattern matches its own name, and the LITERAL name ``*`` every name of its
  type; a PREFIXED pattern matches every name that starts with it;
- a principal matches itself and ``User:*``; a host matches itself and ``*``;
- super users are always allowed;
- a request is allowed when no matching DENY binding exists (operation equal or ALL) and a
  matching ALLOW binding does (its operation equal, ALL, or one that implies the asked one:
  READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS);
- when no binding at all names the resource (any principal), the answer is
  ``allow_everyone_if_no_acl_found`` (False by default).

Invariants:
    - adding a DENY binding never turns a denial into an allowance;
    - a super user is allowed whatever the bindings;
    - ``Authorizer.deny_all`` (the ACL file was unreadable at start) denies everyone but
      super users.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TypeVar


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
MEMO_LIMIT = 65536  # decisions an Authorizer remembers before it starts over

# resource types a binding may name (kaas has no delegation tokens or user quotas)
BINDABLE_TYPES = frozenset({ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                            ResourceType.TRANSACTIONAL_ID})

# the operations whose ALLOW grants the key (Apache: DESCRIBE is implied by READ, WRITE,
# DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS; ALL implies every operation)
_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER, Operation.ALL}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.ALL}),
}

# the operations each resource type has (the ``*_authorized_operations`` bit fields)
OPERATIONS_OF: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),  # (the configs: Apache 4's group configs)
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}


def granting(op: Operation) -> frozenset[Operation]:
    """The binding operations whose ALLOW grants ``op``."""
    return _IMPLIED_BY.get(op) or frozenset({op, Operation.ALL})


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def pattern_matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's resource pattern covers the resource ``name``."""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        return self.pattern_type == PatternType.PREFIXED and name.startswith(self.name)

    def entry_matches(self, principal: str, host: str) -> bool:
        return (self.principal == principal or self.principal == WILDCARD_PRINCIPAL) \
            and (self.host == host or self.host == WILDCARD)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls/DeleteAcls filter (Apache's AclBindingFilter): None names match any
    value; ANY matches any type, operation or permission; the pattern type MATCH matches
    every pattern that would apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.name is not None:
            if self.pattern_type in (PatternType.ANY, b.pattern_type):
                if self.name != b.name:
                    return False
            elif b.pattern_type == PatternType.LITERAL:  # filter MATCH
                if b.name != self.name and b.name != WILDCARD:
                    return False
            elif not self.name.startswith(b.name):  # filter MATCH, pattern PREFIXED
                return False
        return (self.principal is None or self.principal == b.principal) \
            and (self.host is None or self.host == b.host) \
            and (self.operation == Operation.ANY or self.operation == b.operation) \
            and (self.permission == Permission.ANY or self.permission == b.permission)


def valid_principal(principal: str) -> bool:
    """``Type:name`` with a non-empty type (Apache's KafkaPrincipal parse)."""
    kind, sep, _name = principal.partition(":")
    return bool(sep and kind)


_E = TypeVar("_E", bound=IntEnum)


def _enum(cls: type[_E], value: int) -> _E:
    try:
        return cls(value)
    except ValueError:
        return cls(0)


def binding(resource_type: int, name: str, pattern_type: int, principal: str, host: str,
            operation: int, permission: int) -> AclBinding:
    """An ``AclBinding`` from wire values (unknown codes become UNKNOWN; see ``invalid_binding``)."""
    return AclBinding(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type), principal,
                      host, _enum(Operation, operation), _enum(Permission, permission))


def acl_filter(resource_type: int, name: str | None, pattern_type: int, principal: str | None,
               host: str | None, operation: int, permission: int) -> AclFilter:
    """An ``AclFilter`` from wire values (see ``invalid_filter``)."""
    return AclFilter(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type), principal,
                     host, _enum(Operation, operation), _enum(Permission, permission))


def invalid_binding(b: AclBinding) -> str | None:
    """Why CreateAcls must refuse ``b`` (INVALID_REQUEST), or None when it is a valid ACL."""
    if b.resource_type not in BINDABLE_TYPES:
        return f"resource type {b.resource_type.name} cannot carry ACLs"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"pattern type {b.pattern_type.name} is only valid in a filter"
    if b.operation in (Operation.ANY, Operation.UNKNOWN):
        return f"operation {b.operation.name} is only valid in a filter"
    if b.permission in (Permission.ANY, Permission.UNKNOWN):
        return f"permission {b.permission.name} is only valid in a filter"
    if not b.name:
        return "resource name must not be empty"
    if b.resource_type == ResourceType.CLUSTER and b.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if b.pattern_type == PatternType.PREFIXED and b.name == WILDCARD:
        return "a PREFIXED pattern cannot be the wildcard '*'"
    if not valid_principal(b.principal):
        return f"principal {b.principal!r} is not TYPE:NAME"
    if not b.host:
        return "host must not be empty"
    return None


def filter_only(b: AclBinding) -> str | None:
    """Why ``b`` cannot even be an ACL, or None: a value only a filter may hold (resource
    type ANY, pattern type ANY or MATCH, operation ANY, permission ANY). Apache's binding
    classes throw on these, and the whole CreateAcls request fails with
    UNKNOWN_SERVER_ERROR for every creation."""
    if b.resource_type == ResourceType.ANY:
        return "resourceType must not be ANY"
    if b.pattern_type in (PatternType.ANY, PatternType.MATCH):
        return "patternType must not be ANY or MATCH"
    if b.operation == Operation.ANY:
        return "operation must not be ANY"
    if b.permission == Permission.ANY:
        return "permissionType must not be ANY"
    return None


def unknown_codes(*codes: int) -> bool:
    """Whether a filter's or creation's wire codes (resource type, pattern type, operation,
    permission) hold 0, UNKNOWN: Apache's request classes refuse such a request while
    parsing it, and the connection is closed. (Another code no enum has also reads as
    UNKNOWN, but passes that check: a filter with one matches nothing.)"""
    return 0 in codes


def invalid_filter(f: AclFilter) -> str | None:
    """Why DescribeAcls/DeleteAcls must refuse ``f`` (INVALID_REQUEST), or None."""
    if f.principal is not None and not valid_principal(f.principal):
        return f"principal {f.principal!r} is not TYPE:NAME"
    return None


@dataclass(frozen=True, slots=True)
class Authorizer:
    """A snapshot of the ACLs and the authoriser's settings; ``authorize`` decides.

    Args:
        bindings: every ACL of the cluster.
        super_users: principals always allowed (``super.users``).
        allow_if_no_acl: ``allow.everyone.if.no.acl.found``.
        deny_all: no ACLs could be read (a corrupt file at start): deny all but super users.
    """

    bindings: tuple[AclBinding, ...] = ()
    super_users: frozenset[str] = frozenset()
    allow_if_no_acl: bool = False
    deny_all: bool = False
    _literal: dict[tuple[ResourceType, str], list[AclBinding]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _prefixed: dict[ResourceType, list[AclBinding]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _decided: dict[tuple[str, str, Operation, ResourceType, str], bool] = field(
        default_factory=dict, init=False, repr=False, compare=False)  # memo of authorize

    def __post_init__(self) -> None:
        for b in self.bindings:
            if b.pattern_type == PatternType.LITERAL:
                self._literal.setdefault((b.resource_type, b.name), []).append(b)
            elif b.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(b.resource_type, []).append(b)

    def matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every binding whose pattern covers the resource, whatever its entry."""
        out = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            out += self._literal.get((resource_type, WILDCARD), ())
        out += [b for b in self._prefixed.get(resource_type, ()) if name.startswith(b.name)]
        return out

    def authorize(self, principal: str, host: str, op: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether ``principal`` connecting from ``host`` may do ``op`` on the resource.
        (Memoised: the snapshot never changes, and a client asks the same few questions
        on every request.)"""
        if principal in self.super_users:
            return True
        key = (principal, host, op, resource_type, name)
        got = self._decided.get(key)
        if got is None:
            if len(self._decided) >= MEMO_LIMIT:
                self._decided.clear()
            got = self._decided[key] = self._decide(principal, host, op, resource_type, name)
        return got

    def _decide(self, principal: str, host: str, op: Operation, resource_type: ResourceType, name: str) -> bool:
        if self.deny_all:
            return False
        acls = self.matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        allow = False
        grants = granting(op)
        for b in acls:
            if not b.entry_matches(principal, host):
                continue
            if b.permission == Permission.DENY:
                if b.operation == op or b.operation == Operation.ALL:
                    return False
            elif b.permission == Permission.ALLOW and b.operation in grants:
                allow = True
        return allow

    def authorize_any(self, principal: str, host: str, op: Operation, resource_type: ResourceType) -> bool:
        """Whether ``principal`` may do ``op`` on at least one resource of the type (Apache's
        ``authorizeByResourceType``, KIP-679): some ALLOW pattern of the principal is not
        wholly covered by its DENY patterns. With no binding of the type at all, the answer
        is ``allow_if_no_acl``."""
        if principal in self.super_users:
            return True
        if self.deny_all:
            return False
        of_type = [b for b in self.bindings if b.resource_type == resource_type]
        if not of_type:
            return self.allow_if_no_acl
        grants = granting(op)
        deny_lit: set[str] = set()
        deny_pre: list[str] = []
        allow_lit: list[str] = []
        allow_pre: list[str] = []
        for b in of_type:
            if not b.entry_matches(principal, host):
                continue
            if b.permission == Permission.DENY and b.operation in (op, Operation.ALL):
                (deny_lit.add(b.name) if b.pattern_type == PatternType.LITERAL else deny_pre.append(b.name))
            elif b.permission == Permission.ALLOW and b.operation in grants:
                (allow_lit if b.pattern_type == PatternType.LITERAL else allow_pre).append(b.name)
        if WILDCARD in deny_lit or "" in deny_pre:
            return False
        for name in allow_lit:
            if name == WILDCARD:  # every name, and no hard deny: some name stays allowed
                return True
            if name not in deny_lit and not any(name.startswith(p) for p in deny_pre):
                return True
        return any(not any(name.startswith(p) for p in deny_pre) for name in allow_pre)

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The ``*_authorized_operations`` bit field: bit ``op`` set for each operation of
        the resource type the principal may do on the resource."""
        bits = 0
        for op in OPERATIONS_OF.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits


def apply_create(bindings: Iterable[AclBinding], new: Iterable[AclBinding]) -> tuple[AclBinding, ...]:
    """``bindings`` with ``new`` added (a binding already present is kept once)."""
    out = dict.fromkeys(bindings)
    out.update(dict.fromkeys(new))
    return tuple(out)


def apply_delete(bindings: Iterable[AclBinding], filters: Iterable[AclFilter]
                 ) -> tuple[tuple[AclBinding, ...], list[list[AclBinding]]]:
    """(the bindings no filter matches, the bindings each filter matched, in order)."""
    bindings = tuple(bindings)
    filters = list(filters)
    matched = [[b for b in bindings if f.matches(b)] for f in filters]
    gone = {b for m in matched for b in m}
    return tuple(b for b in bindings if b not in gone), matched
