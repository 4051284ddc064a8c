#!/usr/bin/env python3
"""Run librdkafka's own integration tests against kaas clusters (issue 31).

Takes an **already built** librdkafka ``tests/`` directory (``test-runner`` and
``run-test.sh`` in it; see docs/compatibility.rst for how to build one: nothing here fetches
or builds librdkafka). Starts a 3-broker ``kaas cluster`` from this checkout with
``--num-partitions 4`` (librdkafka's test set-up), writes a ``test.conf`` of its own (the
tree's one is left alone: ``RDKAFKA_TEST_CONF``), and runs each test, or one 0081 subtest at a
time (``SUBTESTS=do_test_<name>:``), with ``./run-test.sh -p1 -L``. 0081's ACL subtests run
on a second cluster with the authoriser on, plaintext listeners and ``User:ANONYMOUS`` as a
super user, as librdkafka's own set-up. 0081's authorised-operations subtests
(DescribeConsumerGroups_with_authorized_ops, DescribeTopics, DescribeCluster) run on a third,
``sasl``, cluster (``kaas cluster --secure``: SASL_SSL, SCRAM-SHA-512, the authoriser on, plus
``--allow-everyone-if-no-acl-found``), as a SCRAM user who is not a super user, so that the
ACLs they add for it change what it may do. 0077 calls Kafka's ``kafka-topics.sh``:
``KAFKA_PATH`` points at ``tests/`` of this checkout, whose ``bin/kafka-topics.sh`` maps its
flags to ``kaas topics``.

``--group-protocol consumer`` runs the tests' consumers with ``group.protocol=consumer``
(KIP-848: ``TEST_CONSUMER_GROUP_PROTOCOL=consumer``) on clusters with the brokers' default
group settings (a 5 s heartbeat interval, a 45 s session: what users run, and what
librdkafka's CI runs against Apache) and, without ``--only``, runs issue 33's set
(``kip848``). ``--fast-heartbeat`` gives consumer-protocol members a 500 ms heartbeat
interval instead (``CONSUMER_BROKER_ARGS``, as Apache's own integration tests set it).
``--only kip848`` (or ``classic``) names a whole set, in either protocol.

``--only share`` runs the share consumer tests (KIP-932, issue 34's set) as librdkafka's own
CI runs them against Apache: the brokers allow record locks down to 1 s
(``SHARE_BROKER_ARGS``) and each runs with ``CI=true`` (its test framework's timeouts ×3).

Prints one line per run as it ends, then a table (or ``--json``) of every result with the
first failure message; each run's whole output is kept under ``--log-dir``. Exits 1 when any
run failed.

    python scripts/librdkafka_tests.py --rdkafka-tests /path/to/librdkafka/tests
    python scripts/librdkafka_tests.py --rdkafka-tests DIR --only 0077 --only 0081/ListOffsets
    python scripts/librdkafka_tests.py --rdkafka-tests DIR --group-protocol consumer
    python scripts/librdkafka_tests.py --rdkafka-tests DIR --only share
    python scripts/librdkafka_tests.py --rdkafka-tests DIR --only kip848      # the same set, classic
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import eos_harness  # noqa: E402

from kaas.testing import ClusterProcess  # noqa: E402

#: the classic-protocol tests issue 31 holds kaas to (they passed before it)
CLASSIC = ["0103", "0129", "0090", "0094", "0076", "0030", "0102", "0018", "0029", "0113"]
#: the tests issue 33 holds kaas to with group.protocol=consumer (KIP-848), and in classic mode
KIP848 = ["0018", "0029", "0030", "0031", "0033", "0034", "0042", "0045", "0050", "0051", "0056", "0069",
          "0089", "0091", "0102", "0103", "0113", "0118", "0122", "0130", "0132", "0137"]
#: the share consumer tests (KIP-932) issue 34 holds kaas to: 0182, 0183 and 0186 run only
#: against librdkafka's mock cluster (the runner skips them on a real one)
SHARE = ["0170", "0171", "0172", "0173", "0174", "0175", "0176", "0177", "0178", "0179", "0180", "0181",
         "0184", "0185"]
#: names for ``--only``
SETS = {"classic": CLASSIC, "kip848": KIP848, "share": SHARE}
GROUP_PROTOCOLS = ("classic", "consumer")
#: 0081's subtest functions in the order do_test_apis() runs them (librdkafka 2.15)
SUBTESTS_0081 = [
    "unclean_destroy", "CreateTopics", "DeleteTopics", "CreatePartitions",
    "CreateAcls", "DescribeAcls", "DeleteAcls", "AlterConfigs", "IncrementalAlterConfigs",
    "DescribeConfigs", "DescribeConfigs_groups", "DeleteRecords", "ListConsumerGroups",
    "DescribeConsumerGroups", "DescribeTopics", "DescribeCluster",
    "DescribeConsumerGroups_with_authorized_ops", "DeleteGroups", "DeleteConsumerGroupOffsets",
    "ListOffsets", "AlterConsumerGroupOffsets", "ListConsumerGroupOffsets", "UserScramCredentials",
]
#: the subtests that need the authoriser on (SECURITY_DISABLED without it, as Apache)
ACL_SUBTESTS = {"CreateAcls", "DescribeAcls", "DeleteAcls"}
#: the subtests whose authorised-operations checks need SASL (PLAIN or SCRAM) and a principal
#: that is not a super user: on plaintext the first skips ("Test requires authorization to be
#: setup") and the other two leave out their ACL part
SASL_SUBTESTS = {"DescribeConsumerGroups_with_authorized_ops", "DescribeTopics", "DescribeCluster"}
BROKER_ARGS = ["--num-partitions", "4"]
ACL_BROKER_ARGS = [*BROKER_ARGS, "--authorizer", "--super-users", "User:ANONYMOUS"]
#: after ``kaas cluster --secure``'s own options (SASL_SSL listeners, SCRAM-SHA-512, the
#: authoriser with its admin and broker users as super users): what no ACL names is open
#: (Apache's ``allow.everyone.if.no.acl.found=true``), so the tests' user, no super user,
#: may do everything until an ACL of its own narrows it
SASL_BROKER_ARGS = [*BROKER_ARGS, "--allow-everyone-if-no-acl-found"]
#: added to each cluster's options with ``--group-protocol consumer --fast-heartbeat``:
#: consumer-protocol members heartbeat every 500 ms (Apache's integration tests set the
#: interval and its minimum so); the session timeout stays Kafka's default (45 s)
CONSUMER_BROKER_ARGS = ["--group-consumer-heartbeat-interval-ms", "500",
                        "--group-consumer-min-heartbeat-interval-ms", "500"]
#: added to each cluster's options when share consumer tests run: 0173 and 0176 set the
#: group config share.record.lock.duration.ms=3000, below Apache's default minimum of 15 s;
#: librdkafka's CI starts its Apache cluster with group.share.min.record.lock.duration.ms=1000
#: (packaging/tools/run-share-consumer-tests.sh)
SHARE_BROKER_ARGS = ["--group-share-min-record-lock-duration-ms", "1000"]
#: the SCRAM user the tests connect as on the sasl cluster (not a super user)
SASL_TEST_USER = "rdkafka"
_FAILED = re.compile(r'### Test "(?P<test>[^"]*)" failed at (?P<where>\S+) at [^#]*###\s*\n(?P<msg>[^\n]*)')
_ANSI = re.compile(r"\x1b\[[0-9;]*m|\x1b\(B")


@dataclass
class Run:
    """One test-runner invocation: a test, or one subtest of it, on the plain, ACL or SASL cluster."""
    test: str
    subtest: str | None
    cluster: str
    result: str = "NOT RUN"  # PASS, FAIL, SKIP (every matched subtest skipped), NO MATCH, TIMEOUT
    seconds: float = 0.0
    failure: str = ""
    log: str = ""

    @property
    def name(self) -> str:
        return f"{self.test}/{self.subtest}" if self.subtest else self.test


def plan(only: tuple[str, ...], acl_for_all: bool, sasl_for_all: bool = False,
         group_protocol: str = "classic") -> list[Run]:
    """The runs: ``only`` entries (``0077``, ``0081``, ``0081/ListOffsets``, or a set of
    ``SETS``), else every classic test, 0077, and each 0081 subtest on its own (with
    ``group_protocol="consumer"``: the ``kip848`` set). Each on the plain cluster, but the
    ACL subtests on the ACL one (everything with ``acl_for_all``) and the SASL subtests on
    the SASL one (everything with ``sasl_for_all``)."""
    if group_protocol not in GROUP_PROTOCOLS:
        raise click.BadParameter(f"group protocol {group_protocol!r}; one of {', '.join(GROUP_PROTOCOLS)}")
    default = KIP848 if group_protocol == "consumer" else [*CLASSIC, "0077", *(f"0081/{s}" for s in SUBTESTS_0081)]
    specs = [t for spec in only for t in SETS.get(spec, [spec])] or default
    runs = []
    for spec in specs:
        test, _, sub = spec.partition("/")
        if sub and sub.removeprefix("do_test_") not in SUBTESTS_0081:
            raise click.BadParameter(f"unknown 0081 subtest {sub!r}; one of {', '.join(SUBTESTS_0081)}")
        sub = sub.removeprefix("do_test_") or None
        if sasl_for_all or sub in SASL_SUBTESTS:
            kind = "sasl"
        elif acl_for_all or sub in ACL_SUBTESTS:
            kind = "acl"
        else:
            kind = "plain"
        runs.append(Run(test, sub, kind))
    return runs


def is_share(test: str) -> bool:
    """A share consumer test (0170 to 0186)."""
    return test.isdigit() and 170 <= int(test) <= 186


def share_args(runs: list[Run], more: tuple[str, ...]) -> tuple[str, ...]:
    """``more`` (``--broker-arg``), with ``SHARE_BROKER_ARGS`` before it when a share
    consumer test runs and ``more`` does not set that option itself."""
    if any(is_share(r.test) for r in runs) and SHARE_BROKER_ARGS[0] not in more:
        return (*SHARE_BROKER_ARGS, *more)
    return more


def judge(run: Run, rc: int | None, out: str) -> None:
    """Set ``run.result`` and ``run.failure`` from the runner's exit code and output."""
    text = _ANSI.sub("", out)
    fails = [f"{m['where']}: {m['msg'].strip()}" for m in _FAILED.finditer(text) if m["test"] != "<MAIN>"]
    if rc is None:
        run.result, run.failure = "TIMEOUT", (fails[0] if fails else "no failure reported before the timeout")
    elif rc != 0:
        main = [f"{m['where']}: {m['msg'].strip()}" for m in _FAILED.finditer(text)]
        run.result, run.failure = "FAIL", (fails or main or [f"run-test.sh exited {rc}"])[0]
        if "test_kafka_topics" in run.failure:  # the stand-in's (kaas topics') own words say why
            said = re.search(r"^(?:Error: |kafka-topics\.sh \(kaas stand-in\): )(.*)$", text, re.M)
            if said:
                run.failure = f"kafka-topics.sh: {said[1].strip()}"
    elif run.subtest and f"[ do_test_{run.subtest}:" not in text:
        run.result = "NO MATCH"  # no subtest of that name ran (renamed in this librdkafka?)
    elif run.subtest and ": PASS (" not in text and ": SKIP: " in text:
        run.result = "SKIP"
        run.failure = re.search(r": SKIP: ([^\]]*)\]", text)[1].strip()
    else:
        run.result = "PASS"


