"""--secure: the least-privilege users and their ACLs. The plan (``acl_plan``), making
them and checking them (``grant_least_privilege``, ``probe_outside_plan``), removing them
again (``revoke_least_privilege``, ``clean_up``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import click

from .config import HarnessConfig, security, txn_id_prefix, user_of, verify_group

SCRAM_MECHANISM = "SCRAM-SHA-512"
ROLES = ("copier", "producer", "verifier")  # the least-privilege users of a --secure run
GRANT_WAIT_S = 30.0  # --secure: how long the new users and ACLs may take to reach every broker
REVOKE_WAIT_S = 30.0  # --secure: how long removing them may be retried at the end of a run


def acl_plan(cfg: HarnessConfig) -> list[tuple[str, str, str, str, str]]:
    """Every ACL a --secure run grants, as (role, resource type, pattern type, resource name,
    operation), all ALLOW from any host: what Apache's operation table (docs/security.rst)
    asks of each role's requests, and nothing else. DESCRIBE (Metadata, ListOffsets,
    OffsetFetch, FindCoordinator) is implied by READ and WRITE; a transactional producer
    needs no IDEMPOTENT_WRITE, and the idempotent seeding producer's InitProducerId is
    allowed by WRITE on a topic (KIP-679).

    - copier: its consumer Fetches the input (READ topic) in its group (READ group: Join,
      Sync, Heartbeat, OffsetFetch); its producer writes the output in transactions (WRITE
      on the output; WRITE on its transactional id for InitProducerId, AddPartitionsToTxn,
      Produce, AddOffsetsToTxn, TxnOffsetCommit and EndTxn, one PREFIXED ACL for every
      copier's id) and commits the input's offsets in the transaction (TxnOffsetCommit: READ
      on the group and on the input topic, both above);
    - producer (seeding): WRITE on the input;
    - verifier: READ on the output (ListOffsets, Fetch) and on its own group.
    """
    group = cfg.group
    return [
        ("copier", "TOPIC", "LITERAL", cfg.input, "READ"),
        ("copier", "TOPIC", "LITERAL", cfg.output, "WRITE"),
        ("copier", "GROUP", "LITERAL", group, "READ"),
        ("copier", "TRANSACTIONAL_ID", "PREFIXED", txn_id_prefix(cfg), "WRITE"),
        ("producer", "TOPIC", "LITERAL", cfg.input, "WRITE"),
        ("verifier", "TOPIC", "LITERAL", cfg.output, "READ"),
        ("verifier", "GROUP", "LITERAL", verify_group(cfg), "READ"),
    ]


def _acl_text(principal: str, rtype: str, pattern: str, name: str, op: str) -> str:
    return f"{principal} ALLOW {op} {rtype}:{pattern}:{name}"


def acl_line(b) -> str:
    """One ACL (a confluent-kafka ``AclBinding``) as the harness reports it:
    ``PRINCIPAL ALLOW OP TYPE:PATTERN:NAME``, then `` (DENY)`` and `` from HOST`` when it
    is not an ALLOW for any host."""
    return (_acl_text(b.principal, b.restype.name, b.resource_pattern_type.name, b.name, b.operation.name)
            + ("" if b.permission_type.name == "ALLOW" else f" ({b.permission_type.name})")
            + ("" if b.host == "*" else f" from {b.host}"))


def acls_of(admin, principal: str | None = None, timeout: float = 30.0) -> list[str]:
    """The cluster's ACLs of ``principal`` (every ACL for None), as ``acl_line``s, sorted;
    through ``admin``, an AdminClient of a principal allowed to describe them."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    f = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
                                             AclOperation.ANY, AclPermissionType.ANY))
    return sorted(acl_line(b) for b in f.result(timeout))


@dataclass
class Grants:
    """What a --secure run asked the cluster to make, recorded as it goes (so a run that
    fails halfway removes what it got to): its SCRAM users and its ACLs (``acl_plan``
    entries). The run checks first that none of its users and no ACL of its principals
    exists, so everything recorded here is its own, even a user or ACL whose answer was
    lost; ``revoke_least_privilege`` removes exactly this."""

    users: list[str] = field(default_factory=list)
    acls: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.users or self.acls)


