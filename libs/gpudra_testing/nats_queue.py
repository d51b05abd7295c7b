"""Counting in tests what a NATS subscription received, without racing a callback.

nats-py hands a subscription's messages to its callback from a task of its own, so a list that a
callback fills may still lack the last ones when a test looks right after a flush (CI failed on
exactly that). A subscription *without* a callback has every message the server sent it before a
flush's answer in its queue once that flush returns: `queued` flushes the subscription's client and
takes those messages off the queue. It waits for nothing else, so what it returns is complete
only for messages that had reached the server: another client's publishes count once that client
got their answers (a request) or was flushed itself (`gpudra_bus.flush_subscriptions`).

Unsubscribe such a subscription, or close its client without draining, before the client
drains: nats-py's drain waits for every queued message to be taken, up to its 30 s timeout.
"""

from __future__ import annotations

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from gpudra_bus import flush_subscriptions

TIMEOUT = 10.0  # seconds: a flush on a loaded CI machine


async def queued(nc: Client, *subs: Subscription) -> list[Msg]:
    """The messages the server has sent `subs` (`nc`'s, without callbacks) and nobody took yet,
    taken off their queues: those of the first subscription first, each in arrival order."""
    # Two flushes: the first may overtake a SUB still queued in nats-py (flush_subscriptions).
    await flush_subscriptions(nc, TIMEOUT)
    taken: list[Msg] = []
    for sub in subs:
        for _ in range(sub.pending_msgs):
            taken.append(await sub.next_msg(timeout=TIMEOUT))  # queued already: at once
    return taken
