"""Callgrind for ``cpu``: the broker under ``valgrind --tool=callgrind``, its Python frames
made visible (``scripts/bench/cpu/pyframes.c``), and its dumps read back.

CPython 3.11 runs every Python function inside one C function, ``_PyEval_EvalFrameDefault``,
so a plain callgrind profile names C functions only. With a profile the broker installs
``kaas_pyframes`` first: each code object gets a C trampoline of its own (``kaas_py_<n>``,
the map file says which function it is), and callgrind skips every other function
(``skip_options``: their instructions are charged to the caller). Each trampoline's self
cost is then what that Python function spent, the C it called included (dict lookups,
allocations, C extensions such as CRC-32C), the Python functions it called excluded;
generated code (dataclass and attrs ``__init__``) is charged to its caller. Summed by
source file (``LAYERS``), that is the split by layer. The hook costs instructions of its
own (CPython stops inlining Python-to-Python calls under a frame hook), so ``cpu`` takes
its totals from a plain run.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import string
import subprocess
import sys
import sysconfig
import time
from collections import defaultdict
from pathlib import Path

from ..common import BENCH, REPO

HOOK_SOURCE = BENCH / "cpu" / "pyframes.c"
LAUNCH = BENCH / "cpu" / "launch.py"
N_TRAMPOLINES = 8192
QUIET_ARGS = ["--session-timeout-ms", str(8 * 3600 * 1000), "--retention-check-ms", str(3600 * 1000),
              "--log-cleaner-backoff-ms", str(3600 * 1000)]
TRAMPOLINE = "kaas_py_"  # the prefix of their names

# First match of the frame's source file wins.
LAYERS: tuple[tuple[str, str], ...] = (
    ("/kaas/net/", "net"), ("/kaas/dispatch.py", "dispatch"), ("/kaas/handlers/", "handlers"),
    ("/kaas/coord/", "coord"), ("/kaas/broker/", "broker"), ("/kaas/domain/", "domain"),
    ("/kaas/storage/", "storage"), ("/kaas/wire/", "wire"), ("/kaas/tasks/", "tasks"),
    ("/kaas/peers", "peers"), ("/kaas/", "kaas (other)"),
    ("/site-packages/kio/", "kio"), ("/site-packages/trio/", "trio"), ("/site-packages/outcome/", "trio"),
    ("/site-packages/sniffio/", "trio"), ("/site-packages/structlog/", "structlog"),
    ("/site-packages/", "other packages"), ("/lib/python3", "stdlib"), ("<frozen ", "stdlib"),
)
NO_FRAME = "outside Python frames"


def layer_of(filename: str) -> str:
    for part, layer in LAYERS:
        if part in filename:
            return layer
    return "other packages"


def skip_options() -> list[str]:
    """--fn-skip for every function whose name does not start with ``kaas_py_`` (callgrind's
    patterns know only ``*`` and ``?``, so: every other first character, then every other
    second character after a ``k``, ...), but ``_d*`` and ``_s*`` (skipping the dynamic
    loader's ``_dl_*`` and ``_start`` crashes valgrind 3.19); names such as ``(below
    main)`` stay."""
    alphabet = string.ascii_letters + string.digits + "_.<~@$"
    out = [f"--fn-skip=_{c}*" for c in alphabet if c not in "ds"]
    for i in range(len(TRAMPOLINE)):
        out += [f"--fn-skip={TRAMPOLINE[:i]}{c}*" for c in alphabet if c != TRAMPOLINE[i] and (i or c != "_")]
    return out


def build_hook(cache: Path) -> Path | None:
    """Compile ``kaas_pyframes`` into ``cache`` (once per source); its directory, or None
    without a C compiler or Python's headers."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    include = sysconfig.get_paths()["include"]
    if cc is None or not Path(include, "Python.h").exists():
        return None
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    stamp = f"{HOOK_SOURCE.stat().st_mtime_ns}-{N_TRAMPOLINES}-{sys.version_info[:2]}"
    out = cache / f"kaas_pyframes{suffix}"
    if out.exists() and (cache / "stamp").exists() and (cache / "stamp").read_text() == stamp:
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    names = [f"kaas_py_{i}" for i in range(N_TRAMPOLINES)]
    (cache / "trampolines.h").write_text(
        f"#define N_TRAMPOLINES {N_TRAMPOLINES}\n" + "".join(f"TRAMPOLINE({n})\n" for n in names)
        + "static eval_fn trampolines[] = {" + ",".join(names) + "};\n")
    subprocess.run([cc, "-O1", "-fno-optimize-sibling-calls", "-fno-ipa-icf", "-shared", "-fPIC",
                    f"-I{cache}", f"-I{include}", str(HOOK_SOURCE), "-o", str(out)], check=True)
    (cache / "stamp").write_text(stamp)
    return cache


