from __future__ import annotations

import time
import uuid

import nats
import nats.errors
import pytest

from gpudra_bus.consume import fetch_ready


async def test_returns_the_first_message_at_once_and_tops_up_what_is_queued(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        name = f"CONSUME_{uuid.uuid4().hex[:8]}"
        await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
        sub = await js.pull_subscribe(f"{name.lower()}.>", durable="c", stream=name)
        with pytest.raises(nats.errors.TimeoutError):
            await fetch_ready(sub, 8, 0.05)
        for i in range(3):
            await js.publish(f"{name.lower()}.x", str(i).encode())
        started = time.monotonic()
        msgs = await fetch_ready(sub, 8, 30.0)
        # All three, without waiting out the 30 s that fetch(8) would linger for.
        assert [m.data for m in msgs] == [b"0", b"1", b"2"]
        assert time.monotonic() - started < 15
        await js.delete_stream(name)
    finally:
        await nc.drain()
