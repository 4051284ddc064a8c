"""Real Go clients against a 3-broker kaas cluster (issue 31): Sarama 1.22 and
confluent-kafka-go 0.11 (over librdkafka 2.0), as Debian packages them
(golang-go, golang-github-shopify-sarama-dev, golang-github-confluentinc-confluent-kafka-go-dev;
``.ci/run`` installs them).

``tests/go/<client>_check/main.go`` is built GOPATH-style (``GO111MODULE=off``, the
packages' sources under ``/usr/share/gocode``: nothing is downloaded) into a cache directory
keyed on the program's source, so a second run does not rebuild. Each program creates its
topic, produces 30 records idempotently with explicit timestamps (several per batch),
reads them back in a consumer group with read_committed, checks the group's committed
offsets and asks ListOffsets by timestamp (offsets-for-times) for every record; it exits 1
naming each mismatch. A test is skipped, saying what is missing, only when the Go toolchain
or that client's package is absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.fixtures import cluster_fixture
from tests.kafka import uniq
from tests.tools import require, require_tool

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

GO_SRC = Path(__file__).resolve().parent.parent / "go"
GOCODE = Path(os.environ.get("KAAS_GOCODE", "/usr/share/gocode"))
# client -> (program directory, the Debian package, a file of it that must be there)
CLIENTS = {
    "sarama": ("sarama_check", "golang-github-shopify-sarama-dev", "src/github.com/Shopify/sarama/client.go"),
    "confluent": ("confluent_check", "golang-github-confluentinc-confluent-kafka-go-dev",
                  "src/github.com/confluentinc/confluent-kafka-go/kafka/consumer.go"),
}

go_cluster = cluster_fixture(3, scope="module", name="go",
                             doc="One plain 3-broker cluster for the Go clients (distinct topics and groups).")


def build(client: str) -> Path:
    """The built program of ``client``, from the cache when its source has not changed.

    Skips the test (fails it under KAAS_REQUIRE_ALL=1) when ``go`` or the client's Debian
    package is missing; fails it when the build fails."""
    prog, package, marker = CLIENTS[client]
    go = require_tool("go", package="golang-go")
    require((GOCODE / marker).exists(), f"{package} is missing ({GOCODE / marker}): apt-get install {package}")
    src = GO_SRC / prog
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(src.glob("*.go")))).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / "kaas-go-build"
    out = cache / f"{prog}-{digest}"
    if out.exists():
        return out
    cache.mkdir(exist_ok=True)
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": f"{cache / 'gopath'}:{GOCODE}",
           "GOCACHE": str(cache / "gocache"), "GOFLAGS": ""}
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    r = subprocess.run([go, "build", "-o", str(tmp), "."], cwd=src, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"go build of {src} failed:\n{r.stderr}"
    tmp.replace(out)
    return out


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_go_client_produces_consumes_and_finds_offsets_for_times(request, client):
    exe = build(client)  # first: a skip starts no cluster
    go_cluster = request.getfixturevalue("go_cluster")
    topic, group = uniq(f"go-{client}"), uniq(f"go-{client}-g")
    try:
        r = subprocess.run([str(exe), go_cluster.bootstrap, topic, group], capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{exe.name} timed out after 180 s\nstderr:\n{e.stderr}")
    assert r.returncode == 0, f"{exe.name} exited {r.returncode}\nstderr:\n{r.stderr}\nstdout:\n{r.stdout}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"] is True and out["produced"] == out["consumed"] == 30, out
    assert out["offsets_for_times_checked"] == 63, out
