"""Waiting in tests for something another task or process does: poll a condition, bounded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

TIMEOUT = 10.0  # seconds: generous, for a loaded 2-core CI machine


async def until(
    check: Callable[[], object], what: str = "the condition", timeout: float = TIMEOUT
) -> None:
    """Return once `check()` is truthy; `AssertionError` naming `what` after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.01)
