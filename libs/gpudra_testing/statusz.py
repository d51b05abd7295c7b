"""Reading a service's `/statusz` (gpudra_service.HealthServer) in tests, over real HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    """A loopback port nothing listens on right now (a service's `--health-port`, a NATS server's
    `-p`): bind it soon, another process may take it meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_status(port: int) -> dict[str, Any] | None:
    """The JSON object `/statusz` answers on `port`; None while nothing answers there."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/statusz", timeout=2) as reply:
            assert reply.headers["Content-Type"] == "application/json"
            doc = json.loads(reply.read())
    except (urllib.error.URLError, OSError):
        return None
    assert isinstance(doc, dict)
    return doc


async def until_status(
    port: int, check: Callable[[dict[str, Any]], bool], tries: int = 300
) -> dict[str, Any]:
    """Poll `/statusz` every 50 ms until `check` holds for it; fail with the last answer."""
    last: dict[str, Any] | None = None
    for _ in range(tries):
        last = await asyncio.to_thread(get_status, port)
        if last is not None and check(last):
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"/statusz never got there; last: {last}")
