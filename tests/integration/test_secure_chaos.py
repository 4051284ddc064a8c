"""The EOS harness on a 3-broker ``kaas cluster --secure`` while random brokers are
SIGKILLed (issue 21): ``python scripts/chaos run --secure``. The copiers, the seeding producer
and the verifier are SCRAM-SHA-512 users of their own over SASL_SSL with only the ACLs
they need (``eos_harness.acls.acl_plan``); exactly-once must hold, the ACLs read back must be
exactly the plan, and the copier user must be refused what the plan leaves out (writing
the input topic: TOPIC_AUTHORIZATION_FAILED; setting a SCRAM password:
CLUSTER_AUTHORIZATION_FAILED), so it is no super user. At the end the harness removes its
users and ACLs and nothing else: read back from the cluster (DescribeUserScramCredentials,
DescribeAcls) before it is stopped, none of the harness's is left, and the super users and
a bystander user with ACLs on the same resources, made before the run, are all still
there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]


def test_secure_chaos_keeps_exactly_once_with_least_privilege():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "chaos"), "run", "--scenario", "random-kills", "--secure",
         "--seed", "4242", "--messages", "1500", "--copiers", "2", "--duration", "20", "--timeout", "90"],
        capture_output=True, text=True, timeout=240, cwd=ROOT)
    out = [line for line in proc.stdout.splitlines() if not line.startswith("%")]
    tail = "\n".join(out)[-3000:]
    assert proc.returncode == 0, tail
    r = json.loads(out[-1])
    assert r["ok"] and r["secure"] and r["scenario"] == "random-kills", tail
    assert r["kills"] >= 1 and r["duplicates"] == r["losses"] == r["aborted_visible"] == 0
    sec = r["security"]
    copier = sec["principals"]["copier"]
    assert copier.startswith("User:chaos-") and copier.endswith("-copier")
    assert copier not in ("User:admin", "User:kaas-broker")  # the secure cluster's super users
    assert sec["copiers_ran_as"] == [copier]  # every copier incarnation
    run_id = copier[len("User:chaos-"):-len("-copier")]
    group, producer, verifier = f"chaos-{run_id}", sec["principals"]["producer"], sec["principals"]["verifier"]
    assert sec["acls"] == sorted([
        f"{copier} ALLOW READ TOPIC:LITERAL:chaos-in-{run_id}",
        f"{copier} ALLOW WRITE TOPIC:LITERAL:chaos-out-{run_id}",
        f"{copier} ALLOW READ GROUP:LITERAL:{group}",
        f"{copier} ALLOW WRITE TRANSACTIONAL_ID:PREFIXED:{group}-copier-",
        f"{producer} ALLOW WRITE TOPIC:LITERAL:chaos-in-{run_id}",
        f"{verifier} ALLOW READ TOPIC:LITERAL:chaos-out-{run_id}",
        f"{verifier} ALLOW READ GROUP:LITERAL:{group}-verify",
    ])
    assert sec["probes"] == {
        "copier writes the input topic": "TOPIC_AUTHORIZATION_FAILED",
        "copier initialises a transactional id outside its prefix": "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "verifier writes the output topic": "TOPIC_AUTHORIZATION_FAILED",
        "copier sets a SCRAM password": "CLUSTER_AUTHORIZATION_FAILED",
    }
    assert sec["least_privilege"] and sec["acls_match_plan"]
    # the end: exactly the harness's users and ACLs were removed (as the controller answered)...
    cleanup = sec["cleanup"]
    ours = {copier, producer, verifier}
    assert not cleanup["kept"] and cleanup["left"] == {} and r["warnings"] == [], tail
    assert sorted(cleanup["removed_users"]) == sorted(p[len("User:"):] for p in ours)
    assert cleanup["removed_acls"] == sec["acls"]
    # ...and the cluster, read back afterwards, has none of them but everything else
    after, bystander = r["cluster_after"], r["bystander"]
    assert "error" not in after, after
    assert not ours & {f"User:{u}" for u in after["users"]}, after["users"]
    assert not [a for a in after["acls"] if a.split(" ", 1)[0] in ours], after["acls"]
    assert {"admin", "kaas-broker", bystander["user"]} <= set(after["users"]), after["users"]
    assert bystander["acls"] and set(bystander["acls"]) <= set(after["acls"]), (bystander, after["acls"])
    # the bystander's ACLs sit on the plan's own resources, so a wider removal would have taken them
    assert f"User:{bystander['user']} ALLOW READ TOPIC:LITERAL:chaos-in-{run_id}" in bystander["acls"]
    assert f"User:{bystander['user']} ALLOW READ TOPIC:PREFIXED:chaos-" in bystander["acls"]
