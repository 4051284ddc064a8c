"""scripts/librdkafka_tests.py: which cluster each run goes to (0081's ACL subtests on the
ACL cluster, its authorised-operations subtests on the SASL one, everything else on the
plain one), the test.conf of each kind (the SASL one names the tests' user, never the
cluster's admin), and --group-protocol consumer: issue 33's set, the brokers' options, the
test runner's environment."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import pytest

from kaas.testing import ClusterProcess

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import librdkafka_tests as rt  # noqa: E402


def kinds(runs: list[rt.Run]) -> dict[str, str]:
    return {r.name: r.cluster for r in runs}


def test_default_plan_puts_each_subtest_on_its_cluster():
    got = kinds(rt.plan((), acl_for_all=False))
    assert got["0081/DescribeConsumerGroups_with_authorized_ops"] == "sasl"
    assert got["0081/DescribeTopics"] == got["0081/DescribeCluster"] == "sasl"
    assert {got[f"0081/{s}"] for s in rt.ACL_SUBTESTS} == {"acl"}
    assert got["0081/ListOffsets"] == got["0077"] == got["0103"] == "plain"
    assert len(got) == len(rt.CLASSIC) + 1 + len(rt.SUBTESTS_0081)


def test_for_all_flags():
    acl = kinds(rt.plan(("0081/ListOffsets", "0081/CreateAcls", "0081/DescribeTopics"), acl_for_all=True))
    assert acl == {"0081/ListOffsets": "acl", "0081/CreateAcls": "acl", "0081/DescribeTopics": "sasl"}
    sasl = kinds(rt.plan(("0077", "0081/CreateAcls"), acl_for_all=False, sasl_for_all=True))
    assert sasl == {"0077": "sasl", "0081/CreateAcls": "sasl"}
    with pytest.raises(click.BadParameter):
        rt.plan(("0081/NoSuchThing",), acl_for_all=False)


def test_conf_of_each_kind(tmp_path):
    plain = ClusterProcess(tmp_path / "plain", 3)
    assert rt.conf_for(plain, "") == f"bootstrap.servers={plain.bootstrap}\n"
    sasl = ClusterProcess(tmp_path / "sasl", 3, secure=True)
    sasl.client_properties.parent.mkdir(parents=True)
    sasl.client_properties.write_text("bootstrap.servers=elsewhere:1\nsecurity.protocol=SASL_SSL\n"
                                      "ssl.ca.location=/ca.pem\nsasl.mechanism=SCRAM-SHA-512\n"
                                      "sasl.username=admin\nsasl.password=admin-secret\n")
    lines = rt.conf_for(sasl, "pw").splitlines()
    assert dict(line.split("=", 1) for line in lines) == {
        "bootstrap.servers": sasl.bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": "/ca.pem",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": rt.SASL_TEST_USER, "sasl.password": "pw"}


def test_consumer_protocol_runs_issue_33s_set():
    runs = rt.plan((), acl_for_all=False, group_protocol="consumer")
    assert [r.name for r in runs] == rt.KIP848 and len(rt.KIP848) == 22
    assert {r.cluster for r in runs} == {"plain"}
    # a set by name, in either protocol, beside single tests
    assert [r.name for r in rt.plan(("kip848", "0077"), acl_for_all=False)] == [*rt.KIP848, "0077"]
    assert [r.name for r in rt.plan(("classic",), acl_for_all=False, group_protocol="consumer")] == rt.CLASSIC
    with pytest.raises(click.BadParameter):
        rt.plan((), acl_for_all=False, group_protocol="modern")


def test_consumer_protocol_broker_options_are_kaas_settings():
    from kaas.settings import Settings

    assert rt.broker_args("plain") == rt.BROKER_ARGS
    for kind in ("plain", "acl", "sasl"):
        # the consumer protocol on the brokers' defaults, unless a fast heartbeat is asked for
        assert rt.broker_args(kind, "consumer") == rt.broker_args(kind)
        assert rt.broker_args(kind, "classic", fast_heartbeat=True) == rt.broker_args(kind)
        args = rt.broker_args(kind, "consumer", fast_heartbeat=True)
        assert args[-len(rt.CONSUMER_BROKER_ARGS):] == rt.CONSUMER_BROKER_ARGS
        assert args[: -len(rt.CONSUMER_BROKER_ARGS)] == rt.broker_args(kind)
    fields = {f"--{name.replace('_', '-')}" for name in Settings.__dataclass_fields__}
    assert set(rt.CONSUMER_BROKER_ARGS[::2]) <= fields
    # --broker-arg: appended after the cluster's and the protocol's own options
    share = ("--group-share-min-record-lock-duration-ms", "1000")
    assert rt.broker_args("acl", "consumer", share, True) == [*rt.ACL_BROKER_ARGS, *rt.CONSUMER_BROKER_ARGS, *share]
    assert rt.broker_args("acl", "consumer", share) == [*rt.ACL_BROKER_ARGS, *share]
    assert rt.broker_args("plain", "classic", share) == [*rt.BROKER_ARGS, *share]
    assert share[0] in fields


def test_the_runner_gets_the_group_protocol(tmp_path):
    """run_one hands TEST_CONSUMER_GROUP_PROTOCOL to run-test.sh (a stand-in that prints its
    environment and passes)."""
    runner = tmp_path / "run-test.sh"
    runner.write_text("#!/bin/sh\necho TEST_CONSUMER_GROUP_PROTOCOL=$TEST_CONSUMER_GROUP_PROTOCOL TESTS=$TESTS\n")
    runner.chmod(0o755)
    cluster = ClusterProcess(tmp_path / "data", 3)
    for protocol in rt.GROUP_PROTOCOLS:
        run = rt.Run("0030", None, "plain")
        rt.run_one(run, 0, tmp_path, cluster, tmp_path / "test.conf", tmp_path, "3.9.0", 30, lambda _line: None,
                   protocol)
        assert run.result == "PASS"
        assert f"TEST_CONSUMER_GROUP_PROTOCOL={protocol} TESTS=0030" in Path(run.log).read_text()


def test_share_tests_run_as_librdkafkas_ci_runs_them(tmp_path, monkeypatch):
    """--only share: issue 34's 14 tests, on brokers that allow 1 s record locks (unless
    --broker-arg sets it), each with CI=true (librdkafka's CI: timeouts ×3); other tests
    get neither."""
    runs = rt.plan(("share",), acl_for_all=False)
    assert [r.name for r in runs] == rt.SHARE and {r.cluster for r in runs} == {"plain"}
    assert rt.share_args(runs, ()) == tuple(rt.SHARE_BROKER_ARGS)
    assert rt.share_args(runs, ("--x", "1")) == (*rt.SHARE_BROKER_ARGS, "--x", "1")
    own = (rt.SHARE_BROKER_ARGS[0], "2000")
    assert rt.share_args(runs, own) == own
    assert rt.share_args(rt.plan(("0077",), acl_for_all=False), ()) == ()
    monkeypatch.delenv("CI", raising=False)
    runner = tmp_path / "run-test.sh"
    runner.write_text("#!/bin/sh\necho CI=$CI TESTS=$TESTS\n")
    runner.chmod(0o755)
    cluster = ClusterProcess(tmp_path / "data", 3)
    for test, ci in (("0170", "true"), ("0030", "")):
        run = rt.Run(test, None, "plain")
        rt.run_one(run, 0, tmp_path, cluster, tmp_path / "test.conf", tmp_path, "4.2.0", 30, lambda _line: None)
        assert f"CI={ci} TESTS={test}" in Path(run.log).read_text()


def test_ci_and_subtests_reach_the_runner(tmp_path, monkeypatch):
    """``--ci`` sets CI for the runner (librdkafka's framework then triples its timeouts) and
    otherwise keeps the caller's CI out; ``--subtests`` becomes SUBTESTS for a plain test."""
    runner = tmp_path / "run-test.sh"
    runner.write_text('#!/bin/sh\necho "CI=[$CI] SUBTESTS=[$SUBTESTS]"\n')
    runner.chmod(0o755)
    cluster = ClusterProcess(tmp_path / "data", 3)
    monkeypatch.setenv("CI", "true")  # this suite's own CI must not leak into the runner
    monkeypatch.setenv("SUBTESTS", "stray")
    seen = []
    for as_ci, subtests in ((False, None), (True, "t_max_poll_interval_exceeded")):
        run = rt.Run("0113", None, "plain")
        rt.run_one(run, 0, tmp_path, cluster, tmp_path / "test.conf", tmp_path, "4.2.0", 30, lambda _line: None,
                   "consumer", as_ci, subtests)
        assert run.result == "PASS"
        seen.append(Path(run.log).read_text().strip().splitlines()[-1])
    assert seen == ["CI=[] SUBTESTS=[]", "CI=[true] SUBTESTS=[t_max_poll_interval_exceeded]"]