def run_one(run: Run, index: int, tests_dir: Path, cluster: ClusterProcess, conf: Path, log_dir: Path,
            kafka_version: str, timeout: float, echo, group_protocol: str = "classic", as_ci: bool = False,
            subtests: str | None = None) -> None:
    env = {**os.environ, "TESTS": run.test, "TEST_KAFKA_VERSION": kafka_version,
           "RDKAFKA_TEST_CONF": str(conf), "KAFKA_PATH": str(ROOT / "tests"), "BROKERS": cluster.bootstrap,
           "TEST_CONSUMER_GROUP_PROTOCOL": group_protocol}
    if as_ci or is_share(run.test):
        # librdkafka's framework: every test timeout x3, at most 3 tests at once. The share
        # consumer tests always run so, as librdkafka's CI runs them (semaphore.yml sets
        # CI=true, run-in-docker.sh passes it on). 0170 cannot pass without: one subtest
        # resets the test's deadline to 60 s, and the waits the later ones make by design
        # (rd_sleep, polls of 2 s that expect nothing) add up to over 90 s.
        env["CI"] = "true"
    else:
        env.pop("CI", None)
    kaas = Path(sys.executable).parent / "kaas"  # this checkout's, for tests/bin/kafka-topics.sh
    if kaas.exists():
        env["KAAS"] = str(kaas)
    if run.subtest:
        env["SUBTESTS"] = f"do_test_{run.subtest}:"
    elif subtests:
        env["SUBTESTS"] = subtests
    else:
        env.pop("SUBTESTS", None)
    log = log_dir / f"{index:02d}-{run.name.replace('/', '-')}.log"  # a test named twice runs twice
    run.log = str(log)
    started = time.monotonic()
    with open(log, "wb") as f:
        proc = subprocess.Popen(["./run-test.sh", "-p1", "-L"], cwd=tests_dir, env=env, stdout=f,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            rc = None
    run.seconds = round(time.monotonic() - started, 1)
    judge(run, rc, log.read_text(errors="replace"))
    echo(f"{run.name:<52} {run.cluster:<5} {run.result:<8} {run.seconds:>6.1f}s  {run.failure[:150]}")


def broker_args(kind: str, group_protocol: str = "classic", more: tuple[str, ...] = (),
                fast_heartbeat: bool = False) -> list[str]:
    """The ``kaas broker`` options of the cluster of ``kind`` for a run in ``group_protocol``
    (the brokers' default group settings, or with ``fast_heartbeat`` a 500 ms heartbeat for
    consumer-protocol members), then ``more`` (``--broker-arg``)."""
    extra = {"acl": ACL_BROKER_ARGS, "sasl": SASL_BROKER_ARGS}.get(kind, BROKER_ARGS)
    fast = fast_heartbeat and group_protocol == "consumer"
    return [*extra, *(CONSUMER_BROKER_ARGS if fast else ()), *more]


@contextmanager
def open_cluster(kind: str, tmp: Path, echo, group_protocol: str = "classic",
                 more: tuple[str, ...] = (), fast_heartbeat: bool = False) -> Iterator[tuple[ClusterProcess, str]]:
    """The cluster of ``kind`` running, with the ``test.conf`` text its clients need."""
    extra = broker_args(kind, group_protocol, more, fast_heartbeat)
    secure = kind == "sasl"
    cluster = ClusterProcess(tmp / f"data-{kind}", 3, extra=extra, secure=secure)
    password = ""
    if secure:  # the tests' user, written to the credentials file before any broker runs
        from kaas.tools.users import add_offline

        cluster.data.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(18)
        add_offline(cluster.data, SASL_TEST_USER, password)
    echo(f"# starting the {kind} cluster: kaas cluster --brokers 3{' --secure' if secure else ''} -- "
         f"{' '.join(extra)}" + (f" (user {SASL_TEST_USER}, not a super user)" if secure else ""))
    with cluster.running(timeout=60):
        echo(f"# {kind} cluster up at {cluster.bootstrap} (logs: {cluster.data / 'run'})")
        yield cluster, conf_for(cluster, password)


def conf_for(cluster: ClusterProcess, password: str) -> str:
    """``test.conf``: the bootstrap servers; for the SASL cluster, its client settings
    (SASL_SSL, its CA, SCRAM-SHA-512) with the tests' user in place of the admin."""
    conf = {"bootstrap.servers": cluster.bootstrap}
    if cluster.secure:
        conf = {**cluster.client_config(), **conf, "sasl.username": SASL_TEST_USER, "sasl.password": password}
    return "".join(f"{k}={v}\n" for k, v in conf.items())


def table(runs: list[Run]) -> str:
    rows = [("test", "cluster", "result", "seconds", "first failure")]
    rows += [(r.name, r.cluster, r.result, f"{r.seconds:.1f}", r.failure) for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
                     for row in rows)


@click.command()
@click.option("--rdkafka-tests", "tests_dir", required=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="librdkafka's tests/ directory, already built (test-runner in it).")
@click.option("--only", multiple=True, metavar="TEST[/SUBTEST]|SET",
              help="Run this only (repeatable): 0077, 0081, 0081/ListOffsets, or a set: kip848 (issue 33's "
                   "22 tests), classic (issue 31's ten), share (issue 34's 14 share consumer tests). Default: "
                   "the ten classic tests, 0077 and each 0081 subtest; with --group-protocol consumer, kip848.")
@click.option("--group-protocol", type=click.Choice(GROUP_PROTOCOLS), default="classic", show_default=True,
              help="TEST_CONSUMER_GROUP_PROTOCOL: consumer runs the tests' consumers with KIP-848, on brokers "
                   "with their default group settings (5 s heartbeat interval, 45 s session).")
@click.option("--fast-heartbeat", is_flag=True,
              help="With --group-protocol consumer: give consumer-protocol members a 500 ms heartbeat interval "
                   "(as Apache's own integration tests), not the brokers' default 5 s.")
@click.option("--acl-for-all", is_flag=True, help="Run everything on the ACL cluster, not only 0081's ACL subtests "
              "(the SASL subtests stay on the SASL cluster).")
@click.option("--sasl-for-all", is_flag=True, help="Run everything on the SASL cluster (SASL_SSL, a SCRAM user who is "
              "not a super user, allow.everyone.if.no.acl.found), not only 0081's authorised-operations subtest.")
@click.option("--broker-arg", "more_args", multiple=True, metavar="ARG",
              help="One more ``kaas broker`` argument for every cluster (repeatable; a value is its own "
                   "--broker-arg), e.g. --broker-arg=--group-consumer-max-size --broker-arg=10. Share consumer "
                   "tests add --group-share-min-record-lock-duration-ms 1000 unless given here.")
@click.option("--kafka-version", default="4.2.0", show_default=True,
              help="TEST_KAFKA_VERSION: the Apache release whose answers the tests expect (4.2: group configs, "
                   "share groups).")
@click.option("--timeout", default=1800.0, show_default=True,
              help="Seconds per run (0113 alone takes over 10 minutes).")
@click.option("--ci", "as_ci", is_flag=True,
              help="Run the tests as librdkafka's CI does (CI=true): its framework then triples every test's "
                   "timeout. 0113's t_max_poll_interval_exceeded needs it under the consumer protocol: the member "
                   "that stops polling is removed after the 45 s session timeout, past the subtest's 30 s.")
@click.option("--subtests", metavar="TEXT", help="SUBTESTS: run only the subtests whose name holds TEXT.")
@click.option("--log-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where each run's output goes (default: a new temporary directory, kept).")
@click.option("--json", "as_json", is_flag=True, help="The results as one JSON document on stdout.")
@click.option("--list", "list_only", is_flag=True, help="Print the runs and exit.")
def main(tests_dir: Path, only: tuple[str, ...], group_protocol: str, fast_heartbeat: bool, acl_for_all: bool,
         sasl_for_all: bool, more_args: tuple[str, ...], kafka_version: str, timeout: float, as_ci: bool,
         subtests: str | None, log_dir: Path | None, as_json: bool, list_only: bool) -> None:
    """Run librdkafka's tests against 3-broker kaas clusters; print each result."""
    runs = plan(only, acl_for_all, sasl_for_all, group_protocol)
    if list_only:
        for r in runs:
            click.echo(f"{r.name} ({r.cluster})")
        return
    more_args = share_args(runs, more_args)
    tests_dir = tests_dir.resolve()
    if not (tests_dir / "test-runner").exists() or not (tests_dir / "run-test.sh").exists():
        raise click.UsageError(f"{tests_dir} holds no built test-runner (make -C tests build)")

    def echo(line: str) -> None:
        click.echo(line, err=as_json)

    log_dir = (log_dir or Path(tempfile.mkdtemp(prefix="kaas-rdkafka-logs-"))).resolve()
    log_dir.mkdir(parents=True, exist_ok=True)
    heartbeat = ("500 ms consumer-group heartbeat (--fast-heartbeat)" if fast_heartbeat and group_protocol == "consumer"
                 else "the brokers' default group settings")
    echo(f"# logs in {log_dir}; TEST_CONSUMER_GROUP_PROTOCOL={group_protocol}; {heartbeat}")
    with tempfile.TemporaryDirectory(prefix="kaas-rdkafka-") as tmp_s:
        tmp = Path(tmp_s)
        for kind in ("plain", "acl", "sasl"):
            mine = [(i, r) for i, r in enumerate(runs) if r.cluster == kind]
            if not mine:
                continue
            with open_cluster(kind, tmp, echo, group_protocol, more_args, fast_heartbeat) as (cluster, conf_text):
                conf = tmp / f"test-{kind}.conf"
                conf.write_text(conf_text)
                conf.chmod(0o600)  # a password for the sasl cluster
                for i, r in mine:
                    run_one(r, i, tests_dir, cluster, conf, log_dir, kafka_version, timeout, echo, group_protocol,
                            as_ci, subtests)
                (log_dir / f"cluster-{kind}").mkdir(exist_ok=True)
                for f in (cluster.data / "run").glob("*.log"):
                    (log_dir / f"cluster-{kind}" / f.name).write_bytes(f.read_bytes())
    if as_json:
        click.echo(json.dumps({"tests_dir": str(tests_dir), "log_dir": str(log_dir), "group_protocol": group_protocol,
                               "runs": [{**asdict(r), "name": r.name} for r in runs]}, indent=1))
    else:
        click.echo("\n" + table(runs))
    passed = sum(r.result in ("PASS", "SKIP") for r in runs)
    echo(f"# {passed}/{len(runs)} passed or skipped")
    sys.exit(0 if passed == len(runs) else 1)


if __name__ == "__main__":
    eos_harness.interrupt_on_sigterm()  # killed, it still stops its clusters (open_cluster's finally)
    main()