def _refuse_existing(cfg: HarnessConfig, admin) -> None:
    """Raise unless none of the run's users and no ACL of its principals exists yet: the
    harness removes what it made at the end, and must not take a user's own for its own.

    Raises:
        click.ClickException: one exists, or the cluster could not say.
    """
    from confluent_kafka import KafkaError, KafkaException

    users = [user_of(cfg, role) for role in ROLES]
    for user, f in admin.describe_user_scram_credentials(users).items():
        try:
            f.result(30)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.RESOURCE_NOT_FOUND:
                continue
            raise click.ClickException(f"could not check that SCRAM user {user} is new: {exc}") from None
        raise click.ClickException(f"SCRAM user {user} exists already; the harness makes and removes its own")
    for user in users:
        try:
            found = acls_of(admin, f"User:{user}")
        except Exception as exc:  # noqa: BLE001 — reported as the reason the run cannot go on
            raise click.ClickException(f"could not check that User:{user} has no ACLs: {exc}") from None
        if found:
            raise click.ClickException(f"User:{user} has ACLs already ({found}); the harness makes and removes "
                                       "its own")


def grant_least_privilege(cfg: HarnessConfig, echo=click.echo,
                          grants: Grants | None = None) -> tuple[HarnessConfig, dict]:
    """On a SASL_SSL cluster with an authoriser, as the admin (``security(cfg)``): make one
    SCRAM-SHA-512 user per role (``ROLES``, a random password each) and the ACLs of
    ``acl_plan``, then give each role that user's client settings (the admin's protocol
    and CA) in the config it returns. Waits until every broker authenticates each user and
    authorises it to describe its topic (the credentials and ACLs reach the brokers a
    moment after the controller wrote them), then checks the cluster's ACLs of the users
    are exactly the plan and that a few requests outside it are refused.

    Args:
        grants: filled in as the users and ACLs are asked for (after checking that none
            exists yet), for ``revoke_least_privilege`` to remove them, also when this
            raises halfway.

    Returns:
        ``cfg`` with ``security[role]`` set for every role of ``ROLES``, and a report:
        ``principals`` (role: principal), ``acls`` (as read back), ``probes`` (what was
        tried outside the plan: the error it got), ``least_privilege`` (all held).

    Raises:
        click.ClickException: a user of the run or an ACL of its principals exists
            already, a user or an ACL could not be made, or the users were not usable on
            every broker within ``GRANT_WAIT_S``.
    """
    import secrets

    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    grants = Grants() if grants is None else grants
    admin_conf = security(cfg)
    if admin_conf.get("security.protocol", "").upper() not in ("SASL_SSL", "SASL_PLAINTEXT"):
        raise click.ClickException("--secure needs the admin's SASL settings (--command-config)")
    admin = AdminClient({**admin_conf, "bootstrap.servers": cfg.bootstrap})
    _refuse_existing(cfg, admin)
    passwords = {role: secrets.token_urlsafe(18) for role in ROLES}
    grants.users.extend(user_of(cfg, role) for role in ROLES)
    futs = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user_of(cfg, role), ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                     passwords[role].encode()) for role in ROLES])
    for user, f in futs.items():
        try:
            f.result(30)
        except Exception as exc:  # noqa: BLE001 — reported as the reason the run cannot go on
            raise click.ClickException(f"could not make SCRAM user {user}: {exc}") from None
    principals = {role: f"User:{user_of(cfg, role)}" for role in ROLES}
    plan = acl_plan(cfg)
    bindings = [AclBinding(ResourceType[rtype], name, ResourcePatternType[pattern], principals[role], "*",
                           AclOperation[op], AclPermissionType.ALLOW) for role, rtype, pattern, name, op in plan]
    grants.acls.extend(plan)
    for b, f in admin.create_acls(bindings).items():
        try:
            f.result(30)
        except Exception as exc:  # noqa: BLE001 — as above
            raise click.ClickException(f"could not create ACL {b}: {exc}") from None
    base = {k: v for k, v in admin_conf.items() if not k.startswith("sasl.")}
    cfg = replace(cfg, security={**cfg.security, **{
        role: {**base, "sasl.mechanism": SCRAM_MECHANISM, "sasl.username": user_of(cfg, role),
               "sasl.password": passwords[role]} for role in ROLES}})
    for role in ROLES:
        echo(f"secure: {role} runs as {principals[role]} ({SCRAM_MECHANISM}, "
             f"{base.get('security.protocol')}, not a super user)")
    wait_usable(cfg, {"copier": cfg.input, "producer": cfg.input, "verifier": cfg.output})
    got = [line for role in ROLES for line in acls_of(admin, principals[role])]
    want = sorted(_acl_text(principals[role], rtype, pattern, name, op) for role, rtype, pattern, name, op in plan)
    got.sort()
    for line in got:
        echo(f"secure: ACL {line}")
    probes = probe_outside_plan(cfg)
    for what, err in probes.items():
        echo(f"secure: outside the plan, {what}: {err}")
    ok = got == want and all(err == PROBE_EXPECT[what] for what, err in probes.items())
    if got != want:
        echo(f"secure: the ACLs read back differ from the plan {want}", err=True)
    return cfg, {"principals": principals, "acls": got, "acls_match_plan": got == want, "probes": probes,
                 "least_privilege": ok}


