"""``python launch.py [--pyframes DIR MAP] [--quiet] kaas-args...``: run ``kaas``
(``kaas.cli``) as the broker process of ``scripts/bench cpu`` under callgrind.

``--pyframes DIR MAP``: install ``kaas_pyframes`` (``pyframes.c``, built into DIR) first,
its map written to MAP.

``--quiet``: the periodic loops of a lone broker (heartbeat tick, the polls of failpoints,
credentials, configs, trash, fences, presence, group timers, flushes, the marker queue's
full pass and the transaction sweep) wake once an hour instead of every 0.05-10 s. They
wake by the wall clock, and under callgrind a window lasts ~50 times longer than
natively: at their usual periods they were a quarter of a transaction window's count,
and each membership tick (~5 M instructions) fell into a window or not by chance. The
request path is untouched; wake-ups by events (the inotify doorbell, a request) stay;
the bench passes ``--session-timeout-ms``, ``--retention-check-ms`` and
``--log-cleaner-backoff-ms`` to match, so the lease outlives the heartbeat period.
"""

import dataclasses
import importlib
import os
import sys

QUIET_S = 3600.0  # longer than any window: no periodic wake-up falls into one
QUIET_PERIODS_S = {  # module: the constants of its loops' periods
    "kaas.tasks": ("FAILPOINT_RELOAD_S",),
    "kaas.tasks.credentials": ("RELOAD_S",),
    "kaas.tasks.reload": ("POLL_S", "FORCE_S"),
    "kaas.tasks.trash": ("SWEEP_S",),
    "kaas.tasks.txn": ("FENCE_POLL_S", "MARKER_POLL_S", "SWEEP_INTERVAL_MS"),
    "kaas.tasks.group_timers": ("TIMER_POLL_S",),
    "kaas.tasks.flush": ("IDLE_S",),
    "kaas.tasks.presence": ("PRESENCE_SCAN_S",),
}


def quiet() -> None:
    for name, values in QUIET_PERIODS_S.items():
        module = importlib.import_module(name)
        for attr in values:
            if not hasattr(module, attr):
                raise SystemExit(f"launch.py --quiet: {name}.{attr} is gone; update QUIET_PERIODS_S")
            setattr(module, attr, QUIET_S * 1000 if attr.endswith("_MS") else QUIET_S)
    os.environ["KAAS_TXN_SWEEP_MS"] = str(int(QUIET_S * 1000))
    import kaas.net.server  # kaas.cli imports serve_broker from here when it runs

    serve = kaas.net.server.serve_broker

    async def serve_quietly(settings, *args, **kwargs):
        return await serve(dataclasses.replace(settings, heartbeat_ms=int(QUIET_S * 1000)), *args, **kwargs)

    kaas.net.server.serve_broker = serve_quietly


# As ``kaas broker`` does before anything imports kio (``kaas.cli._without_test_libraries``):
# kio imports hypothesis when it can, and trio then makes its scheduler deterministic (a
# sort and a shuffle of every batch of runnable tasks) as it does under hypothesis tests.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

args = sys.argv[1:]
if args[:1] == ["--pyframes"]:
    sys.path.insert(0, args[1])
    import kaas_pyframes  # noqa: E402

    kaas_pyframes.install(args[2])
    args = args[3:]
if args[:1] == ["--quiet"]:
    quiet()
    args = args[1:]
import kaas.cli  # noqa: E402

kaas.cli.main(args)
