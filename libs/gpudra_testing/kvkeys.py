"""JetStream KV buckets in tests: listing keys without nats-py's race, counting reads.

`BucketReads` records every read of a bucket's stream that any client asks JetStream for, so a
test can say how many round trips an operation made; its count is complete once the operation
returned (a list a subscription callback fills may lag behind: counted right after a flush, it
can miss the last read). nats-py's `KeyValue.keys()` lists through an ordered watcher that may signal "no more entries"
before it delivers the first one when it loses a race with them; it then raises `NoKeysError` for
a bucket that has keys. Tests that read what the services stored (reservations, slices) call
`bucket_keys` instead (`gpudra_bus.kvlist.live_keys`, which the services use too): an empty
listing of a bucket whose stream holds messages is asked again.
"""

from __future__ import annotations

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.js.kv import KeyValue

from gpudra_bus import flush_subscriptions
from gpudra_bus.kvlist import live_keys
from gpudra_testing.nats_queue import queued


async def bucket_keys(kv: KeyValue, prefix: str = "") -> list[str]:
    """The bucket's live keys starting with `prefix`, sorted (`gpudra_bus.kvlist.live_keys`)."""
    return await live_keys(kv, prefix)


def _read_subjects(bucket: str) -> tuple[str, str]:
    stream = f"KV_{bucket}"
    return f"$JS.API.STREAM.MSG.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}.>"


class BucketReads:
    """The reads of a bucket's stream (message get or direct get) any client asks JetStream for,
    listening on `nc` with subscriptions without a callback (`gpudra_testing.nats_queue`).
    `close()` it, or close `nc` without draining: reads left queued hold a drain 30 s."""

    def __init__(self, nc: Client, subs: list[Subscription]) -> None:
        self._nc = nc
        self._subs = subs
        self._seen: list[str] = []

    @classmethod
    async def of(cls, nc: Client, bucket: str) -> BucketReads:
        """Reads of `bucket` from now on."""
        subs = [await nc.subscribe(subject) for subject in _read_subjects(bucket)]
        await flush_subscriptions(nc)
        return cls(nc, subs)

    async def so_far(self) -> list[str]:
        """The subjects of the reads asked for since `of` (message gets, then direct gets). Every
        read whose asker got its answer is there: a store's reads are requests, so once an
        operation returned, its reads are counted."""
        self._seen += [msg.subject for msg in await queued(self._nc, *self._subs)]
        return list(self._seen)

    async def close(self) -> None:
        """Stop listening (what is still queued is dropped)."""
        for sub in self._subs:
            await sub.unsubscribe()
