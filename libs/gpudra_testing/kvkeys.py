"""Listing a JetStream KV bucket's keys in tests, without nats-py's empty-listing race.

nats-py's `KeyValue.keys()` lists through an ordered watcher that may signal "no more entries"
before it delivers the first one when it loses a race with them; it then raises `NoKeysError` for
a bucket that has keys. Tests that read what the services stored (reservations, slices) call
`bucket_keys` instead: an empty listing of a bucket whose stream holds messages is asked again.
"""

from __future__ import annotations

import asyncio

import nats.js.errors
from nats.js.kv import KeyValue

TRIES = 50
PAUSE = 0.02


async def bucket_keys(kv: KeyValue, prefix: str = "") -> list[str]:
    """The bucket's live keys starting with `prefix`, sorted; [] only for a bucket with no
    messages (or only deleted keys after `TRIES` listings)."""
    keys: list[str] = []
    for _ in range(TRIES):
        try:
            keys = await kv.keys()
            break
        except nats.js.errors.NoKeysError:
            if (await kv.status()).values == 0:
                return []
            await asyncio.sleep(PAUSE)
    return sorted(k for k in keys if k.startswith(prefix))
