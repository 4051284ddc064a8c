#!/usr/bin/env python3
"""``make compat``: the other clients' suites, each against a fresh kaas cluster its tests
start, then one pass/fail table of every test (docs/compatibility.rst).

    python scripts/compat_table.py [--out DIR] [--groups go,java,features,tools]

The suites are pytest files, run one group per pytest process (as ``make compat`` always
has): the Go clients (Debian's Sarama and confluent-kafka-go; the module-proxy franz-go,
sarama 1.61 and kafka-go 0.4.51 of ``tests/go/modern``), Apache's Java clients (the JUnit 5
suite of ``tests/java``), Apache's command-line tools and ``kafka-features``. pytest writes
a JUnit XML report per group (with each test's output); the table has a row per pytest
test, and under the Java and Go-modules tests a row per JUnit or Go test they ran (from the
verdict lines they print). A skipped test (a tool missing) is listed with its reason. Exit
status 1 when any test failed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROUPS = {
    "go": ["tests/integration/test_go_clients.py", "tests/integration/test_go_modern.py"],
    "java": ["tests/integration/test_java_clients.py"],
    "features": ["tests/integration/test_features_cluster.py"],
    "tools": ["tests/integration/test_apache_tools.py", "tests/integration/test_apache_group_tools.py"],
}
# the verdict lines tests/integration/test_java_clients.py and test_go_modern.py print
# (a Java skip's verdict holds its message: "skipped: kaas: why Class.method")
SUB = re.compile(r"^(passed|failure|error|skipped: .*|PASS|FAIL|SKIP) +(\S+)$")


def rows(xml: Path) -> list[tuple[str, str, str, float]]:
    """(suite, test, verdict, seconds) of each test case of one JUnit XML report, each
    followed by the sub-tests its output names."""
    out = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        suite = case.get("classname", "").rsplit(".", 1)[-1]
        verdict = "passed"
        for kind in ("failure", "error", "skipped"):
            el = case.find(kind)
            if el is not None:
                verdict = kind if kind != "skipped" else f"skipped: {el.get('message', '')}"
        out.append((suite, case.get("name", ""), verdict, float(case.get("time", 0))))
        text = "".join(el.text or "" for el in case.iter("system-out"))
        for line in text.splitlines():
            m = SUB.match(line.strip())
            if m:
                v = {"PASS": "passed", "FAIL": "failure", "SKIP": "skipped"}.get(m.group(1), m.group(1))
                out.append((suite, f"  {m.group(2)}", v, 0.0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="directory for the JUnit XML reports (default: a temp one)")
    ap.add_argument("--groups", default=",".join(GROUPS),
                    help=f"the suites to run, comma-separated (default: all of {', '.join(GROUPS)})")
    args = ap.parse_args()
    chosen = [g.strip() for g in args.groups.split(",") if g.strip()]
    unknown = sorted(set(chosen) - set(GROUPS))
    if unknown:
        ap.error(f"unknown groups {unknown}; known: {', '.join(GROUPS)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="kaas-compat-"))
    out.mkdir(parents=True, exist_ok=True)
    table: list[tuple[str, str, str, float]] = []
    spent: dict[str, float] = {}
    for group in chosen:
        files = GROUPS[group]
        xml = out / f"{group}.xml"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={xml}",
                        "-o", "junit_logging=system-out", *files], cwd=ROOT)
        spent[group] = time.monotonic() - t0
        if xml.exists():
            table += rows(xml)
        else:
            table.append((group, "(pytest wrote no report)", "error", 0.0))
    width = max(len(f"{s}::{t}") for s, t, _, _ in table)
    print(f"\n{'test':<{width}}  {'result':<8} {'s':>6}")
    for suite, test, verdict, secs in table:
        name = test if test.startswith("  ") else f"{suite}::{test}"
        print(f"{name:<{width}}  {verdict[:60]:<8} {secs:>6.1f}" if secs else f"{name:<{width}}  {verdict[:60]}")
    counts = {k: sum(1 for _, t, v, _ in table if v.startswith(k)) for k in ("passed", "failure", "error", "skipped")}
    print(f"\n{counts['passed']} passed, {counts['failure'] + counts['error']} failed, {counts['skipped']} skipped "
          f"(rows include the Java and Go tests within their pytest test); "
          + ", ".join(f"{g} {s:.0f} s" for g, s in spent.items()) + f"; reports in {out}")
    sys.exit(1 if counts["failure"] + counts["error"] else 0)


if __name__ == "__main__":
    main()
