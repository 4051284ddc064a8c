"""scripts/eos_harness.py --secure: the ACL plan of the least-privilege users is what
Apache's operation table asks of the copiers, the seeding producer and the verifier, and
nothing wider (no cluster resource, no wildcard, no ALL, a prefix only for the copiers'
transactional ids); a plaintext run has no security settings."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import eos_harness  # noqa: E402

CFG = {"input": "in-1", "output": "out-1", "group": "g-1"}


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
    cfg = {**CFG, "security": {"admin": {"security.protocol": "SASL_SSL"}, "copier": {"sasl.username": "c"}}}
    assert eos_harness.security(cfg) == {"security.protocol": "SASL_SSL"}
    assert eos_harness.security(cfg, "copier") == {"sasl.username": "c"}
    assert eos_harness.security(cfg, "verifier") == {}


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
    ]
    for args, said in cases:
        result = CliRunner().invoke(eos_harness.cli, ["run", *args])
        assert result.exit_code == 2 and said in result.output, result.output
