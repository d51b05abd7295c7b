"""The service skeleton the control-plane services and the node-agent run: one `main` for all.

Promises: settings are loaded first (a `SettingsError` prints one line and exits 2 before anything
starts); logging and tracing are set up from the common settings (a trace file that cannot be
opened exits 2 too); SIGTERM and SIGINT set the stop `Event` that `serve` watches (no
`run_forever`); a `SettingsError` raised while starting exits 2, one of the service's `fatal`
errors exits 1 with one log line, a clean stop exits 0; tracing is flushed on every way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from gpudra_service.errors import SettingsError
from gpudra_service.settings import CommonSettings
from gpudra_service.telemetry import setup_tracing

S = TypeVar("S", bound=CommonSettings)
T = TypeVar("T")
log = logging.getLogger("gpudra_service")


async def cancel_until_done(task: asyncio.Task[Any], every: float = 0.5) -> None:
    """Cancel `task` and wait until it has finished, cancelling again every `every` seconds.

    One `cancel()` is not always enough on Python 3.11: `asyncio.wait_for` drops a cancellation
    that arrives just as the operation it waits for completes (nats-py's connection attempts run
    under it), and the task goes on as if never cancelled. An exception the task ends with
    (other than its cancellation) is raised here, as `await task` would.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every)
    if not task.cancelled():
        task.result()


async def until_stopped(
    work: Coroutine[Any, Any, T], stop: asyncio.Event, what: str = "NATS"
) -> T | None:
    """`await work`, unless `stop` is set first: then `work` is cancelled, "stopped before `what`
    was reachable" logged and None returned.

    For start-up steps that wait without bound (connecting waits for NATS forever): a SIGTERM
    must still end the process.
    """
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        with contextlib.suppress(Exception):  # the work's own error is raised below
            await cancel_until_done(task)
        await asyncio.gather(stopper, return_exceptions=True)
    if task.cancelled():
        log.info("stopped before %s was reachable", what)
        return None
    return task.result()


async def run_service(
    name: str,
    load: Callable[[Sequence[str] | None], S],
    serve: Callable[[S, asyncio.Event], Awaitable[None]],
    argv: Sequence[str] | None = None,
    fatal: tuple[type[Exception], ...] = (),
) -> int:
    """Run `serve(settings, stop)` for service `name` (e.g. "inventory"); returns the exit code."""
    try:
        settings = load(argv)
    except SettingsError as exc:
        print(f"gpudra-{name}: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        shutdown_tracing = setup_tracing(
            f"gpudra-{name}", settings.trace_exporter, settings.trace_endpoint, settings.trace_file
        )
    except SettingsError as exc:  # e.g. a trace file in a directory that does not exist
        log.error("%s stopped: %s", name, exc)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await serve(settings, stop)
    except SettingsError as exc:
        log.error("%s stopped: %s", name, exc)
        return 2
    except fatal as exc:
        log.error("%s stopped: %s", name, exc)
        return 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        shutdown_tracing()
    return 0
