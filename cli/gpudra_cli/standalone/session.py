"""Keeping a started system up for the other commands (`gpudra up`, `demo --keep-running`).

`hold` writes the state file, then waits until Ctrl-C / SIGTERM / SIGHUP (`STOP_SIGNALS`) or
until a service process exits on its own, which is reported as a `StartError` naming it and its
log — a half-dead system is never left looking alive. The state file is removed on the way out.
While held, the inventory's latest drift summary is kept in `<run dir>/drift.json` for `gpudra
drift`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpudra_cli.standalone import state
from gpudra_cli.standalone.reports import Samples
from gpudra_cli.standalone.system import System

# The signals that stop a running system. SIGHUP is what a closed terminal or a dropped SSH
# session sends: left at its default it ended `up` at once, with no cleanup, orphaning every
# service, NATS and the run directory.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stop_signals() -> list[signal.Signals]:
    """STOP_SIGNALS, less SIGHUP when it is ignored: `nohup gpudra up` asked to outlive its
    terminal."""
    ignored = signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    return [sig for sig in STOP_SIGNALS if not (sig == signal.SIGHUP and ignored)]


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt while the system runs, so the caller's
    cleanup stops every service (they run in sessions of their own and would not see the signal).
    SIGINT is restored too because a shell starts background jobs with it ignored; an ignored
    SIGHUP (nohup) stays ignored."""
    previous = {sig: signal.getsignal(sig) for sig in _stop_signals()}
    for sig in previous:
        signal.signal(sig, signal.default_int_handler)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def state_of(system: System) -> state.State:
    return state.State(
        nats_url=system.nats_url,
        run_dir=str(system.run_dir),
        pid=os.getpid(),
        fleet=system.fleet.name,
        nodes={n.name: n.profile for n in system.fleet.nodes},
        registry_dirs={n.name: str(system.node_dirs(n.name).registry) for n in system.fleet.nodes},
        otlp_endpoint=system.collector.endpoint if system.collector else "",
    )


DRIFT_FILE = "drift.json"


def drift_path(run_dir: Path) -> Path:
    """Where a held system keeps the inventory's last drift summary (published only on change,
    so a command started later could not hear it)."""
    return run_dir / DRIFT_FILE


async def hold(system: System, path: Path, samples: Samples | None = None) -> None:
    written: dict[str, Any] | None = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Ctrl-C, SIGTERM and SIGHUP end the hold the same way (a background `up` may have SIGINT
    # ignored, which would otherwise leave only SIGKILL, and that would orphan the services).
    handled = _stop_signals()
    before = {sig: signal.getsignal(sig) for sig in handled}
    for sig in handled:
        loop.add_signal_handler(sig, stop.set)
    try:
        # Only now: whoever sees the state file may stop the system with a signal, which must
        # end the hold (written before the handlers, a signal sent at once raised
        # KeyboardInterrupt instead, and a second one during the stop killed it half way).
        state.save(state_of(system), path)
        while not stop.is_set():
            if samples is not None and samples.drift is not None and samples.drift != written:
                written = samples.drift
                drift_path(system.run_dir).write_text(json.dumps(written), encoding="utf-8")
            system.check_alive()
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except TimeoutError:
                continue
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
            # remove_signal_handler leaves SIG_DFL: a second signal while the caller stops the
            # services would kill it half way, orphaning the rest. Keep what was there before.
            signal.signal(sig, before[sig])
        state.remove(path, os.getpid())
