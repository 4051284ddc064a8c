"""The EOS harness on a 3-broker ``kaas cluster --secure`` while random brokers are
SIGKILLed (issue 21): ``scripts/chaos.py run --secure``. The copiers, the seeding producer
and the verifier are SCRAM-SHA-512 users of their own over SASL_SSL with only the ACLs
they need (``eos_harness.acl_plan``); exactly-once must hold, the ACLs read back must be
exactly the plan, and the copier user must be refused what the plan leaves out (writing
the input topic: TOPIC_AUTHORIZATION_FAILED; setting a SCRAM password:
CLUSTER_AUTHORIZATION_FAILED), so it is no super user."""

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
        [sys.executable, str(ROOT / "scripts" / "chaos.py"), "run", "--scenario", "random-kills", "--secure",
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
