"""What the brokers cost: CPU seconds and RSS of their processes, and the tmpfs write floor."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from .common import GIB, _r

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> tuple[float, float, int] | None:
    """(utime, stime) of every thread of pid, in seconds, and its minor page faults; None
    when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()  # rest[0] is field 3 (state)
    return int(rest[11]) / CLK_TCK, int(rest[12]) / CLK_TCK, int(rest[7])


_MEM_FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


def _proc_mem(pid: int) -> dict[str, int]:
    """VmRSS and its parts (anonymous, file-backed, shared memory/tmpfs mappings), in bytes."""
    out = dict.fromkeys(_MEM_FIELDS, 0)
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in out:
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def _proc_runq_wait(pid: int) -> float | None:
    """Seconds the threads of pid spent runnable but waiting for a CPU (the second field
    of each ``/proc/PID/task/TID/schedstat``); None when it is gone or the kernel keeps no
    schedstat."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def _proc_rss(pid: int) -> int:
    return _proc_mem(pid)["VmRSS"]


class BrokerPids:
    """The broker processes to account: fixed pids and/or the kaas supervisor's pid files."""

    def __init__(self, pids: tuple[int, ...] | list[int] = (), kaas_data: Path | None = None):
        self.fixed = [int(p) for p in pids]
        self.kaas_data = Path(kaas_data) if kaas_data else None

    def __bool__(self) -> bool:
        return bool(self.fixed or self.kaas_data)

    def current(self) -> list[int]:
        out = list(self.fixed)
        if self.kaas_data is not None:
            for f in sorted((self.kaas_data / "run").glob("kaas-*.pid")):
                try:
                    out.append(int(f.read_text().strip()))
                except (OSError, ValueError):
                    pass
        return out

    def rss(self) -> int:
        return sum(_proc_rss(p) for p in self.current())

    def mem(self) -> dict[str, int]:
        """Summed VmRSS/RssAnon/RssFile/RssShmem and the per-process VmRSS."""
        total = dict.fromkeys(_MEM_FIELDS, 0)
        per = []
        for p in self.current():
            m = _proc_mem(p)
            per.append(m["VmRSS"])
            for k in _MEM_FIELDS:
                total[k] += m[k]
        return {**total, "per_process": per}

    def runq_wait(self) -> dict[int, float]:
        """pid -> its threads' run-queue wait so far, in seconds (``_proc_runq_wait``)."""
        out = {}
        for p in self.current():
            w = _proc_runq_wait(p)
            if w is not None:
                out[p] = w
        return out

    def cpu(self) -> dict[int, tuple[float, float, int]]:
        out = {}
        for p in self.current():
            c = _proc_cpu(p)
            if c is not None:
                out[p] = c
        return out


class CpuMeter:
    """Broker CPU seconds between start() and stop(); a pid that appears in between (a
    restarted broker) counts from zero, a pid that disappears loses its last interval.
    ``system`` is the kernel's part (stime), e.g. allocating tmpfs pages for appends;
    ``faults`` the minor page faults (fresh anonymous memory touched: buffers the allocator
    got from the kernel instead of reusing)."""

    def __init__(self, pids: BrokerPids):
        self.pids = pids
        self.t0: dict[int, tuple[float, float, int]] = {}
        self.seconds: float | None = None
        self.system: float | None = None
        self.faults: int | None = None
        self.w0: dict[int, float] = {}
        self.runq_wait: float | None = None

    def start(self) -> CpuMeter:
        self.t0 = self.pids.cpu() if self.pids else {}
        self.w0 = self.pids.runq_wait() if self.pids else {}
        return self

    def stop(self) -> float | None:
        if not self.pids:
            return None
        now = self.pids.cpu()
        zero = (0.0, 0.0, 0)
        user = sum(u - self.t0.get(p, zero)[0] for p, (u, _s, _f) in now.items())
        self.system = sum(s - self.t0.get(p, zero)[1] for p, (_u, s, _f) in now.items())
        self.faults = sum(f - self.t0.get(p, zero)[2] for p, (_u, _s, f) in now.items())
        self.seconds = user + self.system
        waits = self.pids.runq_wait()
        self.runq_wait = sum(w - self.w0.get(p, 0.0) for p, w in waits.items()) if waits else None
        return self.seconds


def cpu_fields(cpu_s: float | None, bytes_moved: int = 0, txns: int = 0, basis: str = "produced",
               sys_s: float | None = None, faults: int | None = None) -> dict:
    """CPU per GiB and per 1,000 transactions; with ``sys_s`` (the kernel's part of
    ``cpu_s``) also the user-space and kernel parts per GiB, with ``faults`` the brokers'
    minor page faults per GiB."""
    out: dict[str, object] = {"cpu_s": _r(cpu_s), "gib_basis": basis, "bytes": bytes_moved, "txns": txns}
    out["cpu_s_per_gib"] = _r(cpu_s / (bytes_moved / GIB)) if cpu_s is not None and bytes_moved else None
    out["cpu_s_per_1k_txn"] = _r(cpu_s / (txns / 1000)) if cpu_s is not None and txns else None
    if cpu_s is not None and sys_s is not None and bytes_moved:
        out["cpu_user_s_per_gib"] = _r((cpu_s - sys_s) / (bytes_moved / GIB))
        out["cpu_sys_s_per_gib"] = _r(sys_s / (bytes_moved / GIB))
    if faults is not None and bytes_moved:
        out["minor_faults_per_gib"] = round(faults / (bytes_moved / GIB))
    return out


def tmpfs_write_floor(directory: Path, nbytes: int, chunk: int = 512 * 1024) -> float:
    """Kernel CPU seconds per GiB of appending ``nbytes`` to a new file in ``directory``
    with writev (the broker's append syscall), measured on this thread, then deleted. On
    tmpfs this is the cost of the pages alone; on a VM, pages the guest never touched (or
    gave back to the host) cost several times more than recycled ones."""
    buf = os.urandom(chunk)
    path = directory / f"tmpfs-floor-{os.getpid()}.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        t0 = time.thread_time()
        for _ in range(max(1, nbytes // chunk)):
            os.writev(fd, [buf])
        os.fsync(fd)
        spent = time.thread_time() - t0
    finally:
        os.close(fd)
        path.unlink()
    return spent / (max(1, nbytes // chunk) * chunk / GIB)


class RssSampler:
    """Samples the brokers' summed VmRSS every period seconds in a thread."""

    def __init__(self, pids: BrokerPids, period: float = 0.5):
        self.pids, self.period = pids, period
        self.samples: list[int] = []
        self.peak: dict = {}
        self.phase = "start"
        self.phase_max: dict[str, int] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        m = self.pids.mem()
        self.samples.append(m["VmRSS"])
        self.phase_max[self.phase] = max(self.phase_max.get(self.phase, 0), m["VmRSS"])
        if m["VmRSS"] >= self.peak.get("VmRSS", 0):
            self.peak = m

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period)

    def __enter__(self) -> RssSampler:
        if self.pids:
            self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._t.is_alive():
            self._t.join()
        if self.pids:
            self._sample()
