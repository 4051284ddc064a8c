"""The run's topics: create them, seed the input."""

from __future__ import annotations

import time

import click


def seed(bootstrap: str, topic: str, n: int, partitions: int, conf: dict | None = None) -> set[int]:
    """Write the N input values; returns the values the broker acknowledged. ``conf``: extra
    client settings (security)."""
    from confluent_kafka import Producer

    acked: set[int] = set()

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.add(int(msg.value()))

    p = Producer({**(conf or {}), "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=str(i).encode(), partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 5000 == 0:
            p.poll(0)
    if p.flush(120) != 0 or len(acked) != n:
        raise click.ClickException(f"seeding did not complete: {len(acked)}/{n} acknowledged")
    return acked


def create_topics(bootstrap: str, specs: dict[str, int], timeout: float = 90.0, conf: dict | None = None) -> None:
    """Create the topics, retrying while a fresh cluster is still electing its controller.
    ``conf``: extra client settings (security)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    deadline = time.monotonic() + timeout
    pending = dict(specs)
    while pending:
        admin = AdminClient({**(conf or {}), "bootstrap.servers": bootstrap})
        futs = admin.create_topics([NewTopic(t, n, 1) for t, n in pending.items()])
        for t, f in futs.items():
            try:
                f.result(15)
                pending.pop(t, None)
            except Exception as exc:  # noqa: BLE001 — an existing topic is fine; else retry
                if "already exists" in str(exc).lower() or "TOPIC_ALREADY_EXISTS" in str(exc):
                    pending.pop(t, None)
                elif time.monotonic() > deadline:
                    raise click.ClickException(f"could not create topic {t}: {exc}") from None
        if pending:
            time.sleep(1.0)

