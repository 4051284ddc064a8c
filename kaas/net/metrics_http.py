"""Prometheus metrics of one broker process: the collector and the HTTP endpoint, served
on ``--metrics-port`` (0 = off).

The hot path never touches prometheus_client: a request adds to plain integers and a
bucket list in ``kaas.counters`` (everything runs on the trio thread, so no locks are needed),
and a custom collector turns them into metric families at scrape time. Gauges (partitions
led, producer states, transactions, marker queue depth, ...) are read from the ``Broker``
object when Prometheus scrapes; the few that need the shared volume (slot files, the
marker queue) are read in a worker thread just before the exposition is rendered.

Metrics (all prefixed ``kaas_``):

========================================  =========  ==========================================
name                                      type       meaning
========================================  =========  ==========================================
requests_total{api}                       counter    requests answered (or acks=0) per API
request_errors_total{api}                 counter    requests whose handler raised (a bug)
request_duration_seconds{api}             histogram  decode-to-encoded-response time (long-poll
                                                     fetches include their wait)
request_bytes_total{api}                  counter    request frame bytes received (bytes in)
response_bytes_total{api}                 counter    response frame bytes sent (bytes out)
topic_bytes_in_total{topic}               counter    bytes appended by Produce per topic, with
                                                     records_in and (Fetch, ShareFetch) bytes_out,
                                                     records_out: ``kaas.net.topic_metrics``
partitions_led                            gauge      partitions this broker leads
producer_states                           gauge      idempotence entries over led partitions
transactions_open                         gauge      Ongoing transactions of owned slots
transactions_prepared                     gauge      PrepareCommit/PrepareAbort (markers owed)
txn_slots_owned                           gauge      transaction slots this broker coordinates
marker_queue_depth                        gauge      files in ``marker_queue/to-<self>``
fsync_seconds                             histogram  group-commit fsync latency
partition_takeovers_total                 counter    partitions opened (taken over)
partition_takeover_seconds                histogram  time to open (recover) one partition
log_cleaner_bytes_total                   counter    bytes the log cleaner read (cleaned)
log_cleaner_records_removed_total         counter    records the log cleaner removed
log_cleaner_failures_total                counter    cleaning passes that failed
log_cleaner_dirty_ratio{topic,partition}  gauge      cleaner lag: dirty share of cleanable bytes
connections                               gauge      open client connections
controller / draining                     gauge      1 when this broker is controller / draining
brokers_alive                             gauge      live brokers as seen by this one
txn_coordinator_events_total{event}       counter    markers written, queue entries applied, ...
consumer_group_events_total{event}        counter    KIP-848 heartbeats, epoch bumps, revocations, ...
groups{type,state}                        gauge      groups coordinated here, by type and state
share_partition_in_flight{group,...}      gauge      records in a held share partition's window, with
                                                     start_offset and records{state}
partition_high_watermark{topic,partition} gauge      per led partition, with its last_stable_offset
consumer_group_lag{group,topic,partition} gauge      HW - committed per group and led partition, with
                                                     committed_offset and lag_stable (LSO - committed):
                                                     ``kaas.net.lag_metrics``
client_quota_*{quota_type,user,client_id} gauge     per client quota window: byte_rate, request_time,
                                                     mutation_rate, tokens, throttle_time_ms, limit:
                                                     ``kaas.net.quota_metrics``
broker_info{broker_id,cluster_id,...}     gauge      1, with identifying labels
========================================  =========  ==========================================

plus the standard ``process_*``, ``python_gc_*`` and ``python_info`` collectors.
"""


from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import structlog
import trio

from kaas import counters
from kaas.handlers.registry import REGISTRY
from kaas.net.lag_metrics import committed_offsets, lag_families
from kaas.net.quota_metrics import quota_families
from kaas.net.topic_metrics import share_partition_families, topic_families

log = structlog.get_logger()

try:
    from importlib.metadata import version as _dist_version

    __version__ = _dist_version("kaas")
except Exception:  # not installed (running from a checkout)
    __version__ = "unknown"

def _api_name(api_key: int) -> str:
    h = REGISTRY.get(api_key)
    return h.api_name if h is not None else f"Api{api_key}"


