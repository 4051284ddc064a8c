"""The Java processes of the ``apache-eos`` and ``streams`` scenarios: one JVM each, with a
capped heap, the serial collector and C1 only (two shared cores), logging to its stderr
file, its standard output read line by line by a thread of its own.

Apache's tools (``TransactionalMessageCopier``, ``VerifiableProducer``,
``VerifiableConsumer``) run by their main classes from the jars of ``compat/java/pom.xml``
(``scripts/peers/apache.py``'s classpath, which holds ``kafka-tools`` 4.4.0); the Streams
application from ``compat/streams/pom.xml`` (``streams_classpath``). Both are resolved by
Maven once and cached in ``target/classpath.txt`` beside the pom (git ignores ``target``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[2]
STREAMS_POM = REPO / "compat" / "streams" / "pom.xml"
JVM_FLAGS = ("-Xms32m", "-Xmx256m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-XX:CICompilerCount=1", "-XX:MaxMetaspaceSize=128m", "-Djava.awt.headless=true")
LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
"""
"""Log4j 2 writes to stderr only: the tools' standard output is their JSON events."""


def require_java() -> None:
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise click.ClickException(f"this scenario runs Apache Kafka 4.4's Java clients: {tool} is needed "
                                       f"(Debian: openjdk-17-jdk, maven)")


def _peer():
    spec = importlib.util.spec_from_file_location("apache_peer", REPO / "scripts" / "peers" / "apache.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tools_classpath() -> str:
    """kafka-tools 4.4.0 and its dependencies (with the broker's, which do no harm)."""
    require_java()
    return _peer().classpath()


def streams_classpath() -> str:
    """kafka-streams 4.4.0 and its dependencies (``compat/streams/pom.xml``)."""
    require_java()
    out = STREAMS_POM.parent / "target" / "classpath.txt"
    if not out.exists() or out.stat().st_mtime < STREAMS_POM.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}")
        done = subprocess.run(["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(STREAMS_POM),
                               "dependency:build-classpath", f"-Dmdep.outputFile={tmp}"],
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise click.ClickException(f"mvn could not resolve kafka-streams 4.4.0:\n{done.stdout}{done.stderr}")
        os.replace(tmp, out)
    return out.read_text().strip()


def java_cmd(workdir: Path, cp: str, main: str, *args: str, heap: str = "256m") -> list[str]:
    """``java`` with the scenario flags, Log4j 2 to stderr (its config written in ``workdir``)."""
    conf = workdir / "log4j2.properties"
    if not conf.exists():
        conf.write_text(LOG4J2)
    flags = [f if not f.startswith("-Xmx") else f"-Xmx{heap}" for f in JVM_FLAGS]
    return ["java", *flags, f"-Dlog4j2.configurationFile={conf}", "-cp", cp, main, *args]


def write_properties(path: Path, props: dict[str, object]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


class JavaProc:
    """One JVM. Each line of its standard output goes to ``on_line(line, wall-clock time)``
    (and to ``NAME.out``) from a reader thread; its standard error to ``NAME.err``."""

    def __init__(self, name: str, cmd: list[str], workdir: Path,
                 on_line: Callable[[str, float], None] | None = None) -> None:
        self.name = name
        self.cmd = cmd
        self.workdir = workdir
        self.on_line = on_line
        self.proc: subprocess.Popen[bytes] | None = None
        self.reader: threading.Thread | None = None
        self.started_at = 0.0

    def start(self) -> JavaProc:
        err = open(self.workdir / f"{self.name}.err", "ab")  # noqa: SIM115 - the JVM's, for its life
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                     cwd=self.workdir, start_new_session=True)
        err.close()
        self.started_at = time.monotonic()
        self.reader = threading.Thread(target=self._read, name=f"read-{self.name}", daemon=True)
        self.reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.workdir / f"{self.name}.out", "ab") as copy:
            for raw in self.proc.stdout:
                copy.write(raw)
                copy.flush()
                if self.on_line is not None:
                    self.on_line(raw.decode(errors="replace").strip(), time.time())

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
        self.wait(30)

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM (the JVM's shutdown hooks run), SIGKILL after ``timeout``; whether it
        ended by itself."""
        if not self.alive():
            self.wait(5)
            return True
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
            self.wait(5)
            return True
        except subprocess.TimeoutExpired:
            self.kill()
            return False

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the process and for its reader to have read every line."""
        if self.proc is None:
            return None
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if self.reader is not None:
            self.reader.join(timeout)
        return self.proc.returncode

    def stderr_tail(self, n: int = 5) -> list[str]:
        try:
            lines = (self.workdir / f"{self.name}.err").read_text(errors="replace").splitlines()
        except OSError:
            return []
        return lines[-n:]


def json_event(line: str) -> dict | None:
    """A tool's JSON event line, or None for anything else (a stray log line)."""
    if not line.startswith("{"):
        return None
    try:
        ev = json.loads(line)
    except ValueError:
        return None
    return ev if isinstance(ev, dict) else None
