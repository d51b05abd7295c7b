"""Keeping a started system up for the other commands (`gpudra up`, `demo --keep-running`).

`hold` writes the state file, then waits until Ctrl-C / SIGTERM (the caller's cancellation) or
until a service process exits on its own, which is reported as a `StartError` naming it and its
log — a half-dead system is never left looking alive. The state file is removed on the way out.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from gpudra_cli.standalone import state
from gpudra_cli.standalone.errors import StartError
from gpudra_cli.standalone.system import System


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


async def hold(system: System, path: Path) -> None:
    state.save(state_of(system), path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        while not stop.is_set():
            gone = system.exited()
            if gone:
                name, code = gone[0]
                raise StartError(
                    f"service {name} exited with code {code}; see {system.log_dir / name}.log"
                )
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except TimeoutError:
                continue
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        state.remove(path, os.getpid())
