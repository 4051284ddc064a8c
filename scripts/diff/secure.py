"""The secure pair of ``make diff``: Apache Kafka with SASL/SCRAM and StandardAuthorizer
(``scripts/peers/apache.py --secure``) beside ``kaas cluster --secure`` (SASL_SSL, SCRAM,
the authoriser), the same users made on both, and the wait for ACL changes to reach every
broker.

On both the user ``admin`` is a super user and the diff's default principal; the corpus's
``users`` are made by the admin with AlterUserScramCredentials (both SCRAM mechanisms,
4096 iterations; one request per mechanism, since Apache refuses two changes of one
user in one request). The
transport differs (TLS in front of kaas's SASL, none in front of Apache's): it changes no
answer of the protocol.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kaas.client import parse_properties
from kaas.domain import scram

from .runner import Auth, Side

REPO = Path(__file__).resolve().parents[2]
ADMIN = "admin"
APACHE_ADMIN_PASSWORD = "admin-secret"
ITERATIONS = 4096
MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SYNC_TIMEOUT = 30.0


@contextlib.contextmanager
def apache_secure(bootstrap: str | None, brokers: int) -> Iterator[Side]:
    """A secure Apache cluster: the one at ``bootstrap`` (started with ``--secure`` and the
    default admin password), or a new one, stopped at the end."""
    auth = Auth({ADMIN: APACHE_ADMIN_PASSWORD})
    if bootstrap:
        yield Side("apache", _ports(bootstrap), auth)
        return
    proc = subprocess.Popen([sys.executable, str(REPO / "scripts" / "peers" / "apache.py"), "--brokers", str(brokers),
                             "--secure", "--admin-password", APACHE_ADMIN_PASSWORD], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line:
            raise SystemExit("diff: the secure Apache Kafka did not start")
        yield Side("apache", _ports(line), auth)
    finally:
        proc.terminate()
        proc.wait(60)


@contextlib.contextmanager
def kaas_secure(properties: str | None, brokers: int) -> Iterator[Side]:
    """A ``kaas cluster --secure``: the one whose admin settings are in ``properties``
    (``DATA/run/client.properties``), or a new one, stopped at the end."""
    if properties:
        yield _kaas_side(parse_properties(Path(properties).read_text(), properties))
        return
    from kaas.testing import cluster

    with cluster(brokers=brokers, secure=True) as c:
        yield _kaas_side({**c.client_config(), "bootstrap.servers": c.bootstrap})


def _kaas_side(props: Mapping[str, str]) -> Side:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=props["ssl.ca.location"])
    auth = Auth({props["sasl.username"]: props["sasl.password"]}, ssl_context=ctx,
                mechanism=props.get("sasl.mechanism", "SCRAM-SHA-512"), default_user=props["sasl.username"])
    return Side("kaas", _ports(props["bootstrap.servers"]), auth)


def _ports(bootstrap: str) -> list[int]:
    return [int(hp.rsplit(":", 1)[1]) for hp in bootstrap.split(",")]


def create_users(side: Side, users: Mapping[str, str]) -> None:
    """Make ``users`` (name -> password) with both SCRAM mechanisms, as the admin, and wait
    until each of them can authenticate on every broker."""
    assert side.auth is not None
    for mech, code in MECHANISMS.items():  # one request per mechanism: Apache takes one change per user
        ups = []
        for name, password in users.items():
            salt = os.urandom(32)
            ups.append({"name": name, "mechanism": code, "iterations": ITERATIONS, "salt": salt,
                        "salted_password": scram.salted_password(mech, password, salt, ITERATIONS)})
        r = side.call(side.ports[0], 51, 0, {"deletions": [], "upsertions": ups})
        bad = [u for u in r.get("results", []) if u["error_code"] != "none"]
        if "closed" in r or bad:
            raise RuntimeError(f"{side.name}: users not made: {r}")
    side.auth = Auth({**side.auth.passwords, **users}, side.auth.ssl_context, side.auth.mechanism,
                     side.auth.default_user)
    deadline = time.monotonic() + SYNC_TIMEOUT
    for port in side.ports:
        for name in users:
            while "closed" in side.call(port, 18, 3, _API_VERSIONS, fresh=True, user=name):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{side.name}: user {name} cannot log in on port {port}")
                time.sleep(0.1)


_API_VERSIONS = {"client_software_name": "kaas-diff", "client_software_version": "1"}


def sync_acls(side: Side, api: int, body: Mapping[str, Any]) -> None:
    """After CreateAcls (30) or DeleteAcls (31) as ``body``: wait until every broker's
    DescribeAcls shows each created binding, or none matching each deletion filter (the
    ACLs reach brokers asynchronously on both: the metadata log on Apache, the file's
    reload on kaas)."""
    if api == 30:
        wanted = [(_exact(c), 1) for c in body.get("creations", [])]
    else:
        wanted = [(_filter(f), 0) for f in body.get("filters", [])]
    deadline = time.monotonic() + SYNC_TIMEOUT
    for port in side.ports:
        for flt, count in wanted:
            while True:
                r = side.call(port, 29, 3, flt)
                if r.get("error_code") != "none":  # an invalid filter: nothing to wait for
                    break
                if sum(len(res["acls"]) for res in r["resources"]) >= count if count else not r["resources"]:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{side.name}: ACLs not seen on port {port}: {flt}")
                time.sleep(0.05)


def _exact(c: Mapping[str, Any]) -> dict[str, Any]:
    return {"resource_type_filter": c["resource_type"], "resource_name_filter": c["resource_name"],
            "pattern_type_filter": c["resource_pattern_type"], "principal_filter": c["principal"],
            "host_filter": c["host"], "operation": c["operation"], "permission_type": c["permission_type"]}


def _filter(f: Mapping[str, Any]) -> dict[str, Any]:
    return {"resource_type_filter": f["resource_type_filter"], "resource_name_filter": f["resource_name_filter"],
            "pattern_type_filter": f["pattern_type_filter"], "principal_filter": f["principal_filter"],
            "host_filter": f["host_filter"], "operation": f["operation"], "permission_type": f["permission_type"]}
