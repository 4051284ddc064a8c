"""``kaas txn list|describe|abort``: transactions over the wire protocol, like Kafka's
kafka-transactions tool. ``abort`` drives the coordinator (InitProducerId for the id, which
aborts an ongoing transaction and fences its producer); it never edits slot files."""

from __future__ import annotations

import datetime
from pathlib import Path

import click
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_transactions.v0.response import DescribeTransactionsResponse, TransactionState
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.list_transactions.v1.response import ListTransactionsResponse
from kio.schema.types import TransactionalId
from kio.static.primitive import i32Timedelta

from kaas.tools._wire import (
    RETRIABLE,
    TRANSACTION,
    RetriableError,
    bootstrap_option,
    code_name,
    command_config_option,
    json_option,
    open_cluster,
    retry,
)
from kaas.tools.output import emit, table
from kaas.wire.build import ms

# InitProducerId answers these while the id's previous transaction is still finishing or
# its coordinator moves: abort tries again until its --timeout
ABORT_RETRIABLE = frozenset({ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress,
                             ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
# the transaction timeout abort's InitProducerId asks for
FENCING_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=60))


@click.group("txn")
def txn() -> None:
    """List, describe and abort transactions (over the wire protocol)."""


@txn.command("list")
@bootstrap_option
@command_config_option
@click.option("--state", "states", multiple=True, help="Only these states (Ongoing, PrepareCommit, ...).")
@json_option
def list_(bootstrap: str, command_config: Path | None, states: tuple[str, ...], as_json: bool) -> None:
    """Every transactional id of every broker's coordinator slots."""
    rows: list[dict[str, object]] = []
    with open_cluster(bootstrap, command_config) as c:
        for bid in c.broker_ids():
            r: ListTransactionsResponse = c.call(bid, ListTransactionsRequest(state_filters=tuple(states)))
            for t in r.transaction_states:
                rows.append({"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                             "state": t.transaction_state, "coordinator": bid})
    rows.sort(key=lambda r: str(r["transactional_id"]))
    emit(rows, as_json, lambda: table(rows, ["transactional_id", "producer_id", "state", "coordinator"]))


@txn.command()
@click.argument("transactional_id")
@bootstrap_option
@command_config_option
@json_option
def describe(transactional_id: str, bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """State, producer, timeout and partitions of one transactional id."""
    with open_cluster(bootstrap, command_config) as c:
        def attempt() -> tuple[int, TransactionState]:
            node = c.coordinator(transactional_id, TRANSACTION)
            r: DescribeTransactionsResponse = c.call(node, DescribeTransactionsRequest(
                transactional_ids=(TransactionalId(transactional_id),)))
            t = r.transaction_states[0]
            if t.error_code in RETRIABLE:
                raise RetriableError(t.error_code, f"DescribeTransactions({transactional_id})")
            return node, t
        node, t = retry(attempt)
        host, port = c.brokers[node]
    if t.error_code != ErrorCode.none:
        raise click.ClickException(f"{transactional_id}: {code_name(t.error_code)}")
    row = {"transactional_id": t.transactional_id, "state": t.transaction_state, "producer_id": t.producer_id,
           "producer_epoch": t.producer_epoch, "timeout_ms": ms(t.transaction_timeout),
           "start_time_ms": ms(t.transaction_start_time),
           "partitions": [f"{x.topic}-{p}" for x in t.topics for p in x.partitions],
           "coordinator": f"{host}:{port}"}
    emit(row, as_json, lambda: [f"{k:<16} {', '.join(v) if isinstance(v, list) else v}" for k, v in row.items()])


@txn.command()
@click.argument("transactional_id")
@bootstrap_option
@command_config_option
@click.option("--timeout", type=float, default=30.0, show_default=True)
@json_option
def abort(transactional_id: str, bootstrap: str, command_config: Path | None, timeout: float, as_json: bool) -> None:
    """Abort the id's ongoing transaction through its coordinator and fence its producer
    (the next epoch is taken, as a new producer session with this id would)."""
    with open_cluster(bootstrap, command_config) as c:
        def attempt() -> InitProducerIdResponse:
            node = c.coordinator(transactional_id, TRANSACTION)
            r: InitProducerIdResponse = c.call(node, InitProducerIdRequest(
                transactional_id=TransactionalId(transactional_id), transaction_timeout=FENCING_TIMEOUT))
            if r.error_code in ABORT_RETRIABLE:
                raise RetriableError(r.error_code, f"InitProducerId({transactional_id})")
            if r.error_code != ErrorCode.none:
                raise click.ClickException(f"{transactional_id}: {code_name(r.error_code)}")
            return r
        r = retry(attempt, timeout=timeout)
    out = {"transactional_id": transactional_id, "aborted": True, "producer_id": r.producer_id,
           "producer_epoch": r.producer_epoch}
    emit(out, as_json, lambda: f"{transactional_id}: no transaction open any more; producer {r.producer_id} "
                               f"fenced at epoch {r.producer_epoch}")