class CallgrindBroker:
    """One ``kaas broker`` under callgrind, instrumentation off until ``measure``."""

    def __init__(self, out_dir: Path, data: Path, listen: str, profile_dir: Path | None, quiet: bool = True,
                 broker_id: int = 0) -> None:
        self.out = out_dir / ("callgrind.profile.out" if profile_dir else "callgrind.out")
        self.map = out_dir / "pyframes.tsv"
        argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={self.out}"]
        launch = [sys.executable, str(LAUNCH)]
        if profile_dir is not None:
            argv += skip_options()
            launch += ["--pyframes", str(profile_dir), str(self.map)]
        if quiet:
            launch.append("--quiet")
        # A broker under callgrind runs ~50x slower: a long lease keeps it the owner of
        # everything while it is instrumented (and, quiet, outlives the hourly heartbeat).
        self.log = open(out_dir / ("broker.profile.log" if profile_dir else "broker.log"), "wb")
        self.proc = subprocess.Popen(
            [*argv, *launch, "broker", "--id", str(broker_id), "--data", str(data), "--listen", listen,
             "--log-level", "warning",
             *(QUIET_ARGS if quiet else ["--session-timeout-ms", "600000"])],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.parts = 0

    def control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True, stdout=subprocess.DEVNULL,
                       timeout=120)

    def start_window(self) -> float:
        """Instrument from now on, counters zeroed; the wall time it started."""
        self.control("-i", "on")
        self.control("-z")
        return time.monotonic()

    def dump(self) -> Path:
        """Dump (and zero) the counters since the last dump or ``start_window``."""
        self.control("-d")
        self.parts += 1
        return Path(f"{self.out}.{self.parts}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


_FN = re.compile(r"^fn=\((\d+)\)(?: (.*))?$")


def read_costs(path: Path) -> tuple[int, dict[str, int]]:
    """(total Ir, self Ir per function name) of one callgrind dump (a recursion's
    ``'N`` suffix folded into the function)."""
    names: dict[str, str] = {}
    self_cost: dict[str, int] = defaultdict(int)
    current = ""
    skip_next = False
    total = 0
    with open(path) as f:
        for line in f:
            if skip_next:
                skip_next = False
                continue
            c = line[:1]
            if c.isdigit() or c in "+-*":
                parts = line.split()
                if len(parts) >= 2:
                    self_cost[current] += int(parts[1])
            elif line.startswith("fn="):
                m = _FN.match(line.rstrip("\n"))
                if m:
                    if m.group(2) is not None:
                        names[m.group(1)] = m.group(2)
                    current = names[m.group(1)].split("'")[0]
                else:
                    current = line[3:].strip().split("'")[0]
            elif line.startswith("cfn="):  # a name's first mention may be as a callee
                m = _FN.match(line[1:].rstrip("\n"))
                if m and m.group(2) is not None:
                    names[m.group(1)] = m.group(2)
            elif line.startswith("calls="):
                skip_next = True
            elif line.startswith("totals:") or line.startswith("summary:"):
                total = int(line.split()[1])
    return total or sum(self_cost.values()), dict(self_cost)


def read_map(path: Path) -> dict[str, tuple[str, str, int]]:
    """kaas_py_<n> -> (file, qualified name, first line) from the hook's map file."""
    out: dict[str, tuple[str, str, int]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            n, file, name, first = line.split("\t")
            out[f"kaas_py_{n}"] = (file, name, int(first))
    return out


def short_path(file: str) -> str:
    for marker in ("/site-packages/", "/lib/python3.11/", str(REPO) + "/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


def by_layer(self_cost: dict[str, int], frames: dict[str, tuple[str, str, int]]) -> dict[str, int]:
    """Self Ir summed by layer (``LAYERS``) of the trampolines' Python functions."""
    out: dict[str, int] = defaultdict(int)
    for fn, cost in self_cost.items():
        frame = frames.get(fn)
        out[layer_of(frame[0]) if frame else NO_FRAME] += cost
    return dict(out)


def by_function(self_cost: dict[str, int], frames: dict[str, tuple[str, str, int]]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for fn, cost in self_cost.items():
        frame = frames.get(fn)
        out[f"{short_path(frame[0])}:{frame[2]}:{frame[1]}" if frame else fn] += cost
    return dict(out)


def name_functions(path: Path, frames: dict[str, tuple[str, str, int]]) -> None:
    """Rewrite a profile dump in place so that callgrind_annotate and KCachegrind show
    ``file:line:function`` instead of ``kaas_py_<n>``."""
    pattern = re.compile(r"\b(kaas_py_\d+)\b")

    def name(m: re.Match[str]) -> str:
        frame = frames.get(m.group(1))
        return f"{short_path(frame[0])}:{frame[2]}:{frame[1]}" if frame else m.group(1)

    text = path.read_text()
    path.write_text(pattern.sub(name, text))