def wait_usable(cfg: HarnessConfig, topics: dict[str, str]) -> None:
    """Until every broker of ``cfg.bootstrap`` authenticates each role of ``topics``
    (role: a topic it may describe) and answers Metadata for the topic without an error.

    Raises:
        click.ClickException: not within ``GRANT_WAIT_S``.
    """
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + GRANT_WAIT_S
    for addr in cfg.bootstrap.split(","):
        for role, topic in topics.items():
            # one broker in the bootstrap list: the first Metadata goes there
            admin = AdminClient({**security(cfg, role), "bootstrap.servers": addr})
            while True:
                why = None
                try:
                    md = admin.list_topics(topic, timeout=3)
                    err = md.topics[topic].error if topic in md.topics else "not listed"
                    why = None if err is None else str(err)
                except Exception as exc:  # noqa: BLE001 — not authenticated (yet): ask again
                    why = str(exc)
                if why is None:
                    break
                if time.monotonic() > deadline:
                    raise click.ClickException(f"{role} ({user_of(cfg, role)}) not usable on {addr}: {why}")
                time.sleep(0.2)


# what each probe of ``probe_outside_plan`` must get
PROBE_EXPECT = {"copier writes the input topic": "TOPIC_AUTHORIZATION_FAILED",
                "copier initialises a transactional id outside its prefix": "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                "verifier writes the output topic": "TOPIC_AUTHORIZATION_FAILED",
                "copier sets a SCRAM password": "CLUSTER_AUTHORIZATION_FAILED"}


