"""``python scripts/multihost run``: see ``multihost/__init__.py``."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != here]
    sys.path[:0] = [str(here.parent), str(here.parent.parent)]

import json  # noqa: E402
import random  # noqa: E402

import click  # noqa: E402

from multihost import net  # noqa: E402
from multihost.run import BROKERS, SCENARIOS, run_scenario  # noqa: E402


@click.group()
def cli() -> None:
    """kaas across simulated hosts (network namespaces, per-host FUSE storage)."""


@cli.command()
@click.option("--scenario", type=click.Choice([*SCENARIOS, "all"]), default="all", show_default=True)
@click.option("--seed", type=int, default=None)
@click.option("--messages", type=int, default=3000, show_default=True)
@click.option("--copiers", type=int, default=2, show_default=True)
@click.option("--duration", type=float, default=40.0, show_default=True,
              help="Pace the copy to take about this long (the fault lands while it runs).")
def run(scenario: str, seed: int | None, messages: int, copiers: int, duration: float) -> None:
    """Run the scenarios; exit 0 only if every check held."""
    seed = seed if seed is not None else random.randrange(1 << 30)
    names = SCENARIOS if scenario == "all" else (scenario,)
    net.setup(BROKERS)
    results = []
    try:
        net.enter(net.CLIENT)  # this process and every client it starts live on the client host
        for i, name in enumerate(names):
            click.echo(f"== scenario {name} (seed {seed + i})")
            results.append(run_scenario(name, seed + i, messages, copiers, duration, click.echo))
            r = results[-1]
            for check, held in r["checks"].items():
                click.echo(f"  {'ok  ' if held else 'FAIL'} {check}")
            click.echo(json.dumps(r))
    finally:
        net.teardown(BROKERS)
    click.echo(f"multihost: {sum(r['ok'] for r in results)} of {len(results)} scenarios held")
    sys.exit(0 if results and all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    cli()
