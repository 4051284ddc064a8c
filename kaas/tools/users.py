"""``kaas users list|add|remove``: SASL/SCRAM users, like Apache's
``kafka-configs --entity-type users --alter --add-config 'SCRAM-SHA-512=[password=...]'``.

Over the wire (``--bootstrap``, with ``--command-config`` for the admin's own SASL
credentials): DescribeUserScramCredentials and AlterUserScramCredentials, the salt and
the salted password computed here, as Apache's admin client does (the password never
leaves this process). With ``--data DIR`` and no broker heartbeating in the directory:
the credentials file written directly, to bootstrap the first admin user before any broker
runs; while brokers run, ``--data`` goes over the wire to the addresses of their
heartbeats instead (the file has one writer, the controller)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import click
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.alter_user_scram_credentials.v0.response import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest
from kio.schema.describe_user_scram_credentials.v0.response import DescribeUserScramCredentialsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from kaas.domain import scram, scram_users
from kaas.errors import CorruptState
from kaas.storage import credentials
from kaas.storage.paths import Layout
from kaas.tools._wire import F, code_name, command_config_option, json_option, open_cluster
from kaas.tools.output import emit, table

MECHANISMS = sorted(scram.MECHANISMS)
LIVE_HEARTBEAT_S = 10.0  # a heartbeat this fresh means a broker runs on the directory


def _target(f: F) -> F:
    f = click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=None,
                     help="The data directory: its credentials file is written directly while no broker "
                          "runs, else its brokers are asked over the wire.")(f)
    f = command_config_option(f)
    return click.option("--bootstrap", "--bootstrap-server", "bootstrap", default=None, envvar="KAAS_BOOTSTRAP",
                        help="HOST:PORT[,...] of any broker(s).")(f)


def _running_brokers(layout: Layout) -> list[str]:
    """HOST:PORT of every broker whose heartbeat file is fresh."""
    now = time.time()
    out: list[str] = []
    for path in sorted(layout.brokers.glob("kaas-*.json")):
        try:
            if now - path.stat().st_mtime < LIVE_HEARTBEAT_S:
                hb = json.loads(path.read_bytes())
                out.append(f"{hb['host']}:{int(hb['port'])}")
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def _target_of(bootstrap: str | None, data: Path | None) -> str | Path:
    """The bootstrap to use over the wire, or the data directory whose file to write."""
    if bootstrap is not None and data is None:
        return bootstrap
    if bootstrap is not None or data is None:
        raise click.UsageError("give exactly one of --bootstrap and --data")
    running = _running_brokers(Layout(data))
    return ",".join(running) if running else data


Change = Callable[[scram_users.Users], tuple[scram_users.Users, list[scram_users.Result]]]


def _one_at_a_time(deletions: Sequence[scram_users.Deletion], upsertions: Sequence[scram_users.Upsertion]) -> Change:
    """The changes applied as one request each, as they go over the wire (a request
    changes a user once)."""
    def change(users: scram_users.Users) -> tuple[scram_users.Users, list[scram_users.Result]]:
        results: list[scram_users.Result] = []
        for d in deletions:
            users, res = scram_users.alter(users, [d], [])
            results += res
        for u in upsertions:
            users, res = scram_users.alter(users, [], [u])
            results += res
        return users, results
    return change


def _offline(data: Path, change: Change) -> list[scram_users.Result]:
    layout = Layout(data)
    try:
        users = credentials.read(layout.scram_credentials)
    except CorruptState as exc:
        raise click.ClickException(str(exc)) from None
    after, results = change(users)
    if after != users:
        credentials.write(layout.scram_credentials, after)
    return results


def add_offline(data: Path, name: str, password: str, mechanisms: Sequence[str] = MECHANISMS,
                iterations: int = 4096) -> None:
    """``kaas users add NAME --data DATA`` while no broker runs: NAME's credentials
    written to the credentials file directly (``kaas cluster --secure`` bootstraps its
    admin and broker users with it).

    Raises:
        click.ClickException: the file is corrupt or refused the change.
    """
    results = _offline(data, _one_at_a_time([], _upsertions(name, password, iterations, mechanisms)))
    failed = [r for r in results if r.error_code != ErrorCode.none]
    if failed:
        raise click.ClickException(f"{name}: {code_name(failed[0].error_code)} {failed[0].error_message or ''}")


def _upsertions(name: str, password: str, iterations: int, mechanisms: Sequence[str]) -> list[scram_users.Upsertion]:
    ups = []
    for mech in mechanisms or MECHANISMS:
        salt = secrets.token_bytes(32)
        ups.append(scram_users.Upsertion(name, scram_users.MECHANISM_CODES[mech], iterations, salt,
                                         scram.salted_password(mech, password, salt, iterations)))
    return ups


def _report(results: Sequence[scram_users.Result | AlterUserScramCredentialsResult], as_json: bool) -> None:
    rows = [{"user": r.user, "error": None if r.error_code == ErrorCode.none else code_name(r.error_code),
             "message": r.error_message} for r in results]
    emit(rows, as_json, lambda: table(rows, ["user", "error", "message"]))
    failed = [r for r in rows if r["error"]]
    if failed:
        raise click.ClickException("; ".join(f"{r['user']}: {r['error']} {r['message'] or ''}".strip()
                                             for r in failed))


@click.group("users")
def users() -> None:
    """List, add and remove SASL/SCRAM users."""


@users.command("list")
@_target
@json_option
def list_(bootstrap: str | None, command_config: Path | None, data: Path | None, as_json: bool) -> None:
    """Every user with its SCRAM mechanisms and iterations."""
    target = _target_of(bootstrap, data)
    if isinstance(target, Path):
        try:
            descs = scram_users.describe(credentials.read(Layout(target).scram_credentials), None)
        except CorruptState as exc:
            raise click.ClickException(str(exc)) from None
        rows = [{"user": d.user, "mechanisms": [f"{scram.MECHANISM_TYPES[m]}:{i}" for m, i in d.credentials]}
                for d in descs]
    else:
        with open_cluster(target, command_config) as c:
            resp: DescribeUserScramCredentialsResponse = c.call_any(DescribeUserScramCredentialsRequest(users=None))
        if resp.error_code != ErrorCode.none:
            raise click.ClickException(f"DescribeUserScramCredentials: {code_name(resp.error_code)} "
                                       f"{resp.error_message or ''}")
        rows = [{"user": r.user, "mechanisms": [f"{scram.MECHANISM_TYPES.get(ci.mechanism, ci.mechanism)}:"
                                                f"{ci.iterations}" for ci in r.credential_infos]}
                for r in resp.results]
    emit(rows, as_json, lambda: table(rows, ["user", "mechanisms"]))


def _mechanisms_option(f: F) -> F:
    return click.option("--mechanism", "mechanisms", multiple=True, type=click.Choice(MECHANISMS),
                        help="SCRAM mechanism (repeatable; default: both).")(f)


@users.command()
@click.argument("name")
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True, envvar="KAAS_USER_PASSWORD",
              help="The user's password (prompted for when not given).")
@click.option("--iterations", type=click.IntRange(scram.MIN_ITERATIONS, scram.MAX_ITERATIONS), default=4096,
              show_default=True, help="PBKDF2 iterations.")
@_mechanisms_option
@_target
@json_option
def add(name: str, password: str, iterations: int, mechanisms: tuple[str, ...], bootstrap: str | None,
        command_config: Path | None, data: Path | None, as_json: bool) -> None:
    """Create NAME, or set its password (the salt is new each time). One request per
    mechanism, as ``kafka-configs`` does: a request changes a user once."""
    target = _target_of(bootstrap, data)
    ups = _upsertions(name, password, iterations, mechanisms)
    results: list[scram_users.Result | AlterUserScramCredentialsResult] = []
    if isinstance(target, Path):
        results += _offline(target, _one_at_a_time([], ups))
    else:
        with open_cluster(target, command_config) as c:
            for u in ups:
                resp: AlterUserScramCredentialsResponse = c.call_controller(AlterUserScramCredentialsRequest(
                    deletions=(), upsertions=(ScramCredentialUpsertion(
                        name=u.user, mechanism=i8(u.mechanism), iterations=i32(u.iterations), salt=u.salt,
                        salted_password=u.salted_password),)))
                results += resp.results
    _report(_per_user(results), as_json)


@users.command()
@click.argument("name")
@_mechanisms_option
@_target
@json_option
def remove(name: str, mechanisms: tuple[str, ...], bootstrap: str | None, command_config: Path | None,
           data: Path | None, as_json: bool) -> None:
    """Delete NAME's credentials (every mechanism it has, unless --mechanism)."""
    target = _target_of(bootstrap, data)
    results: list[scram_users.Result | AlterUserScramCredentialsResult] = []
    if isinstance(target, Path):
        def change(users: scram_users.Users) -> tuple[scram_users.Users, list[scram_users.Result]]:
            mechs = mechanisms or sorted(users.get(name, {})) or MECHANISMS[:1]
            return _one_at_a_time([scram_users.Deletion(name, scram_users.MECHANISM_CODES[m]) for m in mechs],
                                  [])(users)
        results += _offline(target, change)
    else:
        with open_cluster(target, command_config) as c:
            mechs = list(mechanisms)
            if not mechs:
                described: DescribeUserScramCredentialsResponse = c.call_any(
                    DescribeUserScramCredentialsRequest(users=None))
                mechs = [scram.MECHANISM_TYPES[ci.mechanism] for r in described.results if r.user == name
                         for ci in r.credential_infos if ci.mechanism in scram.MECHANISM_TYPES] or MECHANISMS[:1]
            for m in mechs:  # one request per mechanism: a request changes a user once
                resp: AlterUserScramCredentialsResponse = c.call_controller(AlterUserScramCredentialsRequest(
                    upsertions=(), deletions=(
                        ScramCredentialDeletion(name=name, mechanism=i8(scram_users.MECHANISM_CODES[m])),)))
                results += resp.results
    _report(_per_user(results), as_json)


def _per_user(results: Sequence[scram_users.Result | AlterUserScramCredentialsResult]
              ) -> list[scram_users.Result | AlterUserScramCredentialsResult]:
    """One result per user of several requests' results: its first failure, else its
    first success."""
    out: dict[str, scram_users.Result | AlterUserScramCredentialsResult] = {}
    for r in results:
        if r.user not in out or (out[r.user].error_code == ErrorCode.none and r.error_code != ErrorCode.none):
            out[r.user] = r
    return list(out.values())
