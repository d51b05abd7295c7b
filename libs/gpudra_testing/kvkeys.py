"""JetStream KV buckets in tests: listing keys without nats-py's race, counting reads.

`bucket_reads` records every read of a bucket's stream that any client asks JetStream for, so a
test can say how many round trips an operation made. nats-py's `KeyValue.keys()` lists through an ordered watcher that may signal "no more entries"
before it delivers the first one when it loses a race with them; it then raises `NoKeysError` for
a bucket that has keys. Tests that read what the services stored (reservations, slices) call
`bucket_keys` instead (`gpudra_bus.kvlist.live_keys`, which the services use too): an empty
listing of a bucket whose stream holds messages is asked again.
"""

from __future__ import annotations

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from gpudra_bus import flush_subscriptions
from gpudra_bus.kvlist import live_keys


async def bucket_keys(kv: KeyValue, prefix: str = "") -> list[str]:
    """The bucket's live keys starting with `prefix`, sorted (`gpudra_bus.kvlist.live_keys`)."""
    return await live_keys(kv, prefix)


async def bucket_reads(nc: Client, bucket: str) -> list[str]:
    """A list that grows by the subject of every read of `bucket`'s stream (message get or direct
    get) any client asks JetStream for, as it is asked; listening on `nc`."""
    reads: list[str] = []

    async def seen(msg: Msg) -> None:
        reads.append(msg.subject)

    stream = f"KV_{bucket}"
    for subject in (f"$JS.API.STREAM.MSG.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}.>"):
        await nc.subscribe(subject, cb=seen)
    await flush_subscriptions(nc)
    return reads
