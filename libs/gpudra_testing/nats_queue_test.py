from __future__ import annotations

import nats

from gpudra_bus import flush_subscriptions
from gpudra_testing.nats_queue import queued


async def test_queued_takes_every_message_sent_before_it_in_order(nats_url: str) -> None:
    spy = await nats.connect(nats_url)
    other = await nats.connect(nats_url)
    try:
        first = await spy.subscribe("queue-test.a")
        second = await spy.subscribe("queue-test.b.>")
        await flush_subscriptions(spy)
        for i in range(50):
            await other.publish("queue-test.a", str(i).encode())
        await other.publish("queue-test.b.x", b"b")
        await flush_subscriptions(other)
        taken = await queued(spy, first, second)
        assert [m.data for m in taken] == [str(i).encode() for i in range(50)] + [b"b"]
        assert await queued(spy, first, second) == []  # taken off the queues
        await other.publish("queue-test.a", b"later")
        await flush_subscriptions(other)
        assert [m.data for m in await queued(spy, first)] == [b"later"]
    finally:
        await other.drain()
        await spy.close()  # not drained: a message left queued (a failed assertion) holds it 30 s
