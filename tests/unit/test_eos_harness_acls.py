"""scripts/eos_harness --secure: the ACL plan of the least-privilege users is what
Apache's operation table asks of the copiers, the seeding producer and the verifier, and
nothing wider (no cluster resource, no wildcard, no ALL, a prefix only for the copiers'
transactional ids); a plaintext run has no security settings. At the end the harness
removes its users and ACLs: the DeleteAcls filters match the plan's ACLs and nothing else
(by the broker's own matcher), a removal that fails is asked again and what stays is
reported, and --keep-users leaves them."""

from __future__ import annotations

import pickle
import sys
from concurrent.futures import Future
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import click
import pytest
from confluent_kafka import KafkaError, KafkaException

from kaas.domain.acl import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import eos_harness  # noqa: E402
from eos_harness import acls  # noqa: E402
from eos_harness.cli import cli  # noqa: E402

CFG = eos_harness.HarnessConfig(bootstrap="127.0.0.1:1", input="in-1", output="out-1", group="g-1", seed=1)


def test_the_plan_is_exactly_what_each_role_needs():
    assert sorted(eos_harness.acl_plan(CFG)) == sorted([
        ("copier", "TOPIC", "LITERAL", "in-1", "READ"),
        ("copier", "TOPIC", "LITERAL", "out-1", "WRITE"),
        ("copier", "GROUP", "LITERAL", "g-1", "READ"),
        ("copier", "TRANSACTIONAL_ID", "PREFIXED", "g-1-copier-", "WRITE"),
        ("producer", "TOPIC", "LITERAL", "in-1", "WRITE"),
        ("verifier", "TOPIC", "LITERAL", "out-1", "READ"),
        ("verifier", "GROUP", "LITERAL", "g-1-verify", "READ"),
    ])
    # every copier's transactional id falls under the one prefix
    assert all(f"{eos_harness.txn_id_prefix(CFG)}{i}".startswith("g-1-copier-") for i in range(3))


def test_nothing_wider_than_needed():
    for role, rtype, pattern, name, op in eos_harness.acl_plan(CFG):
        assert role in eos_harness.ROLES
        assert rtype != "CLUSTER" and op not in ("ALL", "IDEMPOTENT_WRITE", "DESCRIBE") and "*" not in name
        assert pattern == "LITERAL" or rtype == "TRANSACTIONAL_ID"


def test_security_settings_per_role():
    assert eos_harness.security(CFG) == {} and eos_harness.security(CFG, "copier") == {}
    cfg = replace(CFG, security={"admin": {"security.protocol": "SASL_SSL"}, "copier": {"sasl.username": "c"}})
    assert eos_harness.security(cfg) == {"security.protocol": "SASL_SSL"}
    assert eos_harness.security(cfg, "copier") == {"sasl.username": "c"}
    assert eos_harness.security(cfg, "verifier") == {}


def test_the_config_is_frozen_and_reaches_the_copiers_whole():
    """The copiers get the config pickled (multiprocessing spawn); a change is a new value."""
    cfg = replace(CFG, secure=True, security={"copier": {"sasl.username": "c"}})
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    with pytest.raises(FrozenInstanceError):
        cfg.messages = 1  # type: ignore[misc]
    run = eos_harness.HarnessConfig.new_run("b:1", 7, prefix="chaos", group_prefix="chaos", copiers=2)
    run_id = run.group.removeprefix("chaos-")
    assert (run.input, run.output, run.copiers, run.seed) == (f"chaos-in-{run_id}", f"chaos-out-{run_id}", 2, 7)


def test_security_options_that_do_not_go_together_are_refused(tmp_path):
    """No option is taken and then ignored: --command-config names the admin of a cluster
    given with --bootstrap; a cluster the harness starts makes its own."""
    from click.testing import CliRunner

    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_SSL\n")
    cases = [
        (["--start-cluster", "1", "--secure", "--command-config", str(props)], "goes with --bootstrap"),
        (["--bootstrap", "127.0.0.1:1", "--command-config", str(props)], "goes with --secure"),
        (["--bootstrap", "127.0.0.1:1", "--secure"], "needs the admin's --command-config"),
        (["--bootstrap", "127.0.0.1:1", "--keep-users"], "--keep-users goes with --bootstrap and --secure"),
        (["--start-cluster", "1", "--secure", "--keep-users"], "--keep-users goes with --bootstrap and --secure"),
    ]
    for args, said in cases:
        result = CliRunner().invoke(cli, ["run", *args])
        assert result.exit_code == 2 and said in result.output, result.output


