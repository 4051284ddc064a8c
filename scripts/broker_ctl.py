#!/usr/bin/env python3
"""Chaos tools for a running kaas cluster: signal one broker by id through the
supervisor's pid files (DATA/run/kaas-<id>.pid).

    python scripts/broker_ctl.py --data ./data kill 1      # SIGKILL broker 1
    python scripts/broker_ctl.py --data ./data stop 2      # SIGSTOP (pause)
    python scripts/broker_ctl.py --data ./data cont 2      # SIGCONT (resume)
    python scripts/broker_ctl.py --data ./data restart 0   # SIGTERM; the supervisor restarts it
    python scripts/broker_ctl.py --data ./data controller  # print the controller's id
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import click


def _pid(data: Path, broker_id: int) -> int:
    return int((data / "run" / f"kaas-{broker_id}.pid").read_text().strip())


def _send(data: Path, broker_id: int, sig: signal.Signals) -> int:
    pid = _pid(data, broker_id)
    os.kill(pid, sig)
    click.echo(json.dumps({"broker": broker_id, "pid": pid, "signal": sig.name, "time": time.time()}))
    return pid


def controller_id(data: Path) -> int | None:
    cdir = data / "__cluster" / "controller"
    epochs = sorted((int(p.name[6:]) for p in cdir.glob("epoch-*") if p.name[6:].isdigit()), reverse=True)
    if not epochs:
        return None
    return int(json.loads((cdir / f"epoch-{epochs[0]}").read_text())["broker_id"])


@click.group()
@click.option("--data", type=click.Path(path_type=Path, exists=True), default=Path("./data"), show_default=True,
              help="The cluster's data directory (as given to `kaas cluster --data`).")
@click.pass_context
def cli(ctx, data: Path) -> None:
    """Signal one broker of a running kaas cluster by id."""
    ctx.obj = data


@cli.command()
@click.argument("broker_id", type=int)
@click.pass_obj
def kill(data: Path, broker_id: int) -> None:
    """SIGKILL a broker (the supervisor restarts it after its delay)."""
    _send(data, broker_id, signal.SIGKILL)


@cli.command()
@click.argument("broker_id", type=int)
@click.pass_obj
def stop(data: Path, broker_id: int) -> None:
    """SIGSTOP (pause) a broker."""
    _send(data, broker_id, signal.SIGSTOP)


@cli.command()
@click.argument("broker_id", type=int)
@click.pass_obj
def cont(data: Path, broker_id: int) -> None:
    """SIGCONT (resume) a paused broker."""
    _send(data, broker_id, signal.SIGCONT)


@cli.command()
@click.argument("broker_id", type=int)
@click.option("--timeout", type=float, default=30.0, show_default=True)
@click.pass_obj
def restart(data: Path, broker_id: int, timeout: float) -> None:
    """SIGTERM a broker (graceful drain) and wait for the supervisor to start a new one."""
    old = _send(data, broker_id, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            new = _pid(data, broker_id)
            if new != old:
                click.echo(json.dumps({"broker": broker_id, "restarted_pid": new}))
                return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.1)
    raise click.ClickException(f"broker {broker_id} was not restarted within {timeout}s")


@cli.command("controller")
@click.pass_obj
def controller(data: Path) -> None:
    """Print the id of the broker holding the highest controller epoch."""
    click.echo(controller_id(data))


if __name__ == "__main__":
    cli()
