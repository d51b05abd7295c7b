"""The claim-writer's one way of trying again later: what failed is kept by its owner (a set of
keys, counted in `/statusz`), and `every` hands it back each `interval` seconds. Watches bring no
further event for a pod or claim whose handling an API error cut short, so without this a pod
could stay gated, or a claim reserved, until the next restart."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gpudra_service import cancel_until_done


async def every(interval: float, work: Callable[[], Awaitable[None]]) -> None:
    """Run `work` every `interval` seconds, until cancelled."""
    while True:
        await asyncio.sleep(interval)
        await work()


async def beside(
    main: Awaitable[None], interval: float, work: Callable[[], Awaitable[None]]
) -> None:
    """Await `main` with `every(interval, work)` running beside it, stopped when `main` ends."""
    retries = asyncio.create_task(every(interval, work))
    try:
        await main
    finally:
        await cancel_until_done(retries)
