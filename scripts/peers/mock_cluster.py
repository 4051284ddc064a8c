#!/usr/bin/env python3
"""librdkafka's in-memory mock cluster, started as a reference broker for benchmarks.

confluent-kafka's wheel bundles librdkafka, whose mock cluster (C, in memory) serves
produce and fetch, classic and KIP-848 consumer groups, share groups, idempotence and
transactions. ``scripts/bench`` runs kaas beside it on the same workload.

    .venv/bin/python scripts/peers/mock_cluster.py --brokers 3 [--topic NAME:PARTITIONS ...]

The first line on stdout is the bootstrap string. The mock does not serve CreateTopics; a
topic it creates on first use has 4 partitions, so ``--topic`` makes others up front. Nor
does it serve group configs: ``--share-auto-offset-reset``, ``--share-record-lock-ms`` and
``--share-heartbeat-ms`` and ``--share-isolation-level`` set its share groups'
(``rd_kafka_mock_sharegroup_set_*``).
SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import signal
import sys
import threading

_ERRLEN = 512


def librdkafka() -> ctypes.CDLL:
    """The librdkafka shared library inside the installed confluent-kafka wheel, with the
    signatures of the mock-cluster functions the benchmarks call."""
    import confluent_kafka

    site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    libs = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*")))
    if not libs:
        raise RuntimeError(f"no librdkafka shared library beside {confluent_kafka.__file__}")
    lib = ctypes.CDLL(libs[0])
    vp, cp, ci = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for name, res, args in (
        ("rd_kafka_conf_new", vp, []),
        ("rd_kafka_conf_set", ci, [vp, cp, cp, cp, ctypes.c_size_t]),
        ("rd_kafka_new", vp, [ci, vp, cp, ctypes.c_size_t]),
        ("rd_kafka_mock_cluster_new", vp, [vp, ci]),
        ("rd_kafka_mock_cluster_bootstraps", cp, [vp]),
        ("rd_kafka_mock_topic_create", ci, [vp, cp, ci, ci]),
        ("rd_kafka_mock_sharegroup_set_auto_offset_reset", None, [vp, ci]),
        ("rd_kafka_mock_sharegroup_set_record_lock_duration", None, [vp, ci]),
        ("rd_kafka_mock_sharegroup_set_heartbeat_interval", None, [vp, ci]),
        ("rd_kafka_mock_sharegroup_set_isolation_level", None, [vp, ci]),
    ):
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


def start(lib: ctypes.CDLL, brokers: int) -> ctypes.c_void_p:
    """A mock cluster of ``brokers`` brokers, owned by a silent placeholder client (the
    client handle must stay alive as long as the cluster)."""
    conf = lib.rd_kafka_conf_new()
    err = ctypes.create_string_buffer(_ERRLEN)
    for key, value in ((b"bootstrap.servers", b"127.0.0.1:1"), (b"log_level", b"0")):
        lib.rd_kafka_conf_set(conf, key, value, err, _ERRLEN)
    handle = lib.rd_kafka_new(0, conf, err, _ERRLEN)  # 0: a producer handle
    if not handle:
        raise RuntimeError(f"rd_kafka_new: {err.value.decode()}")
    cluster = lib.rd_kafka_mock_cluster_new(handle, brokers)
    if not cluster:
        raise RuntimeError("rd_kafka_mock_cluster_new returned NULL")
    return cluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS")
    ap.add_argument("--share-auto-offset-reset", choices=("latest", "earliest"), default="latest",
                    help="Where a share group's partitions start (the mock has no group configs).")
    ap.add_argument("--share-record-lock-ms", type=int, default=0,
                    help="Share groups' record lock duration (the mock's default: 30000).")
    ap.add_argument("--share-heartbeat-ms", type=int, default=0,
                    help="Share groups' heartbeat interval (the mock's default: 5000).")
    ap.add_argument("--share-isolation-level", choices=("read_uncommitted", "read_committed"),
                    default="read_uncommitted", help="Share groups' isolation level.")
    args = ap.parse_args()
    lib = librdkafka()
    cluster = start(lib, args.brokers)
    if args.share_auto_offset_reset == "earliest":
        lib.rd_kafka_mock_sharegroup_set_auto_offset_reset(cluster, 1)
    if args.share_record_lock_ms:
        lib.rd_kafka_mock_sharegroup_set_record_lock_duration(cluster, args.share_record_lock_ms)
    if args.share_isolation_level == "read_committed":
        lib.rd_kafka_mock_sharegroup_set_isolation_level(cluster, 1)
    if args.share_heartbeat_ms:
        lib.rd_kafka_mock_sharegroup_set_heartbeat_interval(cluster, args.share_heartbeat_ms)
    for spec in args.topic:
        name, _, parts = spec.partition(":")
        rc = lib.rd_kafka_mock_topic_create(cluster, name.encode(), int(parts or 1), 1)
        if rc:
            sys.exit(f"creating {spec}: librdkafka error {rc}")
    print(lib.rd_kafka_mock_cluster_bootstraps(cluster).decode(), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


if __name__ == "__main__":
    main()
