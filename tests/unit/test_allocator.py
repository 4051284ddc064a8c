"""kaas.allocator: receive buffers are reused instead of faulted in afresh.

Each case runs in a child interpreter, so the settings never leak into the test process.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt tuning is glibc only")

# A sender writes 16 KiB at a time; the receiver asks for 256 KiB as the broker does. Each
# recv allocates a 256 KiB bytes object and gets back far less, the pattern that made
# glibc map and unmap a fresh buffer per recv. Prints "<tuned> <minor faults per GiB>".
_CHILD = r"""
import resource, socket, sys, threading
from kaas import allocator
tuned = allocator.tune()
a, b = socket.socketpair()
TOTAL = 64 * 1024 * 1024
def send():
    chunk = b"x" * 16384
    for _ in range(TOTAL // len(chunk)):
        a.sendall(chunk)
    a.close()
t = threading.Thread(target=send)
t.start()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
got = 0
while True:
    d = b.recv(256 * 1024)
    if not d:
        break
    got += len(d)
t.join()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
print(tuned, faults * (1 << 30) // got)
"""


def _run(env: dict[str, str]) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=120,
                         check=True).stdout.split()
    return out[0] == "True", int(out[1])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(extra)
    return env


def test_tuned_receive_buffers_do_not_fault_in_fresh_pages():
    tuned, faults_per_gib = _run(_env())
    assert tuned
    # untuned this pattern takes ~160,000 faults per GiB (one per 4 KiB page received)
    assert faults_per_gib < 20_000, faults_per_gib


def test_user_settings_in_the_environment_win():
    tuned, _faults = _run(_env(MALLOC_TRIM_THRESHOLD_="131072"))
    assert not tuned
