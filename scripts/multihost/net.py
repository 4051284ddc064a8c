"""Simulated hosts on one machine (root): network namespaces on a bridge, each host with its
own FUSE view (bindfs) of the shared directory, and the cuts the scenarios make.

Topology: a namespace ``kaasmh-sw`` holds the bridge; each host ``kaasmh-h<i>`` and the
client namespace ``kaasmh-c`` have an ``eth0`` (a veth whose other end is on the bridge)
with an address in ``10.37.0.0/24``. Nothing is added to the machine's own namespace:
every address the test uses exists only in namespaces it made, and ``teardown`` removes
them (the veths go with them).

Storage: host ``i`` sees the shared directory through its own bindfs mount, run in the
foreground so its pid is known. SIGSTOP of that bindfs freezes that host's storage alone
(every file operation on it waits, as on an NFS ``hard`` mount whose server is cut off);
SIGCONT heals it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

PREFIX = "kaasmh"
SWITCH = f"{PREFIX}-sw"
CLIENT = f"{PREFIX}-c"
SUBNET = "10.37.0"
CLIENT_IP = f"{SUBNET}.100"
KAFKA_PORT = 9092
TABLE = "kaasmh"


def host_ns(i: int) -> str:
    return f"{PREFIX}-h{i}"


def host_ip(i: int) -> str:
    return f"{SUBNET}.{i + 1}"


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip()}")
    return res


def in_ns(ns: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return sh("ip", "netns", "exec", ns, *cmd, check=check)


def setup(n: int) -> None:
    """The switch, ``n`` hosts and the client namespace, wired and addressed."""
    teardown(n)
    sh("ip", "netns", "add", SWITCH)
    in_ns(SWITCH, "ip", "link", "add", "br0", "type", "bridge")
    in_ns(SWITCH, "ip", "link", "set", "br0", "up")
    for k, (ns, ip) in enumerate([(host_ns(i), host_ip(i)) for i in range(n)] + [(CLIENT, CLIENT_IP)]):
        sh("ip", "netns", "add", ns)
        port = f"p{k}"
        in_ns(SWITCH, "ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        in_ns(SWITCH, "ip", "link", "set", port, "master", "br0")
        in_ns(SWITCH, "ip", "link", "set", port, "up")
        in_ns(ns, "ip", "addr", "add", f"{ip}/24", "dev", "eth0")
        in_ns(ns, "ip", "link", "set", "eth0", "up")
        in_ns(ns, "ip", "link", "set", "lo", "up")


def teardown(n: int) -> None:
    for ns in [host_ns(i) for i in range(n)] + [CLIENT, SWITCH]:
        sh("ip", "netns", "del", ns, check=False)


def enter(ns: str) -> None:
    """Move this process's main thread (and so every thread and child it starts later) into
    ``ns``. Call before any other thread exists."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), f"setns {ns}")
    finally:
        os.close(fd)


def drop(ns: str, addresses: list[str]) -> None:
    """In ``ns``, drop every packet to and from ``addresses`` (silence, not a reset: as a
    real partition)."""
    heal(ns)
    addrs = ", ".join(addresses)
    script = (f"add table inet {TABLE}\n"
              f"add chain inet {TABLE} in {{ type filter hook input priority 0 ; }}\n"
              f"add chain inet {TABLE} out {{ type filter hook output priority 0 ; }}\n"
              f"add rule inet {TABLE} in ip saddr {{ {addrs} }} drop\n"
              f"add rule inet {TABLE} out ip daddr {{ {addrs} }} drop\n")
    subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=script, text=True, check=True,
                   capture_output=True)


def heal(ns: str) -> None:
    in_ns(ns, "nft", "delete", "table", "inet", TABLE, check=False)


class Storage:
    """One host's bindfs view of the shared directory."""

    def __init__(self, shared: Path, mount: Path) -> None:
        self.shared, self.mount = shared, mount
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.mount.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(["bindfs", "-f", "--no-allow-other", str(self.shared), str(self.mount)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.ismount(self.mount):
            if time.monotonic() > deadline:
                raise RuntimeError(f"bindfs did not mount {self.mount}")
            time.sleep(0.05)

    def freeze(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            self.thaw()
            sh("umount", "-l", str(self.mount), check=False)
            self.proc.kill()
            self.proc.wait()
            self.proc = None
