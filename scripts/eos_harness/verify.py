"""The exactly-once check: ``kaas.testing.verify.exactly_once`` (the public verdict, with
``kaas.domain.checker`` inside) on the harness's run, as the result dict the harness
prints.

No click and no process handling here: a failure the caller must report is a
``VerifyError``.
"""

from __future__ import annotations

import json

from kaas.testing.verify import OPEN_TXN_WAIT_S, Origin, Record, VerifyError, exactly_once

from .config import HarnessConfig, security, verify_group

__all__ = ["OPEN_TXN_WAIT_S", "VerifyError", "verify"]


def _value(r: Record) -> dict:
    return json.loads(r.value or b"{}")


def verify(cfg: HarnessConfig, aborted_tags: set[str], echo=None) -> dict:
    """Read the output back (read_committed, as the verifier user) and judge the run with
    ``kaas.testing.verify.exactly_once``: every seeded value exactly once, nothing of an
    aborted transaction (the copiers' tags), each input partition's order kept in the
    output, the group's offsets at the input end, no transaction left open after
    ``OPEN_TXN_WAIT_S``, and the reader's view consistent with the output's log (markers
    included). Value i was seeded to input partition i % P at offset i // P; only values
    below the group's committed offset are owed in the output, the rest were not copied yet
    (a run that timed out), which is reported as such rather than as lost."""
    n_parts = cfg.input_partitions
    verdict = exactly_once(
        {**security(cfg), "bootstrap.servers": cfg.bootstrap}, cfg.input, cfg.output, group=cfg.group,
        origin=lambda r: Origin(int(_value(r)["v"]), int(_value(r)["ip"]), int(_value(r)["io"])),
        expected=[Origin(i, i % n_parts, i // n_parts) for i in range(cfg.messages)],
        txn_of=lambda r: _value(r).get("tag"), aborted=aborted_tags, timeout=cfg.timeout,
        open_txn_wait=OPEN_TXN_WAIT_S, reader_config={**security(cfg, "verifier"), "bootstrap.servers": cfg.bootstrap},
        reader_group=verify_group(cfg), say=None if echo is None else (lambda line: echo(line, err=True)))
    report = verdict.report
    max_latency = 0
    for r in verdict.records:
        sent = _value(r).get("ts", 0)
        if r.timestamp > 0 and sent > 0:
            max_latency = max(max_latency, r.timestamp - sent)
    return {"output_records": verdict.output_records, "open_txn_wait_s": verdict.open_txn_wait_s,
            "open_txns_left": len(verdict.open_transactions),
            "duplicates": report.duplicate_count, "losses": len(report.lost),
            "order_violations": len(report.non_monotonic), "aborted_visible": len(report.aborted_reads),
            "uncopied": verdict.uncopied, "phantoms": len(report.phantoms), "offsets_match": verdict.offsets_match,
            "committed_offsets": verdict.committed, "input_ends": verdict.input_ends,
            "read_anomalies": {a.kind: len(a.records) for a in verdict.anomalies},
            "max_e2e_latency_ms": max_latency, "violations": verdict.violations()}
