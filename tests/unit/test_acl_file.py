"""The ACL file (kaas.storage.acls): round trip, and every corruption refused, never read
as "no ACLs"."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaas.domain.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from kaas.errors import CorruptState
from kaas.storage.acls import AclFile, acls_path, decode, encode

B = AclBinding(ResourceType.TOPIC, "t", PatternType.PREFIXED, "User:a", "*", Operation.WRITE, Permission.DENY)

bindings = st.builds(AclBinding, st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP,
                                                  ResourceType.TRANSACTIONAL_ID]),
                     st.text(min_size=1, max_size=5).filter(lambda n: n != "*"),
                     st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
                     st.text(min_size=1, max_size=4).map(lambda n: f"User:{n}"), st.sampled_from(["*", "::1"]),
                     st.sampled_from([o for o in Operation if o.value > 1]),
                     st.sampled_from([Permission.ALLOW, Permission.DENY]))


@given(st.lists(bindings, max_size=6))
def test_round_trip(acls):
    assert decode("x", encode(tuple(acls))) == tuple(acls)


def test_file(tmp_path):
    f = AclFile(acls_path(tmp_path / "__cluster"), fsync=False)
    assert f.read() == () and f.signature() is None
    f.write((B,))
    assert f.read() == (B,) and f.signature() is not None
    assert f.path.name == "acls.json" and f.path.parent.name == "security"


@pytest.mark.parametrize("content", [
    b"", b"{", b"[]", b'{"acls": []}', b'{"format": 2, "acls": []}', b'{"format": 1}',
    b'{"format": 1, "acls": [{"resource_type": "TOPIC"}]}',
    b'{"format": 1, "acls": [{"resource_type": "NOPE", "name": "t", "pattern_type": "LITERAL", '
    b'"principal": "User:a", "host": "*", "operation": "READ", "permission": "ALLOW"}]}',
    b'{"format": 1, "acls": [{"resource_type": "TOPIC", "name": "t", "pattern_type": "MATCH", '
    b'"principal": "User:a", "host": "*", "operation": "READ", "permission": "ALLOW"}]}',
    b'{"format": 1, "acls": [{"resource_type": "TOPIC", "name": "t", "pattern_type": "LITERAL", '
    b'"principal": "nobody", "host": "*", "operation": "READ", "permission": "ALLOW"}]}',
    b'{"format": 1, "acls": [7]}',
])
def test_corrupt_is_refused(tmp_path, content):
    f = AclFile(tmp_path / "acls.json")
    f.path.write_bytes(content)
    with pytest.raises(CorruptState):
        f.read()
