"""Rebuilding the engine off the claim path: one debounced warm-up after the slices change.

Every change of the slice index (a node's health, taints on missed heartbeats, MIG layout, a node
joining) or of the applied DeviceClasses makes the engine rebuild: for a slice change, only the
nodes it touched are recomputed (one node's change under `topology`: about 0.7 ms at 1,000
DGX-like nodes, 2.5 ms at 10,000); for new classes or a pool that is not node-local, every node
(about 70-80 ms per 1,000). Without a warm-up the first claim after the change pays it inside
its decision. `Warmer` promises:

- After a change (`notify`, wired as the indexes' listener) it waits until the inputs have been
  quiet for `delay` seconds, but no longer than `max_delay` after the first change of a burst,
  then runs `Engine.warm_up` for the inputs of that moment: a burst of changes gives one warm-up.
- It runs on the event loop, in one go (engine objects are not thread-safe; nothing here uses a
  thread, and a warm-up never interleaves with a decision: both are synchronous code between
  awaits), about as long as the rebuild a claim would have paid: claims that arrive meanwhile
  wait for it. (A stepped warm-up that slept between chunks of nodes was measured no better than
  the rebuild on the claim path at 10 and 100 claims/s; with the incremental rebuild there is
  nothing left to spread out after a one-node change.)
- A decision that arrives before the warm-up ran is still correct: the engine rebuilds for a
  version it was not built for (and a warm-up never replaces what such a decision built), so no
  decision uses slices older than the index version it read.
- `stop` cancels a pending or running warm-up and returns once its task is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from gpudra_alloc import AllocatedState
from gpudra_allocator.engine import Engine
from gpudra_api import ResourceSlice
from gpudra_service import cancel_until_done

log = logging.getLogger(__name__)

Inputs = Callable[[], tuple[Iterable[ResourceSlice], int, AllocatedState]]

MAX_DELAY_FACTOR = 10  # a burst that never pauses is warmed up this many `delay`s after it began


class Warmer:
    def __init__(
        self,
        engine: Engine,
        inputs: Inputs,
        delay: float,
        before: Callable[[], None] | None = None,
        max_delay: float | None = None,
    ) -> None:
        """`inputs()` gives the slices, their index version and the allocated state to warm up
        for (read when the warm-up starts); `before()` runs first (the worker applies changed
        DeviceClasses there)."""
        self._engine = engine
        self._inputs = inputs
        self._before = before
        self.delay = delay
        self.max_delay = max_delay if max_delay is not None else delay * MAX_DELAY_FACTOR
        self._pending = asyncio.Event()
        self._last_change = 0.0
        self._task: asyncio.Task[None] | None = None
        self.runs = 0  # warm-ups run

    def notify(self) -> None:
        """The inputs changed: warm up once they have been quiet for `delay` seconds."""
        self._last_change = asyncio.get_running_loop().time()
        self._pending.set()

    @property
    def pending(self) -> bool:
        """Whether a change has not been warmed up for yet."""
        return self._pending.is_set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="engine-warm-up")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_until_done(task)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._pending.wait()
            first = self._last_change
            while True:
                due = min(self._last_change + self.delay, first + self.max_delay)
                now = loop.time()
                if now >= due:
                    break
                await asyncio.sleep(due - now)
            self._pending.clear()
            try:
                self._warm()
            except Exception:  # a warm-up is an optimisation: the next decision builds instead
                log.exception("warming up the allocation engine failed")

    def _warm(self) -> None:
        if self._before is not None:
            self._before()
        slices, version, state = self._inputs()
        self._engine.warm_up(slices, version, state)
        self.runs += 1