def _binding(rtype: str, name: str, pattern: str, principal: str, op: str, host: str = "*",
             permission: str = "ALLOW") -> AclBinding:
    return AclBinding(ResourceType[rtype], name, PatternType[pattern], principal, host, Operation[op],
                      Permission[permission])


def _filter(rtype, name, pattern, principal, host, op, permission) -> AclFilter:
    return AclFilter(ResourceType[rtype], name, PatternType[pattern], principal, host, Operation[op],
                     Permission[permission])


def test_the_delete_filters_match_the_plan_and_nothing_else():
    plan = eos_harness.acl_plan(CFG)
    filters = eos_harness.revoke_filters(CFG, plan)
    assert len(filters) == len(plan)
    for f in filters:  # every part named: no None, no ANY, no MATCH
        assert None not in f and "ANY" not in f and "MATCH" not in f
        assert f[3] in {f"User:g-1-{role}" for role in eos_harness.ROLES} and f[4] == "*" and f[6] == "ALLOW"
    ours = [_binding(rtype, name, pattern, f"User:g-1-{role}", op) for role, rtype, pattern, name, op in plan]
    # what others may hold on the same resources, or the harness's principals elsewhere
    others = [
        _binding("TOPIC", "in-1", "LITERAL", "User:someone", "READ"),  # another principal, same ACL otherwise
        _binding("TOPIC", "in-1", "LITERAL", "User:*", "READ"),  # the wildcard principal
        _binding("TOPIC", "*", "LITERAL", "User:g-1-copier", "READ"),  # a wildcard resource
        _binding("TOPIC", "in", "PREFIXED", "User:g-1-copier", "READ"),  # a prefix covering the name
        _binding("TOPIC", "in-1", "PREFIXED", "User:g-1-copier", "READ"),  # same name, other pattern type
        _binding("TOPIC", "in-1", "LITERAL", "User:g-1-copier", "DESCRIBE"),  # another operation
        _binding("TOPIC", "in-1", "LITERAL", "User:g-1-copier", "READ", permission="DENY"),
        _binding("TOPIC", "in-1", "LITERAL", "User:g-1-copier", "READ", host="10.0.0.1"),
        _binding("TOPIC", "other", "LITERAL", "User:g-1-copier", "READ"),  # another resource
        _binding("GROUP", "g-1", "LITERAL", "User:g-1-verifier", "READ"),  # a role's principal, another's group
        _binding("TRANSACTIONAL_ID", "g-1-copier-", "PREFIXED", "User:g-1-producer", "WRITE"),
        _binding("TRANSACTIONAL_ID", "g-1-copier-0", "LITERAL", "User:g-1-copier", "WRITE"),
    ]
    for f, mine in zip(filters, ours):
        flt = _filter(*f)
        assert [b for b in ours + others if flt.matches(b)] == [mine], f


def test_the_filters_cover_only_what_was_recorded():
    """A run that failed after making only some ACLs asks only for those."""
    plan = eos_harness.acl_plan(CFG)
    assert eos_harness.revoke_filters(CFG, plan[:2]) == eos_harness.revoke_filters(CFG, plan)[:2]
    assert eos_harness.revoke_filters(CFG, []) == []
    assert not eos_harness.Grants() and eos_harness.Grants(users=["u"])


def test_keep_users_leaves_them_and_says_what_is_left():
    grants = eos_harness.Grants(users=["g-1-copier"], acls=eos_harness.acl_plan(CFG)[:1])
    said: list[str] = []
    out = eos_harness.clean_up(replace(CFG, keep_users=True), grants, echo=said.append)
    assert out == {"kept": True, "removed_users": [], "removed_acls": [], "left": {
        "user g-1-copier": "kept (--keep-users)",
        "ACL User:g-1-copier ALLOW READ TOPIC:LITERAL:in-1": "kept (--keep-users)"}}
    assert len(said) == 2


class _Binding:
    """Just what ``acl_line`` reads of a confluent-kafka AclBinding."""

    def __init__(self, f) -> None:
        from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType, ResourceType

        self.restype, self.name = ResourceType[f.restype.name], f.name
        self.resource_pattern_type, self.principal = ResourcePatternType[f.resource_pattern_type.name], f.principal
        self.host, self.operation = f.host, AclOperation[f.operation.name]
        self.permission_type = AclPermissionType[f.permission_type.name]