def probe_outside_plan(cfg: HarnessConfig) -> dict[str, str]:
    """Try what the plan does not allow, as the least-privilege users: each probe's error
    name (``PROBE_EXPECT`` says which each must get; "allowed" when it was not refused)."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    def produce_as(role: str, topic: str) -> str:
        got: list = []
        p = Producer({**security(cfg, role), "bootstrap.servers": cfg.bootstrap, "acks": "all", "retries": 0,
                      "message.timeout.ms": 10000, "linger.ms": 0})
        p.produce(topic, b"outside-the-plan", partition=0, on_delivery=lambda err, _msg: got.append(err))
        p.flush(15)
        if not got:
            return "no delivery report"
        return "allowed" if got[0] is None else got[0].name()

    def init_foreign_txn_id() -> str:
        p = Producer({**security(cfg, "copier"), "bootstrap.servers": cfg.bootstrap,
                      "transactional.id": f"not-{txn_id_prefix(cfg)}0"})
        try:
            p.init_transactions(15)
        except KafkaException as exc:
            return exc.args[0].name()
        return "allowed"

    def set_own_password() -> str:
        # its own user and password again: harmless were it allowed (any user's would be)
        conf = security(cfg, "copier")
        admin = AdminClient({**conf, "bootstrap.servers": cfg.bootstrap})
        upsert = UserScramCredentialUpsertion(conf["sasl.username"],
                                              ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                              conf["sasl.password"].encode())
        try:
            for f in admin.alter_user_scram_credentials([upsert]).values():
                f.result(15)
        except KafkaException as exc:
            return exc.args[0].name()
        return "allowed"

    return {"copier writes the input topic": produce_as("copier", cfg.input),
            "copier initialises a transactional id outside its prefix": init_foreign_txn_id(),
            "verifier writes the output topic": produce_as("verifier", cfg.output),
            "copier sets a SCRAM password": set_own_password()}


def revoke_filters(cfg: HarnessConfig, acls: list[tuple[str, str, str, str, str]]) -> list[tuple[str, ...]]:
    """The DeleteAcls filters that remove the ACLs ``acls`` (``acl_plan`` entries) of a
    --secure run and nothing else: one per entry, naming every part exactly (the
    resource type, the name, the pattern type LITERAL or PREFIXED, never MATCH or ANY;
    the role's principal, host ``*``, the operation, ALLOW). So an ACL of another
    principal on the same resource, a wildcard principal's, a pattern covering the name
    (``*``, a shorter prefix) or one of the same principal elsewhere is not matched.

    Returns:
        (resource type, resource name, pattern type, principal, host, operation,
        permission) per entry, by confluent-kafka's enum names.
    """
    return [(rtype, name, pattern, f"User:{user_of(cfg, role)}", "*", op, "ALLOW")
            for role, rtype, pattern, name, op in acls]


def revoke_least_privilege(cfg: HarnessConfig, grants: Grants, echo=click.echo) -> dict:
    """Remove, as the admin, what ``grant_least_privilege`` recorded in ``grants``: the
    ACLs, each by its exact filter (``revoke_filters``), then the users' SCRAM-SHA-512
    credentials (the one mechanism the run made). Nothing else is asked to go. What
    failed is asked again, about once a second, for ``REVOKE_WAIT_S`` (after chaos a
    broker or the controller may still be restarting); both removals are idempotent, and
    a user or ACL not found on a second try went on the first.

    Returns:
        ``removed_users``, ``removed_acls`` (as the controller answered, ``acl_line``s) and
        ``left``: "user NAME" / "ACL LINE" mapped to why it may still be on the cluster.
        Never raises for a removal that failed: that is in ``left``.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
        ScramMechanism,
        UserScramCredentialDeletion,
    )

    admin = AdminClient({**security(cfg), "bootstrap.servers": cfg.bootstrap})
    acls = {f: _acl_text(f[3], f[0], f[2], f[1], f[5]) for f in revoke_filters(cfg, grants.acls)}
    users = list(dict.fromkeys(grants.users))
    removed_users: list[str] = []
    removed_acls: list[str] = []
    left: dict[str, str] = {}
    deadline = time.monotonic() + REVOKE_WAIT_S
    try:
        while True:
            left = {}
            if acls:
                filters = {AclBindingFilter(ResourceType[rt], name, ResourcePatternType[pt], principal, host,
                                            AclOperation[op], AclPermissionType[perm]): (rt, name, pt, principal,
                                                                                       host, op, perm)
                           for rt, name, pt, principal, host, op, perm in acls}
                try:
                    futs = admin.delete_acls(list(filters))
                except KafkaException as exc:
                    futs = {}
                    left.update({f"ACL {text}": str(exc) for text in acls.values()})
                for flt, fut in futs.items():
                    key = filters[flt]
                    try:
                        removed_acls += [acl_line(b) for b in fut.result(15)]
                        del acls[key]
                    except Exception as exc:  # noqa: BLE001 — asked again, then reported
                        left[f"ACL {acls[key]}"] = str(exc)
            if users:
                try:
                    futs = admin.alter_user_scram_credentials(
                        [UserScramCredentialDeletion(u, ScramMechanism.SCRAM_SHA_512) for u in users])
                except KafkaException as exc:
                    futs = {}
                    left.update({f"user {u}": str(exc) for u in users})
                for user, fut in futs.items():
                    try:
                        fut.result(15)
                        removed_users.append(user)
                    except KafkaException as exc:
                        if exc.args[0].code() != KafkaError.RESOURCE_NOT_FOUND:
                            left[f"user {user}"] = str(exc)
                            continue
                        echo(f"secure: SCRAM user {user} was not on the cluster (not made, or removed by an "
                             "earlier try)")
                    except Exception as exc:  # noqa: BLE001 — asked again, then reported
                        left[f"user {user}"] = str(exc)
                        continue
                    users.remove(user)
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
    except BaseException:  # interrupted while removing: say what may be left, then go on out
        for what in [*(f"user {u}" for u in users), *(f"ACL {t}" for t in acls.values())]:
            echo(f"secure: interrupted, may be left on the cluster: {what}", err=True)
        raise
    for user in removed_users:
        echo(f"secure: removed SCRAM user {user}")
    for line in removed_acls:
        echo(f"secure: removed ACL {line}")
    for what, why in left.items():
        echo(f"secure: could not remove {what}: {why}", err=True)
    return {"removed_users": sorted(removed_users), "removed_acls": sorted(removed_acls), "left": left}



def clean_up(cfg: HarnessConfig, grants: Grants, echo=click.echo) -> dict:
    """The end of a --secure run: remove its users and ACLs (``revoke_least_privilege``),
    or with ``cfg.keep_users`` leave them and say so. Their passwords were random and
    only ever in this process and its copiers (never printed or written), so what is left
    (kept, or a removal that failed) lets nobody in; that is why a failed removal is a
    warning and does not fail the run.

    Returns:
        ``kept``, ``removed_users``, ``removed_acls`` and ``left`` (what: why).
    """
    if cfg.keep_users:
        principals = {role: f"User:{user_of(cfg, role)}" for role in ROLES}
        left = {**{f"user {u}": "kept (--keep-users)" for u in grants.users},
                **{f"ACL {_acl_text(principals[role], rtype, pattern, name, op)}": "kept (--keep-users)"
                   for role, rtype, pattern, name, op in grants.acls}}
        for what in left:
            echo(f"secure: --keep-users, left on the cluster: {what}")
        return {"kept": True, "removed_users": [], "removed_acls": [], "left": left}
    return {"kept": False, **revoke_least_privilege(cfg, grants, echo)}

