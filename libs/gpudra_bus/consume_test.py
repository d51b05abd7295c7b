from __future__ import annotations

import json
import time
import uuid

import nats
import nats.errors
import pytest
from nats.aio.client import Client

from gpudra_bus.connection import flush_subscriptions
from gpudra_bus.consume import fetch_ready
from gpudra_testing.nats_queue import queued as taken


async def test_returns_the_first_message_at_once_and_tops_up_what_is_queued(nc: Client) -> None:
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
    # Without waiting out the 30 s that fetch(8) would linger for; on a loaded machine the
    # short top-up can end before the rest arrive: they wait in the subscription for the next
    # call, in order, and nothing is lost.
    got = [m.data for m in msgs]
    assert got
    assert time.monotonic() - started < 15
    while len(got) < 3 and time.monotonic() - started < 15:
        got += [m.data for m in await fetch_ready(sub, 8, 5.0)]
    assert got == [b"0", b"1", b"2"]
    assert time.monotonic() - started < 15
    await sub.unsubscribe()  # as the services do before draining: a pull subscription's
    await js.delete_stream(name)  # late status messages would hold up the drain


@pytest.mark.parametrize(
    ("queued", "top_ups"),
    [
        pytest.param(1, 0, id="lone-message-no-top-up"),
        pytest.param(5, 1, id="backlog-one-top-up"),
    ],
)
async def test_tops_up_only_when_more_are_pending(nats_url: str, queued: int, top_ups: int) -> None:
    nc = await nats.connect(nats_url)
    spy = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        name = f"CONSUME_{uuid.uuid4().hex[:8]}"
        await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
        sub = await js.pull_subscribe(f"{name.lower()}.>", durable="c", stream=name)
        for i in range(queued):
            await js.publish(f"{name.lower()}.x", str(i).encode())
        pulls = await spy.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{name}.c")
        await flush_subscriptions(spy)
        msgs = await fetch_ready(sub, 8, 5.0)
        assert [m.data for m in msgs] == [str(i).encode() for i in range(queued)]
        # A top-up that timed out may not have left nats-py yet: flushed, it reached the server,
        # and the spy then holds every request (no callback: queued as it arrived). The top-ups
        # are the requests for more than one message (the first pull asks for one).
        await flush_subscriptions(nc)
        requests = [m.data for m in await taken(spy, pulls)]
        await pulls.unsubscribe()  # a request left queued would hold the spy's drain 30 s
        batches = [json.loads(r)["batch"] for r in requests]
        assert len([b for b in batches if b > 1]) == top_ups, requests
        await sub.unsubscribe()
        await js.delete_stream(name)
    finally:
        await spy.drain()
        await nc.drain()