class BrokerCollector:
    """Turns ``kaas.counters`` and and the broker's state into metric families."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        # Refreshed in a worker thread before each scrape (see ``refresh``).
        self.marker_queue_depth = 0
        self.txn_open = 0
        self.txn_prepared = 0
        self.txn_slots_owned = 0
        self.txn_slots_unreadable = 0
        self.committed: dict[str, dict[tuple[str, int], int]] = {}  # group -> led partition -> offset

    async def refresh(self) -> None:
        """Read what lives on the shared volume (marker queue, owned slot files, the groups'
        committed offsets of the partitions led here)."""
        b = self.broker
        groups = getattr(b, "groups", None)
        if groups is not None:
            led = {(p.topic, p.index) for p in b.partitions.values()}
            self.committed = await trio.to_thread.run_sync(partial(committed_offsets, groups.store, led))
        txn = b.txn
        if txn is None:
            return
        from kaas.domain.routing import TXN_SLOTS

        owned = [slot for slot in range(TXN_SLOTS) if b.owns_slot(slot)]
        self.txn_slots_owned = len(owned)
        self.marker_queue_depth, self.txn_open, self.txn_prepared, self.txn_slots_unreadable = \
            await trio.to_thread.run_sync(partial(_volume_stats, txn, b.id, owned))

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield from self._requests()
        yield from self._partitions_and_transactions()
        yield from self._log_cleaner()
        yield from lag_families(list(self.broker.partitions.values()), self.committed)
        yield from topic_families(lambda name: self.broker.topics.get(name) is not None)
        yield from quota_families(self.broker.quotas.views())
        yield from self._shares()
        yield from share_partition_families(self.broker.shares.held())
        yield from self._cluster()
        yield from self._coordinators()
        info = GaugeMetricFamily("kaas_broker_info", "Identifies the broker.",
                                 labels=["broker_id", "cluster_id", "version"])
        info.add_metric([str(self.broker.id), self.broker.settings.cluster_id, __version__], 1)
        yield info

    def _requests(self) -> Iterator[Any]:
        """Per Kafka API: requests, errors, bytes in and out, latency."""
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        apis = sorted(((_api_name(s.api_key), s) for s in counters.API.values()), key=lambda t: t[0])
        req = CounterMetricFamily("kaas_requests", "Requests handled, per Kafka API.", labels=["api"])
        err = CounterMetricFamily("kaas_request_errors", "Requests whose handler raised.", labels=["api"])
        bin_ = CounterMetricFamily("kaas_request_bytes", "Request frame bytes received (bytes in).",
                                   labels=["api"])
        bout = CounterMetricFamily("kaas_response_bytes", "Response frame bytes sent (bytes out).",
                                   labels=["api"])
        lat = HistogramMetricFamily("kaas_request_duration_seconds",
                                    "Time from decoded request to encoded response.", labels=["api"])
        for name, s in apis:
            req.add_metric([name], s.requests)
            err.add_metric([name], s.errors)
            bin_.add_metric([name], s.bytes_in)
            bout.add_metric([name], s.bytes_out)
            lat.add_metric([name], s.latency.cumulative(), s.latency.total)
        yield from (req, err, bin_, bout, lat)

    def _partitions_and_transactions(self) -> Iterator[Any]:
        """Partitions led and their producers, owned transaction slots, fsyncs, takeovers."""
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        b = self.broker
        parts = list(b.partitions.values())
        yield _gauge("kaas_partitions_led", "Partitions this broker leads.", len(parts))
        yield _gauge("kaas_producer_states", "Producer (idempotence) entries over led partitions.",
                     sum(len(p.log.producers) for p in parts))
        yield _gauge("kaas_transactions_open", "Ongoing transactions of the slots this broker owns.",
                     self.txn_open)
        yield _gauge("kaas_transactions_prepared",
                     "Prepared (PrepareCommit/PrepareAbort) transactions of the slots this broker owns.",
                     self.txn_prepared)
        yield _gauge("kaas_txn_slots_owned", "Transaction slots this broker coordinates.", self.txn_slots_owned)
        yield _gauge("kaas_txn_slots_unreadable", "Owned slot files that did not parse at the last scrape.",
                     self.txn_slots_unreadable)
        yield _gauge("kaas_marker_queue_depth", "Files in this broker's marker queue.", self.marker_queue_depth)

        fs = HistogramMetricFamily("kaas_fsync_seconds", "Group-commit fsync latency.")
        fs.add_metric([], counters.FSYNC.cumulative(), counters.FSYNC.total)
        yield fs
        yield CounterMetricFamily("kaas_partition_takeovers", "Partitions taken over (opened).",
                                  value=getattr(b, "takeovers", 0))
        tk = HistogramMetricFamily("kaas_partition_takeover_seconds", "Time to open (recover) one partition.")
        tk.add_metric([], counters.TAKEOVER.cumulative(), counters.TAKEOVER.total)
        yield tk
        yield from lag_families(parts, self.committed)

    def _log_cleaner(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from kaas.tasks.log_cleaner import Stats as CleanerStats

        b = self.broker
        yield CounterMetricFamily("kaas_log_cleaner_bytes", "Bytes the log cleaner read (cleaned).",
                                  value=CleanerStats.bytes_cleaned)
        yield CounterMetricFamily("kaas_log_cleaner_records_removed", "Records the log cleaner removed.",
                                  value=CleanerStats.records_removed)
        yield CounterMetricFamily("kaas_log_cleaner_failures", "Cleaning passes that failed.",
                                  value=CleanerStats.failures)
        lag = GaugeMetricFamily("kaas_log_cleaner_dirty_ratio",
                                "Cleaner lag: dirty share of each led compacted partition's cleanable bytes.",
                                labels=["topic", "partition"])
        now = b.clock.wall_ms()
        for p in b.partitions.values():
            if p.log.config.compact:
                lag.add_metric([p.topic, str(p.index)], p.log.dirty_ratio(now)[1])
        yield lag

    def _shares(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        share = counters.SHARE
        yield CounterMetricFamily("kaas_share_records_acquired",
                                  "Share-group records acquired (each delivery of a record counts).",
                                  value=share.acquired)
        acks = CounterMetricFamily("kaas_share_acknowledgements",
                                   "Share-group records acknowledged, by acknowledge type.", labels=["type"])
        for kind in ("accept", "release", "reject", "gap", "renew"):
            acks.add_metric([kind], share.acknowledged.get(kind, 0))
        yield acks
        yield CounterMetricFamily("kaas_share_lock_expiries",
                                  "Share-group records whose acquisition lock expired.", value=share.expired)
        yield CounterMetricFamily("kaas_share_records_archived",
                                  "Share-group records archived (rejected, gaps, past the delivery-count limit).",
                                  value=share.archived)
        yield _gauge("kaas_share_partitions", "Share partitions (group, topic, partition) this broker holds.",
                     len(self.broker.shares.held()))

    def _cluster(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        b = self.broker
        yield _gauge("kaas_connections", "Open client connections.", getattr(b, "connections", 0))
        cluster = b.cluster
        yield _gauge("kaas_controller", "1 when this broker is the controller.", int(bool(cluster.is_controller)))
        yield _gauge("kaas_controller_epoch", "Highest controller epoch seen.", cluster.controller_epoch)
        yield _gauge("kaas_draining", "1 while this broker drains (SIGTERM).", int(bool(b.draining)))
        yield _gauge("kaas_brokers_alive", "Live brokers as seen by this one.", len(cluster.alive()))
        yield CounterMetricFamily("kaas_controller_failovers", "Controller failovers handled.",
                                  value=getattr(cluster, "failovers", 0))

    def _coordinators(self) -> Iterator[Any]:
        """The transaction coordinator's events, and the groups coordinated here."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        b = self.broker
        if b.txn is not None:
            ev = CounterMetricFamily("kaas_txn_coordinator_events", "Transaction coordinator events.",
                                     labels=["event"])
            for name, value in sorted(b.txn.stats.items()):
                ev.add_metric([name], value)
            for name, value in sorted(b.peer_links.stats.items()):
                ev.add_metric([f"peer_link_{name}"], value)
            yield ev
        groups = getattr(b, "groups", None)
        if groups is not None:
            cg = CounterMetricFamily("kaas_consumer_group_events", "KIP-848 consumer group events (heartbeats, "
                                     "group epochs bumped, revocations, members fenced, migrations).",
                                     labels=["event"])
            for name, value in sorted(groups.consumers.stats.items()):
                cg.add_metric([name], value)
            yield cg
            kinds = GaugeMetricFamily("kaas_groups", "Groups this broker coordinates, by type and state.",
                                      labels=["type", "state"])
            tally: dict[tuple[str, str], int] = {}
            for g in groups.list_groups():
                key = (g["group_type"], g["group_state"])
                tally[key] = tally.get(key, 0) + 1
            for (kind, state), n in sorted(tally.items()):
                kinds.add_metric([kind, state], n)
            yield kinds


