#!/usr/bin/env python3
"""An unmodified quixstreams application: an exactly-once stateful count per key.

Run by ``scripts/quix_harness.py`` with the quix venv's python (``.venv-quix``: quixstreams
pins its own confluent-kafka), never with kaas's. It imports only the standard library and
quixstreams; its whole configuration is one JSON argument::

    .venv-quix/bin/python scripts/quix_app.py '{"bootstrap": "127.0.0.1:9092", "input": "in",
        "output": "out", "group": "g", "state_dir": "/tmp/state", "txn_id": "g-app"}'

For each input message (key: str, value: {"seq": i}, the i-th message of that key) it adds
one to the key's count in a RocksDB store backed by quixstreams' own compacted changelog
topic, and writes ``{"count": n, "seq": i}`` under the same key to the output topic, with
``processing_guarantee="exactly-once"``: the output, the changelog and the consumer offsets
are committed in one Kafka transaction per checkpoint. SIGTERM stops it cleanly.
"""

from __future__ import annotations

import json
import sys
import time


def main(cfg: dict) -> None:
    from quixstreams import Application, State

    producer_extra = {"transaction.timeout.ms": int(cfg.get("transaction_timeout_ms", 30000))}
    if cfg.get("txn_id"):
        # A stable transactional.id (as any deployment restarting one instance would
        # give): the restarted app's InitProducerId fences the killed one and aborts its
        # open transaction. Without one quixstreams draws a random id, and the killed
        # transaction is aborted by the coordinator once transaction.timeout.ms passes.
        producer_extra["transactional.id"] = cfg["txn_id"]
    app = Application(
        broker_address=cfg["bootstrap"],
        consumer_group=cfg["group"],
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        state_dir=cfg["state_dir"],
        commit_interval=float(cfg.get("commit_interval", 0.5)),
        producer_extra_config=producer_extra,
        # librdkafka's 45 s default would keep the killed member in the group that long, and
        # the restarted app's first rebalance would wait for it to time out
        consumer_extra_config={"session.timeout.ms": int(cfg.get("session_timeout_ms", 6000)),
                               "heartbeat.interval.ms": 1000},
        loglevel=cfg.get("loglevel", "INFO"),
    )
    source = app.topic(cfg["input"], key_deserializer="str", value_deserializer="json")
    sink = app.topic(cfg["output"], key_serializer="str", value_serializer="json")
    pace = float(cfg.get("pace_s", 0.0))

    def count(value: dict, state: State) -> dict:
        n = state.get("count", 0) + 1
        state.set("count", n)
        if pace:
            time.sleep(pace)  # keep the run long enough for the harness to kill it midway
        return {"count": n, "seq": value["seq"]}

    sdf = app.dataframe(source)
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(sink)
    app.run()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
