"""Listing a JetStream KV bucket's live keys: bounded in time, and leaving nothing behind.

nats-py's `KeyValue.keys()` lists through an ordered watcher that may signal "no more entries"
before it delivers the first one when it loses a race with them (it then raises `NoKeysError` for
a bucket that has keys), has no time bound, and leaves its subscription and its consumer behind
when it is cancelled (a time bound put around it does exactly that): the client keeps the
subscription for good, the server the consumer for the watcher's 5 minutes of inactivity.

`live_keys` lists with a consumer of its own instead (last entry per key, headers only, no acks)
and promises:
- one listing takes at most `timeout` seconds (`LIST_TIMEOUT`) of reading; one that times out is
  asked again, up to `tries` listings, while the bucket's stream holds messages; after `tries`
  failed listings it raises `TimeoutError` (an empty answer would read as "no keys");
- a listing that ends in any way — done, timed out, cancelled, failed — unsubscribes and deletes
  its consumer before it returns. A timeout or cancellation that comes while the consumer is being
  created first lets the creation finish (bounded by the JetStream request timeout), so the
  consumer's name is known to delete; should the server be unreachable for the delete, it drops
  the consumer itself once nobody listens for `INACTIVE_THRESHOLD` seconds;
- the answer is exact for the moment the consumer was created: keys whose last entry is a
  deletion or purge are left out, and a listing that lost a message (a slow consumer) is asked
  again rather than answered short.
NATS errors other than timeouts are the caller's (translate or retry them).

`current_entries` reads the last entry of every key (deletion markers included) through a KV
watch, as nats-py's iteration of a watcher does, but bounded: nats-py's `async for` waits with no
time limit for the marker that ends the initial values, so a watch that stalls (a consumer lost
in a NATS restart) held the reader for ever. Here each entry must come within `idle` seconds
(`READ_IDLE`), else `TimeoutError`; the watcher is stopped however the read ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE, KeyValue

from gpudra_bus.connection import NATS_ERRORS
from gpudra_bus.kvwatch import MARKER_REASON

READ_IDLE = 10.0  # seconds `current_entries` waits for the next entry
TRIES = 50
PAUSE = 0.02
LIST_TIMEOUT = 5.0  # seconds one listing may take before it is asked again
INACTIVE_THRESHOLD = 30.0  # seconds the server keeps a listing's consumer nobody listens to

_DELETED = (KV_DEL, KV_PURGE)


class _Lost(Exception):
    """The listing missed a message (the client dropped it): list again."""


async def live_keys(
    kv: KeyValue,
    prefix: str = "",
    *,
    tries: int = TRIES,
    pause: float = PAUSE,
    timeout: float = LIST_TIMEOUT,
) -> list[str]:
    """The bucket's live keys starting with `prefix`, sorted; `TimeoutError` when no listing
    completed in `tries`."""
    for _ in range(max(1, tries)):
        try:
            keys = await _list(kv, timeout)
        except (TimeoutError, _Lost):
            if (await kv.status()).values == 0:
                return []
            await asyncio.sleep(pause)
            continue
        return sorted(k for k in keys if k.startswith(prefix))
    # Not "no keys": a caller that reconciles against the answer would act on a bucket it
    # never saw.
    raise TimeoutError(f"listing the keys of {_bucket(kv)[2]}: no answer in {tries} tries")


async def current_entries(
    kv: KeyValue, keys: str = ">", *, idle: float = READ_IDLE
) -> list[KeyValue.Entry]:
    """The last entry of every key matching `keys`, deletion markers included (see the module
    docstring); `TimeoutError` when the watch delivers nothing for `idle` seconds first."""
    watcher = await kv.watch(keys)
    try:
        entries: list[KeyValue.Entry] = []
        while True:
            try:
                entry = await watcher.updates(timeout=idle)  # type: ignore[no-untyped-call]
            except nats.errors.TimeoutError as exc:
                raise TimeoutError(
                    f"reading {keys} of {kv._stream}: nothing for {idle:g} s after "
                    f"{len(entries)} entries"
                ) from exc
            if entry is None:
                return entries
            entries.append(entry)
    finally:
        with contextlib.suppress(*NATS_ERRORS):
            await watcher.stop()  # type: ignore[no-untyped-call]


def _bucket(kv: KeyValue) -> tuple[JetStreamContext, Client, str, str]:
    # nats-py keeps a bucket's JetStream context (and its client), stream and prefix private.
    js: JetStreamContext = kv._js
    return js, js._nc, kv._stream, kv._pre


async def _list(kv: KeyValue, timeout: float) -> list[str]:
    js, nc, stream, pre = _bucket(kv)
    name = f"gpudra-keys-{uuid.uuid4().hex}"
    config = ConsumerConfig(
        name=name,
        deliver_subject=nc.new_inbox(),
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        ack_policy=AckPolicy.NONE,
        filter_subject=f"{pre}>",
        headers_only=True,
        inactive_threshold=INACTIVE_THRESHOLD,
        mem_storage=True,
        num_replicas=1,
    )
    # Shielded: cancelled half way, nats-py would leave a consumer (or a subscription) that no
    # one knows of. It finishes on its own, within its request timeout, and `finally` cleans up.
    setup = asyncio.ensure_future(_subscribe(js, stream, config))
    try:
        async with asyncio.timeout(timeout):
            pending, sub = await asyncio.shield(setup)
            return await _read(sub, pre, pending)
    finally:
        await _close(js, stream, name, setup)


async def _subscribe(
    js: JetStreamContext, stream: str, config: ConsumerConfig
) -> tuple[int, JetStreamContext.PushSubscription]:
    info = await js.add_consumer(stream, config=config)
    sub = await js.subscribe_bind(stream, config, info.name, manual_ack=True)
    return info.num_pending or 0, sub


async def _read(sub: JetStreamContext.PushSubscription, pre: str, pending: int) -> list[str]:
    keys: list[str] = []
    # The consumer was created before anyone listened, so nothing was delivered yet: no pending
    # entries means an empty bucket, and otherwise the one with none left after it is the last.
    expected = 1
    while pending:
        msg = await sub.next_msg(timeout=None)
        meta = msg.metadata
        if meta.sequence.consumer != expected:
            raise _Lost(f"listing got entry {meta.sequence.consumer}, expected {expected}")
        expected += 1
        headers = msg.headers or {}
        if headers.get(KV_OP) not in _DELETED and MARKER_REASON not in headers:
            keys.append(msg.subject[len(pre) :])
        pending = meta.num_pending
    return keys


async def _close(
    js: JetStreamContext,
    stream: str,
    name: str,
    setup: asyncio.Future[tuple[int, JetStreamContext.PushSubscription]],
) -> None:
    try:
        _, sub = await setup
    except NATS_ERRORS:
        sub = None  # no subscription; the consumer may exist all the same (a lost answer)
    if sub is not None:
        with contextlib.suppress(*NATS_ERRORS):
            await sub.unsubscribe()
    with contextlib.suppress(nats.js.errors.NotFoundError, *NATS_ERRORS):
        await js.delete_consumer(stream, name)
