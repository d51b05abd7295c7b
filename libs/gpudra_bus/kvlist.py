"""Listing a JetStream KV bucket's live keys without nats-py's short answer.

nats-py's `KeyValue.keys()` lists through an ordered watcher that may signal "no more entries"
before it delivers the first one when it loses a race with them; it then raises `NoKeysError` for
a bucket that has keys; and its watcher has no time bound, so a listing whose "no more entries"
never comes waits for ever (seen as a test that hung until its 600 s limit). `live_keys` bounds
each listing (`LIST_TIMEOUT`) and asks again while the bucket's stream holds messages, so an
empty answer means an empty bucket (or, after `tries` listings, one holding only deletions).
NATS errors other than `NoKeysError` are the caller's (translate or retry them).
"""

from __future__ import annotations

import asyncio

import nats.js.errors
from nats.js.kv import KeyValue

TRIES = 50
PAUSE = 0.02
LIST_TIMEOUT = 5.0  # seconds one listing may take before it is asked again


async def live_keys(
    kv: KeyValue, prefix: str = "", *, tries: int = TRIES, pause: float = PAUSE
) -> list[str]:
    """The bucket's live keys starting with `prefix`, sorted."""
    keys: list[str] = []
    for _ in range(max(1, tries)):
        try:
            keys = await asyncio.wait_for(kv.keys(), LIST_TIMEOUT)
            break
        except (nats.js.errors.NoKeysError, TimeoutError):
            if (await kv.status()).values == 0:
                return []
            await asyncio.sleep(pause)
    return sorted(k for k in keys if k.startswith(prefix))