class _FakeAdmin:
    """An AdminClient whose first DeleteAcls answer times out for one filter, whose first
    user deletion times out after deleting (a lost answer), and that knows the users and
    ACLs the run made."""

    def __init__(self, users: set[str], acls: int) -> None:
        self.users = set(users)
        self.acl_calls: list[list] = []
        self.user_calls: list[list[str]] = []
        self.acls = acls

    def delete_acls(self, filters):
        self.acl_calls.append(filters)
        out = {}
        for i, f in enumerate(filters):
            fut = Future()
            if len(self.acl_calls) == 1 and i == 0:
                fut.set_exception(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
            else:
                fut.set_result([_Binding(f)])
            out[f] = fut
        return out

    def alter_user_scram_credentials(self, deletions):
        names = [d.user for d in deletions]
        self.user_calls.append(names)
        out = {}
        for name in names:
            fut = Future()
            if name not in self.users:
                fut.set_exception(KafkaException(KafkaError(KafkaError.RESOURCE_NOT_FOUND)))
            else:
                self.users.discard(name)
                if len(self.user_calls) == 1 and name == names[0]:
                    fut.set_exception(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
                else:
                    fut.set_result(None)
            out[name] = fut
        return out


def test_a_failed_removal_is_asked_again_and_only_for_what_is_left(monkeypatch):
    import confluent_kafka.admin

    plan = eos_harness.acl_plan(CFG)
    users = [eos_harness.user_of(CFG, role) for role in eos_harness.ROLES]
    fake = _FakeAdmin(set(users), len(plan))
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", lambda conf: fake)
    monkeypatch.setattr(acls.time, "sleep", lambda s: None)
    said: list[str] = []
    out = eos_harness.revoke_least_privilege(CFG, eos_harness.Grants(users=users, acls=plan), echo=said.append)
    assert [len(c) for c in fake.acl_calls] == [len(plan), 1]  # the second try: only the one that failed
    assert fake.user_calls == [users, users[:1]]
    assert out["left"] == {} and out["removed_users"] == sorted(users[1:])  # the first went with the lost answer
    assert out["removed_acls"] == sorted(acls._acl_text(f"User:g-1-{role}", rtype, pattern, name, op)
                                         for role, rtype, pattern, name, op in plan)
    assert any("g-1-copier was not on the cluster" in line for line in said)


def test_what_cannot_be_removed_is_reported_not_raised(monkeypatch):
    import confluent_kafka.admin

    class Down:
        def delete_acls(self, filters):
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

        def alter_user_scram_credentials(self, deletions):
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", lambda conf: Down())
    monkeypatch.setattr(acls, "REVOKE_WAIT_S", 0.0)
    plan = eos_harness.acl_plan(CFG)
    out = eos_harness.revoke_least_privilege(CFG, eos_harness.Grants(users=["g-1-copier"], acls=plan[:1]),
                                             echo=lambda *a, **k: None)
    assert out["removed_users"] == [] and out["removed_acls"] == []
    assert set(out["left"]) == {"user g-1-copier", "ACL User:g-1-copier ALLOW READ TOPIC:LITERAL:in-1"}


def test_a_user_that_exists_already_is_refused_and_nothing_recorded(monkeypatch):
    """The harness removes what it recorded; a user of its name made by someone else is
    never recorded, so never removed."""
    import confluent_kafka.admin

    class Existing:
        def describe_user_scram_credentials(self, users):
            out = {}
            for u in users:
                fut = Future()
                if u == "g-1-verifier":
                    fut.set_result(object())
                else:
                    fut.set_exception(KafkaException(KafkaError(KafkaError.RESOURCE_NOT_FOUND)))
                out[u] = fut
            return out

    monkeypatch.setattr(confluent_kafka.admin, "AdminClient", lambda conf: Existing())
    grants = eos_harness.Grants()
    cfg = replace(CFG, security={"admin": {"security.protocol": "SASL_SSL"}})
    with pytest.raises(click.ClickException, match="g-1-verifier exists already"):
        eos_harness.grant_least_privilege(cfg, echo=lambda *a, **k: None, grants=grants)
    assert not grants
