"""scripts/librdkafka_tests.py: which cluster each run goes to (0081's ACL subtests on the
ACL cluster, its authorised-operations subtests on the SASL one, everything else on the
plain one) and the test.conf of each kind (the SASL one names the tests' user, never the
cluster's admin)."""

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
