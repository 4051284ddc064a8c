"""scripts/compat_table.py (``make compat``): the table's rows from a JUnit XML report, with
the JUnit and Go tests the Java and Go-modules tests print as rows of their own."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import compat_table  # noqa: E402

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.integration.test_java_clients" name="test_java_client_suite" time="180.5"><system-out>
passed   ProducerTest.idempotent
failure  AdminTest.deleteRecords
skipped: kaas: share.delivery.count.limit is unknown ShareTest.limit
</system-out></testcase>
<testcase classname="tests.integration.test_go_modern" name="test_go_modules_clients" time="40.1">
<failure message="x">boom</failure><system-out>PASS  TestFranzClassicConsumerGroup
FAIL  TestKafkaGoWriterAndGroupReader
</system-out></testcase>
<testcase classname="tests.integration.test_go_clients" name="test_go_client" time="3.0">
<skipped type="pytest.skip" message="go is missing">x</skipped></testcase>
</testsuite></testsuites>
"""


def test_rows_list_each_test_and_the_tests_within(tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text(REPORT)
    assert compat_table.rows(xml) == [
        ("test_java_clients", "test_java_client_suite", "passed", 180.5),
        ("test_java_clients", "  ProducerTest.idempotent", "passed", 0.0),
        ("test_java_clients", "  AdminTest.deleteRecords", "failure", 0.0),
        ("test_java_clients", "  ShareTest.limit", "skipped: kaas: share.delivery.count.limit is unknown", 0.0),
        ("test_go_modern", "test_go_modules_clients", "failure", 40.1),
        ("test_go_modern", "  TestFranzClassicConsumerGroup", "passed", 0.0),
        ("test_go_modern", "  TestKafkaGoWriterAndGroupReader", "failure", 0.0),
        ("test_go_clients", "test_go_client", "skipped: go is missing", 3.0),
    ]
