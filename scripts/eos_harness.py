#!/usr/bin/env python3
"""The exactly-once harness: seed, copy with transactions, verify.

    python scripts/eos_harness.py run --bootstrap 127.0.0.1:9092 --messages 20000 --copiers 3
    python scripts/eos_harness.py run --start-cluster 3 --messages 5000    # its own cluster
    python scripts/eos_harness.py run --start-cluster 3 --secure           # kaas cluster --secure
    python scripts/eos_harness.py run --bootstrap HOST:PORT --secure --command-config admin.properties

1. seeds an input topic with N unique sequenced messages;
2. runs K copier processes: a read_committed group consumer and a transactional producer
   (consume-process-produce with send_offsets_to_transaction, KIP-447), committing every
   M messages and deliberately aborting every A-th transaction (then rewinding);
3. verifies with a read_committed consumer: every input exactly once in the output,
   per-input-partition order kept, nothing of an aborted transaction visible, and the
   group's committed offsets equal to the input end offsets.

Prints progress while it runs, a summary table at the end, and one JSON line with the
figures. Exit status 0 only when every guarantee held. ``KAAS_HARNESS_DEBUG=eos,protocol``
passes librdkafka debug contexts to the copiers' producers.

Copiers may be SIGKILLed and restarted mid-run (``CopierPool.kill``/``restart``, used by
``scripts/chaos.py continuous``): each copier reports through an append-only file of JSON
lines of its own (a kill loses at most a torn last line, which is skipped; an mp.Queue or
Event could be left locked or half-written) and stops when a ``stop`` file appears. The
verifier first waits until no transaction is open on any output partition (the last
stable offset, a read_committed ListOffsets, equals the high watermark): a killed copier's
transaction stays open until its restart fences it or the coordinator aborts it after
``transaction.timeout.ms``, and reading before then would stop at the LSO and report the
records behind it as lost. A transaction still open when that wait gives up is reported as
a violation (every transaction must complete), and the read stops at the LSO.

``--secure`` runs on a SASL_SSL cluster with the authoriser on (``kaas cluster --secure``
with ``--start-cluster``, else any cluster whose admin's client settings ``--command-config``
gives): the harness, as the admin, creates the topics, then a SCRAM-SHA-512 user per role
(copier, seeding producer, verifier) and the ACLs each role needs and nothing more
(``acl_plan``); the copiers, the seeding producer and the verifier connect as those users
(SASL_SSL, the cluster's CA), never as a super user. Before seeding it checks that the ACLs
read back are exactly the plan and that a few things outside it are refused (the copier
writing the input topic, initialising a transactional id outside its prefix or setting a
SCRAM password; the verifier writing the output topic). At the end, also of a failed or
interrupted run (Ctrl-C, SIGTERM), it removes exactly those users and ACLs again and
nothing else (``revoke_least_privilege``; it refuses to start if any of them exists
already, so whatever it removes it made); ``--keep-users`` leaves them for inspection. The
JSON says what was removed (``security.cleanup``); a removal that failed is a line of
``warnings`` and does not fail the run (``clean_up`` says why).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kaas.domain import checker  # noqa: E402 — the project's history checker

GROUP_PREFIX = "eos-harness"
SCRAM_MECHANISM = "SCRAM-SHA-512"
ROLES = ("copier", "producer", "verifier")  # the least-privilege users of a --secure run
GRANT_WAIT_S = 30.0  # --secure: how long the new users and ACLs may take to reach every broker
REVOKE_WAIT_S = 30.0  # --secure: how long removing them may be retried at the end of a run

# Client settings an Apache Kafka user would pick for fast failover (cfg keys override):
# a dead copier's partitions move after the session timeout (the broker allows down to
# group.min.session.timeout.ms = 1 s); a request to a hung broker is given up after
# socket.timeout.ms rather than librdkafka's 60 s; a dead copier's open transaction is
# aborted by its coordinator after transaction.timeout.ms (unless its restart fences it
# first), and librdkafka wants message.timeout.ms <= transaction.timeout.ms.
COPIER_DEFAULTS = {"session_timeout_ms": 4000, "heartbeat_interval_ms": 1000, "transaction_timeout_ms": 15000,
                   "socket_timeout_ms": 10000}
OPEN_TXN_WAIT_S = 45.0  # verify: how long to wait for the output's open transactions to complete


def _knob(cfg: dict, key: str) -> int:
    return int(cfg.get(key) or COPIER_DEFAULTS[key])


def security(cfg: dict, role: str = "admin") -> dict:
    """The client settings of ``role`` on this run's cluster (``cfg["security"][role]``:
    security.protocol, ssl.ca.location, sasl.*), to merge into a confluent-kafka config;
    empty on a plaintext cluster. ``admin`` is the harness itself (topics, monitoring, the
    group's committed offsets); ``copier``, ``producer`` and ``verifier`` are the
    least-privilege users ``grant_least_privilege`` made."""
    return dict((cfg.get("security") or {}).get(role, {}))


class StatsFile:
    """A copier's report channel: one JSON array per line, appended with one write each."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def put(self, item: tuple) -> None:
        os.write(self.fd, (json.dumps(item) + "\n").encode())


# ---------------------------------------------------------------------------- copier

def copier(idx: int, incarnation: int, cfg: dict, run_dir: str) -> None:
    """One copier process: consume (read_committed) -> produce in a txn -> commit offsets.
    Reports to ``run_dir/copier-<idx>-<incarnation>.jsonl``; stops once ``run_dir/stop``
    exists. A restarted copier (same ``idx``, next ``incarnation``) keeps the transactional
    id, so its init_transactions fences and aborts what its killed predecessor left open."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    stats = StatsFile(Path(run_dir) / f"copier-{idx}-{incarnation}.jsonl")
    stop_file = Path(run_dir) / "stop"
    rnd = random.Random(cfg["seed"] * 1000 + idx * 100 + incarnation)
    consumer = Consumer({
        **security(cfg, "copier"),
        "bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"], "enable.auto.commit": False,
        "isolation.level": "read_committed", "auto.offset.reset": "earliest",
        "session.timeout.ms": _knob(cfg, "session_timeout_ms"),
        "heartbeat.interval.ms": _knob(cfg, "heartbeat_interval_ms"), "max.poll.interval.ms": 60000,
        "socket.timeout.ms": _knob(cfg, "socket_timeout_ms"),
        "partition.assignment.strategy": "cooperative-sticky", "reconnect.backoff.max.ms": 1000,
        "metadata.recovery.strategy": "none",
    })
    txn_timeout = _knob(cfg, "transaction_timeout_ms")
    producer = Producer({
        **security(cfg, "copier"),
        "bootstrap.servers": cfg["bootstrap"], "transactional.id": f"{txn_id_prefix(cfg)}{idx}",
        "transaction.timeout.ms": txn_timeout, "linger.ms": 5, "acks": "all", "message.timeout.ms": txn_timeout,
        "socket.timeout.ms": min(_knob(cfg, "socket_timeout_ms"), txn_timeout),
        # librdkafka's default (10 s) would measure its reconnect backoff, not the cluster's
        # recovery; scripts/bench's failover runs use the same
        "reconnect.backoff.max.ms": 1000,
        # With every broker down at once librdkafka (2.16) "re-bootstraps": it drops the
        # brokers it knew, and a send_offsets_to_transaction() waiting for the group
        # coordinator stays on the dropped handle forever (seen in kill-all). Keeping the
        # known brokers avoids that client bug; the brokers come back on the same addresses.
        "metadata.recovery.strategy": "none",
        **({"debug": os.environ["KAAS_HARNESS_DEBUG"]} if os.environ.get("KAAS_HARNESS_DEBUG") else {}),
    })
    # whom the copier connects as (--secure: its least-privilege user), for the harness to check
    stats.put(("user", idx, incarnation, security(cfg, "copier").get("sasl.username")))
    producer.init_transactions(60)
    consumer.subscribe([cfg["input"]])
    committed = aborted = copied = 0
    commit_ms: list[float] = []
    txn_no = 0

    def retrying(call):
        """A retriable error (a timeout while a coordinator moves) means: call again."""
        while True:
            try:
                return call()
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise

    def rewind(msgs) -> None:
        """After an abort, consume the batch again: seek each partition back to the batch's
        first offset in it. (Not to ``committed()``: while the coordinator moves that can
        answer with a per-partition error and no offset, which is not "from the start".) A
        partition no longer assigned is skipped; its new owner starts from the committed
        offset."""
        first: dict[int, int] = {}
        for m in msgs:
            first.setdefault(m.partition(), m.offset())
        for p, o in first.items():
            try:
                consumer.seek(TopicPartition(cfg["input"], p, o))
            except KafkaException:
                pass

    rate = cfg.get("rate", 0)  # messages/s for this copier, 0: as fast as it goes
    next_at = time.monotonic()
    try:
        while not stop_file.exists():
            if rate:
                time.sleep(max(0.0, next_at - time.monotonic()))
            msgs = [m for m in consumer.consume(cfg["commit_every"], 0.5) if not m.error()]
            if not msgs:
                continue
            next_at = max(next_at, time.monotonic() - 1.0) + (len(msgs) / rate if rate else 0)
            txn_no += 1
            abort = cfg["abort_every"] > 0 and rnd.random() < 1.0 / cfg["abort_every"]
            tag = f"{idx}.{incarnation}:{txn_no}"
            try:
                producer.begin_transaction()
                for m in msgs:
                    producer.produce(cfg["output"], key=str(m.partition()).encode(),
                                     value=json.dumps({"v": m.value().decode(), "ip": m.partition(),
                                                       "io": m.offset(), "ts": m.timestamp()[1],
                                                       "tag": tag}).encode())
                    producer.poll(0)
                positions = {}
                for m in msgs:
                    positions[m.partition()] = m.offset() + 1
                offsets = [TopicPartition(cfg["input"], p, o) for p, o in positions.items()]
                retrying(lambda: producer.send_offsets_to_transaction(
                    offsets, consumer.consumer_group_metadata(), 30))
                if abort:
                    retrying(lambda: producer.abort_transaction(30))
                    aborted += 1
                    stats.put(("aborted", tag))
                    rewind(msgs)
                else:
                    t0 = time.perf_counter()
                    retrying(lambda: producer.commit_transaction(30))
                    commit_ms.append((time.perf_counter() - t0) * 1000)
                    stats.put(("commit_at", time.time(), idx))
                    committed += 1
                    copied += len(msgs)
            except KafkaException as exc:
                err = exc.args[0]
                if not err.txn_requires_abort():
                    stats.put(("fatal", f"copier {idx}: {err}"))
                    raise
                retrying(lambda: producer.abort_transaction(30))
                aborted += 1
                stats.put(("aborted", tag))
                rewind(msgs)
            stats.put(("progress", idx, incarnation, committed, aborted, copied))
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._FENCED:
            raise
    finally:
        stats.put(("done", idx, incarnation, committed, aborted, copied, commit_ms))
        consumer.close()


# ---------------------------------------------------------------------------- phases

def txn_id_prefix(cfg: dict) -> str:
    """The copiers' transactional ids are this plus the copier's index."""
    return f"{cfg['group']}-copier-"


def seed(bootstrap: str, topic: str, n: int, partitions: int, conf: dict | None = None) -> set[int]:
    """Write the N input values; returns the values the broker acknowledged. ``conf``: extra
    client settings (security)."""
    from confluent_kafka import Producer

    acked: set[int] = set()

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.add(int(msg.value()))

    p = Producer({**(conf or {}), "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=str(i).encode(), partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 5000 == 0:
            p.poll(0)
    if p.flush(120) != 0 or len(acked) != n:
        raise click.ClickException(f"seeding did not complete: {len(acked)}/{n} acknowledged")
    return acked


def create_topics(bootstrap: str, specs: dict[str, int], timeout: float = 90.0, conf: dict | None = None) -> None:
    """Create the topics, retrying while a fresh cluster is still electing its controller.
    ``conf``: extra client settings (security)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    deadline = time.monotonic() + timeout
    pending = dict(specs)
    while pending:
        admin = AdminClient({**(conf or {}), "bootstrap.servers": bootstrap})
        futs = admin.create_topics([NewTopic(t, n, 1) for t, n in pending.items()])
        for t, f in futs.items():
            try:
                f.result(15)
                pending.pop(t, None)
            except Exception as exc:  # noqa: BLE001 — an existing topic is fine; else retry
                if "already exists" in str(exc).lower() or "TOPIC_ALREADY_EXISTS" in str(exc):
                    pending.pop(t, None)
                elif time.monotonic() > deadline:
                    raise click.ClickException(f"could not create topic {t}: {exc}") from None
        if pending:
            time.sleep(1.0)


def end_offsets(admin, topic: str, partitions: int, timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    """Each partition's (last stable offset, high watermark): two fresh ListOffsets answers
    (through ``admin``, an AdminClient), read_committed and read_uncommitted. LSO < HW while
    a transaction is open there."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    req = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    got = {}
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        futs = admin.list_offsets(req, isolation_level=level, request_timeout=timeout)
        got[level] = {tp.partition: f.result(timeout).offset for tp, f in futs.items()}
    return {p: (got[IsolationLevel.READ_COMMITTED][p], got[IsolationLevel.READ_UNCOMMITTED][p])
            for p in range(partitions)}


def wait_transactions_complete(bootstrap: str, topic: str, partitions: int, deadline: float,
                               echo=None, conf: dict | None = None) -> tuple[dict[int, tuple[int, int]], float]:
    """Poll until no transaction is open on any partition of ``topic`` (LSO == HW
    everywhere), at most until ``deadline``. Returns the last answer and the seconds waited.
    ListOffsets errors while a leader moves are retried."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**(conf or {}), "bootstrap.servers": bootstrap, "reconnect.backoff.max.ms": 1000})
    t0 = time.monotonic()
    ends: dict[int, tuple[int, int]] = {}
    said = False
    while True:
        try:
            ends = end_offsets(admin, topic, partitions)
            if all(lso == hw for lso, hw in ends.values()):
                break
        except Exception as exc:  # noqa: BLE001 — a leader moving: ask again
            ends = ends or {}
            if time.monotonic() >= deadline:
                raise click.ClickException(f"ListOffsets on {topic} kept failing: {exc}") from None
        if time.monotonic() >= deadline:
            break
        if echo is not None and not said and time.monotonic() - t0 > 1.0:
            open_parts = {p: e for p, e in ends.items() if e[0] != e[1]}
            echo(f"  verify: waiting for transactions still open on {topic} (partition: (LSO, HW)) "
                 f"{open_parts}", err=True)
            said = True
        time.sleep(0.25)
    return ends, time.monotonic() - t0


def read_output(bootstrap: str, topic: str, partitions: int, isolation: str, deadline: float,
                targets: dict[int, int] | None = None, conf: dict | None = None, group: str | None = None) -> list:
    """Read every partition of ``topic`` from offset 0. A partition is done at its first EOF
    or, given ``targets``, once the consumer's position reaches its target offset (librdkafka
    reports EOF only once per assignment, so a read that must reach a known offset checks
    the position rather than waiting for a second EOF)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**(conf or {}), "bootstrap.servers": bootstrap, "group.id": group or f"verify-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    done: set[int] = {p for p, t in (targets or {}).items() if t <= 0}
    while len(done) < partitions and time.monotonic() < deadline:
        for m in c.consume(2000, 0.5):
            if m.error():
                if m.error().code() == m.error()._PARTITION_EOF:
                    done.add(m.partition())
                continue
            out.append((m.partition(), m.offset(), json.loads(m.value()), m.timestamp()[1]))
        if targets:
            for tp in c.position([TopicPartition(topic, p) for p in range(partitions) if p not in done]):
                if tp.offset >= targets.get(tp.partition, 0):
                    done.add(tp.partition)
    c.close()
    return out


def verify(cfg: dict, aborted_tags: set[str], echo=None) -> dict:
    """Read the output back (read_committed) and check the history with ``kaas.domain.checker``:
    every seeded value exactly once, nothing of an aborted transaction, each input
    partition's order kept in the output, and the group's offsets at the input end. First
    waits (``OPEN_TXN_WAIT_S`` at most) for the transactions still open on the output to
    complete; one that does not is a violation."""
    from confluent_kafka import Consumer, TopicPartition

    deadline = time.monotonic() + cfg["timeout"]
    ends_out, waited = wait_transactions_complete(cfg["bootstrap"], cfg["output"], cfg["output_partitions"],
                                                  min(deadline, time.monotonic() + OPEN_TXN_WAIT_S), echo,
                                                  conf=security(cfg, "verifier"))
    still_open = {p: e for p, e in ends_out.items() if e[0] != e[1]}
    recs = read_output(cfg["bootstrap"], cfg["output"], cfg["output_partitions"], "read_committed", deadline,
                       targets={p: lso for p, (lso, _hw) in ends_out.items()}, conf=security(cfg, "verifier"),
                       group=verify_group(cfg))
    reads = []
    max_latency = 0
    for part, off, v, ts in recs:
        reads.append(checker.Read(int(v["v"]), part, off, stream=f"in-{v['ip']}", order=v["io"], txn=v["tag"]))
        if ts > 0 and v["ts"] > 0:
            max_latency = max(max_latency, ts - v["ts"])
    # the group's committed offsets and the input's ends: the harness's own check, as the admin
    c = Consumer({**security(cfg), "bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"],
                  "enable.auto.commit": False})
    tps = [TopicPartition(cfg["input"], p) for p in range(cfg["input_partitions"])]
    committed: dict[int, int] = {}
    for _ in range(30):  # a coordinator still moving answers per-partition errors: ask again
        got = c.committed(tps, 30)
        committed = {tp.partition: tp.offset for tp in got}
        if not any(tp.error for tp in got):
            break
        time.sleep(1)
    ends = {p: c.get_watermark_offsets(TopicPartition(cfg["input"], p), timeout=30)[1]
            for p in range(cfg["input_partitions"])}
    c.close()
    # Value i was seeded to input partition i % P at offset i // P. Only values below the
    # group's committed offset are owed in the output; the rest were not copied yet (a run
    # that timed out), which is reported as such rather than as lost.
    n_parts = cfg["input_partitions"]
    owed = [i // n_parts < max(committed.get(i % n_parts, 0), 0) for i in range(cfg["messages"])]
    writes = [checker.Write(i, acked=owed[i]) for i in range(cfg["messages"])]
    report = checker.check(writes, reads, aborted_tags)
    violations = report.violations()
    uncopied = owed.count(False)
    if committed != ends:
        violations.append(f"copy incomplete: committed offsets {committed} != input end offsets {ends} "
                          f"({uncopied} values not copied)")
    if still_open:
        violations.append(f"transactions still open on the output after {waited:.1f} s (partition: (LSO, HW)) "
                          f"{still_open}; read to the LSO")
    return {"output_records": len(recs), "open_txn_wait_s": round(waited, 2), "open_txns_left": len(still_open),
            "duplicates": report.duplicate_count, "losses": len(report.lost),
            "order_violations": len(report.non_monotonic), "aborted_visible": len(report.aborted_reads),
            "uncopied": uncopied,
            "phantoms": len(report.phantoms), "offsets_match": committed == ends,
            "committed_offsets": committed, "input_ends": ends, "max_e2e_latency_ms": max_latency,
            "violations": violations}


# ---------------------------------------------------------------------------- security

def verify_group(cfg: dict) -> str:
    """The verifier's consumer group (it reads by assignment and commits nothing, but
    librdkafka still looks its coordinator up)."""
    return f"{cfg['group']}-verify"


def user_of(cfg: dict, role: str) -> str:
    """The SCRAM user name of ``role`` in a --secure run."""
    return f"{cfg['group']}-{role}"


def acl_plan(cfg: dict) -> list[tuple[str, str, str, str, str]]:
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
    group = cfg["group"]
    return [
        ("copier", "TOPIC", "LITERAL", cfg["input"], "READ"),
        ("copier", "TOPIC", "LITERAL", cfg["output"], "WRITE"),
        ("copier", "GROUP", "LITERAL", group, "READ"),
        ("copier", "TRANSACTIONAL_ID", "PREFIXED", txn_id_prefix(cfg), "WRITE"),
        ("producer", "TOPIC", "LITERAL", cfg["input"], "WRITE"),
        ("verifier", "TOPIC", "LITERAL", cfg["output"], "READ"),
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


def _refuse_existing(cfg: dict, admin) -> None:
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


def grant_least_privilege(cfg: dict, echo=click.echo, grants: Grants | None = None) -> dict:
    """On a SASL_SSL cluster with an authoriser, as the admin (``security(cfg)``): make one
    SCRAM-SHA-512 user per role (``ROLES``, a random password each) and the ACLs of
    ``acl_plan``, then set ``cfg["security"][role]`` to that user's client settings (the
    admin's protocol and CA). Waits until every broker authenticates each user and
    authorises it to describe its topic (the credentials and ACLs reach the brokers a
    moment after the controller wrote them), then checks the cluster's ACLs of the users
    are exactly the plan and that a few requests outside it are refused.

    Args:
        grants: filled in as the users and ACLs are asked for (after checking that none
            exists yet), for ``revoke_least_privilege`` to remove them, also when this
            raises halfway.

    Returns:
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
    admin = AdminClient({**admin_conf, "bootstrap.servers": cfg["bootstrap"]})
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
    cfg["security"] = {**cfg.get("security", {}), **{
        role: {**base, "sasl.mechanism": SCRAM_MECHANISM, "sasl.username": user_of(cfg, role),
               "sasl.password": passwords[role]} for role in ROLES}}
    for role in ROLES:
        echo(f"secure: {role} runs as {principals[role]} ({SCRAM_MECHANISM}, "
             f"{base.get('security.protocol')}, not a super user)")
    wait_usable(cfg, {"copier": cfg["input"], "producer": cfg["input"], "verifier": cfg["output"]})
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
    return {"principals": principals, "acls": got, "acls_match_plan": got == want, "probes": probes,
            "least_privilege": ok}


def wait_usable(cfg: dict, topics: dict[str, str]) -> None:
    """Until every broker of ``cfg["bootstrap"]`` authenticates each role of ``topics``
    (role: a topic it may describe) and answers Metadata for the topic without an error.

    Raises:
        click.ClickException: not within ``GRANT_WAIT_S``.
    """
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + GRANT_WAIT_S
    for addr in cfg["bootstrap"].split(","):
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


def probe_outside_plan(cfg: dict) -> dict[str, str]:
    """Try what the plan does not allow, as the least-privilege users: each probe's error
    name (``PROBE_EXPECT`` says which each must get; "allowed" when it was not refused)."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    def produce_as(role: str, topic: str) -> str:
        got: list = []
        p = Producer({**security(cfg, role), "bootstrap.servers": cfg["bootstrap"], "acks": "all", "retries": 0,
                      "message.timeout.ms": 10000, "linger.ms": 0})
        p.produce(topic, b"outside-the-plan", partition=0, on_delivery=lambda err, _msg: got.append(err))
        p.flush(15)
        if not got:
            return "no delivery report"
        return "allowed" if got[0] is None else got[0].name()

    def init_foreign_txn_id() -> str:
        p = Producer({**security(cfg, "copier"), "bootstrap.servers": cfg["bootstrap"],
                      "transactional.id": f"not-{txn_id_prefix(cfg)}0"})
        try:
            p.init_transactions(15)
        except KafkaException as exc:
            return exc.args[0].name()
        return "allowed"

    def set_own_password() -> str:
        # its own user and password again: harmless were it allowed (any user's would be)
        conf = security(cfg, "copier")
        admin = AdminClient({**conf, "bootstrap.servers": cfg["bootstrap"]})
        upsert = UserScramCredentialUpsertion(conf["sasl.username"],
                                              ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                              conf["sasl.password"].encode())
        try:
            for f in admin.alter_user_scram_credentials([upsert]).values():
                f.result(15)
        except KafkaException as exc:
            return exc.args[0].name()
        return "allowed"

    return {"copier writes the input topic": produce_as("copier", cfg["input"]),
            "copier initialises a transactional id outside its prefix": init_foreign_txn_id(),
            "verifier writes the output topic": produce_as("verifier", cfg["output"]),
            "copier sets a SCRAM password": set_own_password()}


def revoke_filters(cfg: dict, acls: list[tuple[str, str, str, str, str]]) -> list[tuple[str, ...]]:
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


def revoke_least_privilege(cfg: dict, grants: Grants, echo=click.echo) -> dict:
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

    admin = AdminClient({**security(cfg), "bootstrap.servers": cfg["bootstrap"]})
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


class CopierPool:
    """The copier processes of one run: start, SIGKILL, restart one; read their reports.

    Each incarnation of copier ``i`` writes ``run_dir/copier-<i>-<n>.jsonl``;
    :meth:`drain` parses the complete lines appended since the last call (a killed
    copier's torn last line is never complete, so it is never read)."""

    def __init__(self, cfg: dict, run_dir: Path) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.ctx = mp.get_context("spawn")
        self.procs: dict[int, object] = {}  # copier index -> its current process
        self.incarnation: dict[int, int] = {}
        self.killed: set[tuple[int, int]] = set()  # (index, incarnation) SIGKILLed on purpose
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}
        self._lock = threading.Lock()  # chaos kills and restarts from a thread of its own
        self.stopped = False

    def start(self, idx: int) -> None:
        with self._lock:
            if self.stopped:
                return
            n = self.incarnation.get(idx, -1) + 1
            p = self.ctx.Process(target=copier, args=(idx, n, self.cfg, str(self.run_dir)), daemon=True,
                                 name=f"copier-{idx}-{n}")
            p.start()
            self.incarnation[idx] = n
            self.procs[idx] = p

    def kill(self, idx: int) -> int:
        """SIGKILL copier ``idx`` (its transaction, if one is open, stays open). Its pid."""
        with self._lock:
            p = self.procs[idx]
            self.killed.add((idx, self.incarnation[idx]))
            os.kill(p.pid, signal.SIGKILL)
            p.join(5)
            return p.pid

    def restart(self, idx: int) -> None:
        """Start copier ``idx`` again (same transactional id, next incarnation)."""
        self.start(idx)

    def died(self) -> list[str]:
        """Copiers that exited with an error without being killed on purpose (reported once)."""
        out = []
        with self._lock:
            for idx, p in self.procs.items():
                key = (idx, self.incarnation[idx])
                if p.exitcode not in (None, 0) and key not in self.killed:
                    out.append(f"copier {idx} died with exit code {p.exitcode}")
                    self.killed.add(key)
        return out

    def drain(self) -> list[list]:
        items = []
        for path in sorted(self.run_dir.glob("copier-*.jsonl")):
            off = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(off)
                chunk = f.read()
            self._offsets[path] = off + len(chunk)
            *lines, rest = (self._partial.get(path, b"") + chunk).split(b"\n")
            self._partial[path] = rest
            items.extend(json.loads(line) for line in lines if line)
        return items

    def stop_all(self, timeout: float = 30.0) -> None:
        (self.run_dir / "stop").touch()
        deadline = time.monotonic() + timeout
        with self._lock:
            self.stopped = True
            procs = list(self.procs.values())
        for p in procs:
            p.join(max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(5)


def run_harness(cfg: dict, *, chaos=None, echo=click.echo) -> dict:
    """Seed, copy, verify. ``chaos(elapsed_s, transactions_committed)`` is called about every
    0.2 s while copying; a chaos object with a ``copiers`` attribute gets the
    :class:`CopierPool` there before the first call (to kill and restart copiers). With
    ``cfg["secure"]`` (and the admin's settings in ``cfg["security"]["admin"]``), the
    least-privilege users and ACLs are made once the topics exist
    (:func:`grant_least_privilege`), and the result's ``security`` says what was granted and
    whom every copier ran as. They are removed again at the end, also when the run fails
    or is interrupted (:func:`revoke_least_privilege`), unless ``cfg["keep_users"]``;
    ``security.cleanup`` says what was removed and what is left, and each removal that
    failed is a line of the result's ``warnings``, not a violation: the verdict is the
    cluster's guarantees (see :func:`clean_up`)."""
    create_topics(cfg["bootstrap"], {cfg["input"]: cfg["input_partitions"], cfg["output"]: cfg["output_partitions"]},
                  conf=security(cfg))
    grants = Grants()
    cleanup = None
    try:
        secured = grant_least_privilege(cfg, echo, grants) if cfg.get("secure") else None
        result = _seed_copy_verify(cfg, secured, chaos, echo)
    finally:
        if grants:
            cleanup = clean_up(cfg, grants, echo)
    if cleanup is not None:
        result["security"]["cleanup"] = cleanup
        if not cleanup["kept"]:
            result["warnings"] += [f"not removed from the cluster: {what} ({why})"
                                   for what, why in cleanup["left"].items()]
    return result


def clean_up(cfg: dict, grants: Grants, echo=click.echo) -> dict:
    """The end of a --secure run: remove its users and ACLs (``revoke_least_privilege``),
    or with ``cfg["keep_users"]`` leave them and say so. Their passwords were random and
    only ever in this process and its copiers (never printed or written), so what is left
    (kept, or a removal that failed) lets nobody in; that is why a failed removal is a
    warning and does not fail the run.

    Returns:
        ``kept``, ``removed_users``, ``removed_acls`` and ``left`` (what: why).
    """
    if cfg.get("keep_users"):
        principals = {role: f"User:{user_of(cfg, role)}" for role in ROLES}
        left = {**{f"user {u}": "kept (--keep-users)" for u in grants.users},
                **{f"ACL {_acl_text(principals[role], rtype, pattern, name, op)}": "kept (--keep-users)"
                   for role, rtype, pattern, name, op in grants.acls}}
        for what in left:
            echo(f"secure: --keep-users, left on the cluster: {what}")
        return {"kept": True, "removed_users": [], "removed_acls": [], "left": left}
    return {"kept": False, **revoke_least_privilege(cfg, grants, echo)}


def _seed_copy_verify(cfg: dict, secured: dict | None, chaos, echo) -> dict:
    """``run_harness`` once the topics, and with --secure the users (``secured``), exist."""
    t0 = time.monotonic()
    # raises unless all acked
    seed(cfg["bootstrap"], cfg["input"], cfg["messages"], cfg["input_partitions"], conf=security(cfg, "producer"))
    echo(f"seeded {cfg['messages']} messages in {time.monotonic() - t0:.1f}s")
    run_dir = Path(tempfile.mkdtemp(prefix="kaas-eos-copiers-"))
    pool = CopierPool(cfg, run_dir)
    if chaos is not None and hasattr(chaos, "copiers"):
        chaos.copiers = pool
    progress: dict[tuple[int, int], tuple[int, int, int]] = {}  # (copier, incarnation) -> counts
    aborted_tags: set[str] = set()
    fatal: list[str] = []
    commit_ms: list[float] = []
    commit_times: list[float] = []  # wall clock of every committed transaction
    commits_by_copier: dict[int, list[float]] = {}
    copier_users: set[str | None] = set()  # the SASL user of each copier incarnation
    started_at = time.time()
    t_copy = time.monotonic()
    for i in range(cfg["copiers"]):
        pool.start(i)
    last_print = 0.0
    completed = False

    def drain_stats():
        for item in pool.drain():
            kind = item[0]
            if kind == "progress":
                progress[(item[1], item[2])] = tuple(item[3:6])
            elif kind == "aborted":
                aborted_tags.add(item[1])
            elif kind == "fatal":
                fatal.append(item[1])
            elif kind == "commit_at":
                commit_times.append(item[1])
                commits_by_copier.setdefault(item[2], []).append(item[1])
            elif kind == "done":
                progress[(item[1], item[2])] = tuple(item[3:6])
                commit_ms.extend(item[6])
            elif kind == "user":
                copier_users.add(item[3])

    from confluent_kafka import Consumer, TopicPartition

    mon = Consumer({**security(cfg), "bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"],
                    "enable.auto.commit": False})
    tps = [TopicPartition(cfg["input"], p) for p in range(cfg["input_partitions"])]
    try:
        while time.monotonic() - t_copy < cfg["timeout"]:
            drain_stats()
            if chaos is not None:
                chaos(time.monotonic() - t_copy, len(commit_times))
            now = time.monotonic()
            if now - last_print >= 1.0:
                last_print = now
                try:
                    committed = sum(max(tp.offset, 0) for tp in mon.committed(tps, 10))
                except Exception:  # noqa: BLE001 — coordinator moving
                    committed = -1
                c = sum(x[0] for x in progress.values())
                a = sum(x[1] for x in progress.values())
                echo(f"  [{now - t_copy:6.1f}s] committed offsets {committed}/{cfg['messages']}  "
                     f"txns committed {c} aborted {a}", err=True)
                if committed >= cfg["messages"]:
                    completed = True
                    break
            fatal.extend(pool.died())
            if fatal:
                break
            time.sleep(0.2)
    finally:
        ended_at = time.time()
        copy_s = time.monotonic() - t_copy
        mon.close()
        pool.stop_all()
        drain_stats()
        shutil.rmtree(run_dir, ignore_errors=True)
    result = verify(cfg, aborted_tags, echo)
    result.update({
        "messages": cfg["messages"], "copiers": cfg["copiers"], "seed": cfg["seed"],
        "transactions_committed": sum(x[0] for x in progress.values()),
        "transactions_aborted": sum(x[1] for x in progress.values()),
        "copy_completed": completed,
        "copy_seconds": round(copy_s, 2), "msgs_per_s": round(cfg["messages"] / copy_s, 1) if copy_s else 0,
        "commit_p99_ms": round(sorted(commit_ms)[int(len(commit_ms) * 0.99)] if commit_ms else 0, 2),
        "copier_restarts": sum(pool.incarnation.values()),
        "fatal": fatal,
        "warnings": [],
        "copy_started_at": started_at, "copy_ended_at": ended_at,
        "commit_times": sorted(commit_times),
        "longest_no_commit_by_copier_s": {i: _longest_gap(ts)
                                           for i, ts in sorted(commits_by_copier.items())},
    })
    if secured is not None:
        ran_as = sorted(f"User:{u}" if u else "(no SASL user)" for u in copier_users)
        secured = {**secured, "copiers_ran_as": ran_as,
                   "least_privilege": secured["least_privilege"] and ran_as == [secured["principals"]["copier"]]}
        result["security"] = secured
        if not secured["least_privilege"]:
            result["violations"].append(
                f"least privilege: ACLs {'as planned' if secured['acls_match_plan'] else 'NOT as planned'}, "
                f"refused outside the plan {secured['probes']} (want {PROBE_EXPECT}), copiers ran as "
                f"{secured['copiers_ran_as']}")
    result["eos_ok"] = (result["duplicates"] == 0 and result["losses"] == 0 and result["order_violations"] == 0
                        and result["aborted_visible"] == 0 and result["phantoms"] == 0 and result["offsets_match"]
                        and result["open_txns_left"] == 0 and not fatal)
    result["ok"] = result["eos_ok"] and (secured is None or secured["least_privilege"])
    return result


def _longest_gap(times: list[float]) -> float | None:
    """The longest stretch between two consecutive events (None for fewer than two)."""
    ts = sorted(times)
    return round(max(b - a for a, b in zip(ts, ts[1:])), 2) if len(ts) > 1 else None


def print_summary(result: dict) -> None:
    rows = [
        ("messages", result["messages"], True),
        ("transactions committed", result["transactions_committed"], True),
        ("transactions aborted (deliberate or forced)", result["transactions_aborted"], True),
        ("output records (read_committed)", result["output_records"], True),
        ("duplicates", result["duplicates"], result["duplicates"] == 0),
        ("losses", result["losses"], result["losses"] == 0),
        ("order violations", result["order_violations"], result["order_violations"] == 0),
        ("aborted records visible", result["aborted_visible"], result["aborted_visible"] == 0),
        ("phantom records (never written)", result["phantoms"], result["phantoms"] == 0),
        ("not copied before the timeout", result["uncopied"], result["uncopied"] == 0),
        ("committed offsets == input end", result["offsets_match"], result["offsets_match"]),
        ("output partitions with a transaction left open", result["open_txns_left"], result["open_txns_left"] == 0),
        ("waited for open transactions to complete (s)", result["open_txn_wait_s"], True),
        ("max end-to-end latency (ms)", result["max_e2e_latency_ms"], True),
        ("copy throughput (msgs/s)", result["msgs_per_s"], True),
        ("commit_transaction p99 (ms)", result["commit_p99_ms"], True),
    ]
    sec = result.get("security")
    if sec is not None:
        rows.append(("copiers ran as (least privilege)", ", ".join(sec["copiers_ran_as"]),
                     sec["copiers_ran_as"] == [sec["principals"]["copier"]]))
        rows.append(("ACLs read back == plan", sec["acls_match_plan"], sec["acls_match_plan"]))
        rows += [(f"refused: {what}", err, err == PROBE_EXPECT[what]) for what, err in sec["probes"].items()]
        cleanup = sec.get("cleanup")
        if cleanup is not None:  # a removal that failed is a warning below, not a failure
            rows.append(("removed at the end: users + ACLs",
                         "kept" if cleanup["kept"] else f"{len(cleanup['removed_users'])} + "
                                                        f"{len(cleanup['removed_acls'])}", True))
    width = max(len(r[0]) for r in rows)
    click.echo("-" * (width + 24))
    for name, value, good in rows:
        click.echo(f"{name:<{width}}  {str(value):>12}  {'ok' if good else 'FAILED'}")
    click.echo("-" * (width + 24))
    for line in result["violations"]:
        click.echo(f"  {line}")
    for line in result["fatal"]:
        click.echo(f"  fatal: {line}")
    for line in result.get("warnings", ()):
        click.echo(f"  warning: {line}")
    if result["ok"]:
        click.echo("EXACTLY-ONCE HELD")
    elif result["eos_ok"]:
        click.echo(f"EXACTLY-ONCE HELD, LEAST PRIVILEGE DID NOT (seed {result['seed']})")
    else:
        click.echo(f"GUARANTEE BROKEN (seed {result['seed']})")


def launch_cluster(n: int, data: Path, secure: bool = False):
    """A fresh kaas cluster through the supervisor, on free ports (``kaas cluster --secure``
    with ``secure``)."""
    from kaas.testing import ClusterProcess  # the project's own launcher

    return ClusterProcess(data, n, secure=secure).start()


def admin_settings(path: Path) -> dict:
    """The admin's security settings from client properties (``key=value``), without
    ``bootstrap.servers`` (the run's bootstrap is given apart)."""
    from kaas.testing import client_settings

    return client_settings(path)


@click.group()
def cli() -> None:
    """Exactly-once harness for kaas (or any Kafka cluster)."""


@cli.command()
@click.option("--bootstrap", default=None, help="Bootstrap servers of a running cluster.")
@click.option("--start-cluster", type=int, default=0, help="Start a fresh kaas cluster of this many brokers.")
@click.option("--messages", type=int, default=10000, show_default=True)
@click.option("--copiers", type=int, default=3, show_default=True)
@click.option("--commit-every", type=int, default=100, show_default=True, help="Messages per transaction (max).")
@click.option("--abort-every", type=int, default=10, show_default=True,
              help="Abort about one transaction in this many (0: never).")
@click.option("--input-partitions", type=int, default=6, show_default=True)
@click.option("--output-partitions", type=int, default=6, show_default=True)
@click.option("--rate", type=float, default=0, help="Messages/s per copier (0: unlimited).")
@click.option("--timeout", type=float, default=300, show_default=True)
@click.option("--seed", type=int, default=None, help="Random seed (printed).")
@click.option("--secure", is_flag=True,
              help="SASL_SSL with ACLs: with --start-cluster, start kaas cluster --secure; else give the admin's "
                   "settings with --command-config. The copiers, the seeding producer and the verifier run as "
                   "SCRAM users of their own with only the ACLs they need.")
@click.option("--command-config", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="--secure with --bootstrap: the admin's client properties (key=value, librdkafka's; "
                   "e.g. DATA/run/client.properties of kaas cluster --secure).")
@click.option("--keep-users", is_flag=True,
              help="--secure: leave the run's SCRAM users and ACLs on the cluster for inspection (by default "
                   "they are removed at the end, also of a failed or interrupted run; their passwords are never "
                   "shown).")
def run(bootstrap, start_cluster, messages, copiers, commit_every, abort_every, input_partitions,
        output_partitions, rate, timeout, seed, secure, command_config, keep_users) -> None:
    """Seed, copy with transactions, verify; exit 0 only if exactly-once held."""
    seed = seed if seed is not None else random.randrange(1 << 30)
    if command_config is not None and not secure:
        raise click.UsageError("--command-config goes with --secure")
    if keep_users and (not secure or start_cluster):
        raise click.UsageError("--keep-users goes with --bootstrap and --secure (a cluster of --start-cluster "
                               "is removed at the end)")
    if start_cluster and command_config is not None:
        raise click.UsageError("--command-config goes with --bootstrap (--start-cluster --secure makes its own admin)")
    if secure and not start_cluster and command_config is None:
        raise click.UsageError("--secure with --bootstrap needs the admin's --command-config")
    cluster = None
    tmp = None
    if start_cluster:
        tmp = Path(tempfile.mkdtemp(prefix="kaas-eos-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
        cluster = launch_cluster(start_cluster, tmp / "data", secure=secure)
        bootstrap = cluster.bootstrap
        if secure:
            command_config = cluster.client_properties
    if not bootstrap:
        raise click.UsageError("give --bootstrap or --start-cluster")
    run_id = uuid.uuid4().hex[:8]
    cfg = {"bootstrap": bootstrap, "messages": messages, "copiers": copiers, "commit_every": commit_every,
           "abort_every": abort_every, "input_partitions": input_partitions,
           "output_partitions": output_partitions, "rate": rate, "timeout": timeout, "seed": seed,
           "input": f"eos-in-{run_id}", "output": f"eos-out-{run_id}", "group": f"{GROUP_PREFIX}-{run_id}"}
    if secure:
        cfg.update(secure=True, keep_users=keep_users, security={"admin": admin_settings(command_config)})
    click.echo(f"eos harness: seed={seed} bootstrap={bootstrap}{' (secure)' if secure else ''}")
    try:
        result = run_harness(cfg)
    finally:
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    print_summary(result)
    click.echo(json.dumps({k: v for k, v in result.items()
                           if k not in ("committed_offsets", "input_ends", "commit_times")}))
    sys.exit(0 if result["ok"] else 1)


def interrupt_on_sigterm() -> None:
    """Let SIGTERM (``kill``, a CI run cancelled) unwind a harness script as Ctrl-C does,
    through its ``finally`` blocks: what it started is stopped, what it made is removed."""
    def interrupt(_signum, _frame) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)


if __name__ == "__main__":
    # the run's users and ACLs removed, the copiers and a --start-cluster cluster stopped
    interrupt_on_sigterm()
    cli()
