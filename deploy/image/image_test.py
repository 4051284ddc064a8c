"""``make image-test``: the kaas image for real, one broker container under podman.

Checks: the broker runs as the non-root user and is PID 1; the image's health check
(``kaas health``) passes; a produce/consume round trip from the host through the
published port; ``podman stop`` (SIGTERM) ends it with exit status 0 within the grace
period and leaves its own graceful death notice naming its incarnation. Exit 0 when all
held. Run with CONTAINERS_CONF set as the Makefile sets it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kaas.testing import free_port, wait_for  # noqa: E402

UID = 10001


def podman(*args: str, check: bool = True) -> str:
    res = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)
    if check and res.returncode != 0:
        raise SystemExit(f"podman {' '.join(args)} failed: {res.stderr.strip()}")
    return res.stdout.strip()


def round_trip(bootstrap: str, topic: str, n: int = 20) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, str(i).encode())
    assert p.flush(30) == 0, "undelivered records"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rt-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    try:
        wait_for(lambda: (lambda m: got.append(m.value()) if m is not None and m.error() is None else None)(
            c.poll(0.5)) or len(got) >= n, 30, "the round trip's records")
    finally:
        c.close()
    assert sorted(int(v) for v in got) == list(range(n)), got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default="localhost/kaas:latest")
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="kaas-image-test-"))
    os.chown(data, UID, UID)
    port = free_port()
    name = f"kaas-image-test-{port}"
    t0 = time.monotonic()
    podman("run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:9092", "-v", f"{data}:/data", args.image,
           "broker", "--id", "0", "--data", "/data", "--listen", "0.0.0.0:9092", "--advertise", f"127.0.0.1:{port}",
           "--shutdown-grace-ms", "20000")
    try:
        wait_for(lambda: subprocess.run(["podman", "healthcheck", "run", name], capture_output=True).returncode == 0,
                 60, "the image's health check", interval=0.5)
        print(f"healthy after {time.monotonic() - t0:.1f} s")
        assert podman("exec", name, "id", "-u") == str(UID), "not the kaas user"
        beat = json.loads((data / "__cluster" / "brokers" / "kaas-0.json").read_text())
        assert beat["pid"] == 1 and beat["host_name"], beat
        round_trip(f"127.0.0.1:{port}", "image-test")
        print("round trip ok")
        t1 = time.monotonic()
        podman("stop", "-t", "30", name)
        stopped = time.monotonic() - t1
        code = podman("inspect", name, "--format", "{{.State.ExitCode}}")
        assert code == "0", f"exit status {code}"
        notice = json.loads((data / "__cluster" / "deaths" / "kaas-0.json").read_text())
        assert notice["graceful"] is True and notice["incarnation"] == beat["incarnation"], notice
        print(f"graceful stop in {stopped:.2f} s, exit 0, own death notice {notice['incarnation'][:8]}")
    finally:
        podman("rm", "-f", name, check=False)
        subprocess.run(["rm", "-rf", str(data)], check=False)
    print("image-test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