def _gauge(name: str, doc: str, value: float) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(name, doc, value=value)


def _volume_stats(txn: Any, broker_id: int, owned: list[int]) -> tuple[int, int, int, int]:
    """(marker queue depth, open, prepared, unreadable slots); runs in a worker thread."""
    from kaas.domain.txn import TxnState

    try:
        depth = len(txn.queue.list(broker_id))
    except OSError:
        depth = 0
    open_ = prepared = bad = 0
    for slot in owned:
        try:
            state = txn.store.load(slot)
        except Exception:  # CorruptState/OSError: reported by the coordinator itself
            bad += 1
            continue
        for meta in state.entries.values():
            if meta.state is TxnState.Ongoing:
                open_ += 1
            elif meta.state.is_prepared:
                prepared += 1
    return depth, open_, prepared, bad


def make_registry(broker: Any) -> tuple[Any, BrokerCollector]:
    """A fresh CollectorRegistry for this process: the broker collector plus process,
    platform and GC collectors."""
    from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    collector = BrokerCollector(broker)
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry, collector


# ---------------------------------------------------------------------- HTTP endpoint

_MAX_HEAD = 16 * 1024


async def serve_metrics(broker: Any, host: str, port: int, *,
                        task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``GET /metrics`` (HTTP/1.0-style, one request per connection) forever."""
    registry, collector = make_registry(broker)
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[:2]
    log.info("metrics_listening", host=bound[0], port=bound[1])
    task_status.started(bound)
    await trio.serve_listeners(partial(_handle, registry, collector), listeners)


async def _handle(registry: Any, collector: BrokerCollector, stream: trio.SocketStream) -> None:
    from prometheus_client.exposition import choose_encoder

    try:
        with trio.move_on_after(10):
            head = b""
            while b"\r\n\r\n" not in head and b"\n\n" not in head:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                head += chunk
                if len(head) > _MAX_HEAD:
                    await _reply(stream, 431, b"request header too large\n")
                    return
            lines = head.decode("latin-1").split("\n")
            line = lines[0].strip().split()
            accept = next((h.split(":", 1)[1].strip() for h in lines[1:] if h.lower().startswith("accept:")), "")
            if len(line) < 2:
                await _reply(stream, 400, b"bad request\n")
                return
            method, target = line[0], line[1].split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                await _reply(stream, 405, b"method not allowed\n")
                return
            if target == "/healthz":
                await _reply(stream, 200, b"ok\n", head_only=method == "HEAD")
                return
            if target not in ("/metrics", "/"):
                await _reply(stream, 404, b"not found; try /metrics\n")
                return
            try:
                await collector.refresh()
                encoder, content_type = choose_encoder(accept)  # text 0.0.4 unless OpenMetrics is asked for
                body = encoder(registry)
            except Exception as exc:  # never take the broker down for a scrape
                log.exception("metrics_scrape_failed", error=repr(exc))
                await _reply(stream, 500, f"scrape failed: {exc!r}\n".encode())
                return
            await _reply(stream, 200, body, content_type=content_type, head_only=method == "HEAD")
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await stream.aclose()


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error"}


async def _reply(stream: trio.SocketStream, status: int, body: bytes, *,
                 content_type: str = "text/plain; charset=utf-8", head_only: bool = False) -> None:
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode("latin-1")
    await stream.send_all(head if head_only else head + body)
