"""--secure: around the harness's own least-privilege users, a bystander planted before
(``plant_bystander``) and the cluster's users and ACLs read back after (``cluster_after``,
``cleanup_violations``): the harness must remove its own and nothing else.
"""

from __future__ import annotations

import os
import time

import eos_harness
from eos_harness import HarnessConfig


def _admin(cfg: HarnessConfig):
    from confluent_kafka.admin import AdminClient

    return AdminClient({**eos_harness.security(cfg), "bootstrap.servers": cfg.bootstrap})


def plant_bystander(cfg: HarnessConfig) -> dict:
    """--secure: before the harness runs, as the admin, a SCRAM user that is not the
    harness's (``GROUP-bystander``) and ACLs of its principal on the very resources of the
    harness's plan (each plan entry's resource and operation, and a PREFIXED READ on the
    topics' common prefix), so a removal wider than the harness's own (any principal, a
    MATCH pattern) would take them. After the run they must all be there still.

    Returns:
        ``user`` and ``acls`` (``eos_harness.acl_line``s).
    """
    import secrets

    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = _admin(cfg)
    user = f"{cfg.group}-bystander"
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          secrets.token_urlsafe(18).encode())
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(30)
    entries = {(rtype, pattern, name, op) for _role, rtype, pattern, name, op in eos_harness.acl_plan(cfg)}
    entries.add(("TOPIC", "PREFIXED", os.path.commonprefix([cfg.input, cfg.output]), "READ"))
    bindings = [AclBinding(ResourceType[rtype], name, ResourcePatternType[pattern], f"User:{user}", "*",
                           AclOperation[op], AclPermissionType.ALLOW) for rtype, pattern, name, op in sorted(entries)]
    for f in admin.create_acls(bindings).values():
        f.result(30)
    return {"user": user, "acls": sorted(eos_harness.acl_line(b) for b in bindings)}


def _harness_principals(cfg: HarnessConfig) -> set[str]:
    return {f"User:{eos_harness.user_of(cfg, role)}" for role in eos_harness.ROLES}


def cluster_after(cfg: HarnessConfig, wait_s: float = 15.0) -> dict:
    """After the harness: every SCRAM user and every ACL of the cluster, as the admin, read
    once none of the harness's is left or after ``wait_s`` (a broker answers from its own
    copy, which it reloads within a second; a broker may still be restarting).

    Returns:
        ``users`` (names) and ``acls`` (``eos_harness.acl_line``s), sorted; ``error`` when
        they could not be read.
    """
    ours = _harness_principals(cfg)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            admin = _admin(cfg)
            users = sorted(admin.describe_user_scram_credentials().result(15))
            acls = eos_harness.acls_of(admin, None, 15)
            got = {"users": users, "acls": acls}
            if not (ours & {f"User:{u}" for u in users}) and not any(a.split(" ", 1)[0] in ours for a in acls):
                return got
        except Exception as exc:  # noqa: BLE001 — a broker restarting: ask again
            got = {"users": [], "acls": [], "error": str(exc)}
        if time.monotonic() >= deadline:
            return got
        time.sleep(0.5)


def cleanup_violations(cfg: HarnessConfig, bystander: dict, after: dict) -> list[str]:
    """What is wrong with the cluster after the harness removed its users and ACLs: one of
    them still there, or something of the bystander's or of the cluster's own super users
    gone. On this throwaway cluster a leftover is a fault of the cleanup under chaos, so it
    fails the scenario (on a user's cluster the harness only warns: ``eos_harness.clean_up``)."""
    if "error" in after:
        return [f"cleanup: could not read the cluster's users and ACLs back: {after['error']}"]
    ours = _harness_principals(cfg)
    out = [f"cleanup: harness user {u} still on the cluster" for u in after["users"] if f"User:{u}" in ours]
    out += [f"cleanup: harness ACL still on the cluster: {a}" for a in after["acls"] if a.split(" ", 1)[0] in ours]
    out += [f"cleanup: user {u} is gone" for u in ("admin", "kaas-broker", bystander["user"])
            if u not in after["users"]]
    out += [f"cleanup: the bystander's ACL is gone: {a}" for a in bystander["acls"] if a not in after["acls"]]
    return out

