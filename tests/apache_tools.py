"""Apache Kafka 4.4.0's command-line tools, run from the Maven-resolved ``kafka-tools``
(``compat/tools/pom.xml``) by their main classes, for the tests that drive kaas with them.

``tools()`` resolves the classpath once (Maven, cached in the temp directory per pom
content) and starts one JVM per test process, ``compat/tools/ToolRunner.java``, which runs
the tools' main classes one after another (a tool's ``Exit.exit`` unwinds it instead of
ending the JVM): a JVM start costs seconds of CPU on a busy 2-core machine, a tool run in a
warm JVM a fraction of that. ``tools().run("kafka-topics", "--list", bootstrap=bs)``
answers a ``ToolResult`` (exit status, standard output, standard error).

The tests need java, a JDK's compiler (the runner is launched as a source file) and mvn:
they skip (``tests/tools.py``) naming the missing tool and its package, and fail instead
when KAAS_REQUIRE_ALL=1.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import select
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from tests.tools import missing, require_tool

ROOT = Path(__file__).resolve().parents[1]
POM = ROOT / "compat" / "tools" / "pom.xml"
RUNNER = ROOT / "compat" / "tools" / "ToolRunner.java"
JVM_FLAGS = ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:CICompilerCount=1"]

# the tools' names (as Apache's bin/*.sh call them) -> their main classes in kafka-tools 4.4.0
MAIN_CLASSES = {
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
}

class ToolResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def tools_classpath() -> str:
    """The classpath of kafka-tools 4.4.0, resolved by Maven once per pom content."""
    require_tool("java", package="openjdk-17-jdk", why="Apache's tools run on it")
    require_tool("mvn", package="maven", why="resolves Apache's kafka-tools 4.4.0")
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / f"kaas-tools-cp-{digest}.txt"
    if not out.exists():
        tmp = out.with_name(f"{out.name}.{os.getpid()}")
        r = subprocess.run(["mvn", "-q", "-f", str(POM), "dependency:build-classpath",
                            f"-Dmdep.outputFile={tmp}"], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            missing(f"mvn could not resolve kafka-tools 4.4.0: {r.stdout[-500:]}{r.stderr[-500:]}")
        tmp.replace(out)
    return out.read_text().strip()


class ToolTimeout(AssertionError):
    pass


class Tools:
    """One ToolRunner JVM, started at the first ``run`` and again after a timeout."""

    def __init__(self, classpath: str) -> None:
        self.classpath = classpath
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.runs = 0

    def _start(self) -> subprocess.Popen[bytes]:
        require_tool("javac", package="openjdk-17-jdk", why="launches compat/tools/ToolRunner.java as a source file")
        self.proc = subprocess.Popen(["java", *JVM_FLAGS, "-cp", self.classpath, str(RUNNER)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return self.proc

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def _read(self, n: int, deadline: float, what: str) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        fd, chunks, got = self.proc.stdout.fileno(), [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ToolTimeout(f"{what}: no answer in time")
            chunk = os.read(fd, n - got)
            if not chunk:
                raise ToolTimeout(f"{what}: the tool runner ended (status {self.proc.wait()})")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _read_line(self, deadline: float, what: str) -> str:
        line = b""
        while not line.endswith(b"\n"):
            line += self._read(1, deadline, what)
        return line.decode()

    def run(self, tool: str, *args: str, bootstrap: str | None = None, timeout: float = 120) -> ToolResult:
        """Run ``tool`` (a name of MAIN_CLASSES) with ``args`` (and ``--bootstrap-server
        bootstrap`` first when given)."""
        argv = [MAIN_CLASSES[tool], *(["--bootstrap-server", bootstrap] if bootstrap else []), *args]
        assert not any("\t" in a or "\n" in a for a in argv), argv
        what = " ".join([tool, *args])
        with self.lock:
            proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
            assert proc.stdin is not None
            proc.stdin.write(("\t".join(argv) + "\n").encode())
            proc.stdin.flush()
            deadline = time.monotonic() + timeout
            try:
                _, code, n_out, n_err = self._read_line(deadline, what).split()
                out = self._read(int(n_out), deadline, what).decode()
                err = self._read(int(n_err), deadline, what).decode()
            except ToolTimeout:
                self.close()
                raise
            self.runs += 1
            return ToolResult(int(code), out, err)


_tools: Tools | None = None


def tools() -> Tools:
    """The test process's Tools (classpath resolved and JVM started once)."""
    global _tools
    if _tools is None:
        _tools = Tools(tools_classpath())
        atexit.register(_tools.close)
    return _tools
