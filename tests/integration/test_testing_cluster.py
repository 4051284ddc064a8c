"""kaas.testing.cluster(): the public handle on a test cluster (docs/testing.rst): async
use under trio and asyncio, failpoints armed and counted, a real full disk, a secure
cluster's client settings, a broker killed and restarted, the logs kept and named when the
block fails, nothing left behind."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kaas.testing import Unsupported, cluster
from tests.tools import missing

pytestmark = pytest.mark.slow


async def test_async_with_under_trio():
    async with cluster(brokers=1) as c:
        assert c.leader_of(c.create_topic("t", 2), 1).id == 0
        root = c.root
    assert not root.exists()


def test_async_with_under_asyncio():
    async def main() -> Path:
        async with cluster(brokers=1) as c:
            c.wait_healthy()
            return c.root

    assert not asyncio.run(main()).exists()


def test_failpoints_kill_restart_and_logs_kept_on_failure(tmp_path):
    ctx = cluster(brokers=3, logs_dir=tmp_path / "logs")
    with pytest.raises(RuntimeError) as failed, ctx as c:
        topic = c.create_topic(c.unique("fp"), 3)
        with pytest.raises(ValueError, match="unknown failpoint"):
            c.failpoint("no.such.point", "crash")
        with pytest.raises(ValueError, match="drop is honoured only"):
            c.failpoint("append.write", "drop")
        victim = c.leader_of(topic, 0)
        with c.failpoint("append.write", "error", count=None, broker=victim, errno="EIO") as fp:
            p = Producer(c.client_config(message_timeout_ms=1500, retries=0, acks="all"))
            p.produce(topic, b"x", partition=0)
            p.flush(5)
            assert fp.wait_hit(10) is victim and fp.hits()[victim.id] >= 1
        assert "failpoints_cleared" in victim.log_text()
        pid = c.brokers[2].kill(wait=True)
        assert c.brokers[2].pid != pid
        c.brokers[1].restart()
        c.brokers[0].pause()
        assert c.brokers[0].paused and c.brokers[0].alive()
        c.reset()
        processes = [b.pid for b in c.brokers] + [c.process.proc.pid]
        root = c.root
        raise RuntimeError("the test failed")
    note = "\n".join(getattr(failed.value, "__notes__", []))
    kept = Path(note.split("logs are in ", 1)[1].strip())
    assert kept.parent == tmp_path / "logs" and (kept / "kaas-2.log").exists()
    assert not root.exists()
    for pid in processes:
        with pytest.raises(ProcessLookupError):
            for _ in range(200):
                os.kill(pid, 0)
                if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                    raise ProcessLookupError
                time.sleep(0.05)


def test_disk_full_on_a_tmpfs_of_its_own():
    try:
        ctx = cluster(brokers=1, tmpfs="48m")
        c = ctx.start()
    except Unsupported as exc:
        with cluster(brokers=1) as c:
            with pytest.raises(Unsupported, match="tmpfs"):
                c.disk_full()
        missing(str(exc))
    try:
        topic = c.create_topic(c.unique("full"), 1)
        p = Producer(c.client_config(acks="all", message_timeout_ms=3000, enable_idempotence=True))
        delivered = []
        with c.disk_full() as disk:
            assert disk.written > 0
            p.produce(topic, b"v" * 200_000, on_delivery=lambda err, m: delivered.append(err))
            p.flush(10)
            assert delivered and delivered[0] is not None, "a write to a full volume was acknowledged"
        p.produce(topic, b"after", on_delivery=lambda err, m: delivered.append(err))
        assert p.flush(30) == 0 and delivered[-1] is None
    finally:
        ctx.stop()
    assert not c.root.exists()


def test_a_secure_cluster_gives_the_admins_settings():
    with cluster(brokers=1, secure=True) as c:
        conf = c.client_config()
        assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.username"] == "admin"
        topic = c.create_topic(c.unique("sec"), 1)
        p = Producer(conf)
        p.produce(topic, b"x")
        assert p.flush(20) == 0
