"""Watching a JetStream KV bucket so that a watch follows again within seconds of a NATS restart.

nats-py's `KeyValue.watch` follows the bucket with an ordered push consumer whose server sends
idle heartbeats every 5 s. A restarted server has lost that (memory-stored, ephemeral) consumer;
the client reconnects within a second and replays its subscriptions, but nothing feeds them
until nats-py notices the missing heartbeats — it looks every 2 heartbeat intervals and resets
the consumer on the second look without one — so a watch went quiet for 10 to 20 s (19 s
measured, `bench/kv_watch_resume.py`). `kv.watch` has no way to ask for another interval.

`watch_kv` is `KeyValue.watch` (the same entries, the same `None` marker once the watch has caught
up, the same `KeyValue.KeyWatcher` to iterate and stop) with heartbeats every `WATCH_HEARTBEAT`
seconds and a check of them of our own (`resume_quickly`) in place of nats-py's. The `None` marker
never comes before the replay: nats-py's watch could signal an empty bucket when the server had
sent the replay but the client had not read it yet (it counts the client's messages; this counts
the server's), and a slice index then started empty. The check of heartbeats:
- a watch whose consumer is gone is reset within 2 heartbeat intervals of the reconnection
  (2.4 s after the restart, measured; 18.4 s with nats-py's watch);
- no reset is tried while the client is disconnected: nats-py's check kept trying, and each try
  queued a consumer creation that the server carried out at the reconnection, for a consumer no
  one would listen to (kept 5 minutes);
- a check that wakes more than half a heartbeat late (this process was starved) resets nothing:
  the heartbeats may be unread, not missing;
- a reset that does not bring the watch back (JetStream not ready yet, the bucket gone) is tried
  again with exponential backoff, from 2 heartbeat intervals up to `RESET_MAX` seconds, where
  nats-py tried every 2 intervals for ever; once the watch is heard from again the backoff
  starts again at 2 intervals, so a second restart soon after a long outage is not waited out.
Consumers a watch leaves without a listener all the same (a reset whose answer was lost) are
dropped by the server after `INACTIVE_THRESHOLD` seconds (nats-py's watch keeps them 5 minutes).

`resuming_bucket(kv)` is the bucket whose `watch` and `watchall` (and nats-py's `keys` and
`history`, which watch too) are `watch_kv`'s: `ensure_bucket` / `ensure_buckets` hand out such
buckets, so every service's watch of a gpudra bucket resumes quickly without asking. An ordered
consumer of its own that must resume after a restart asks for `WATCH_HEARTBEAT` and calls
`resume_quickly` on its subscription (`gpudra_kube.kv_backend`'s watches do).

How long the client takes to reconnect is not this module's: `connection.connect`'s backoff
(up to 5 s between attempts after a long outage) comes first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.msg import Msg
from nats.js.api import ConsumerInfo, DeliverPolicy
from nats.js.client import JetStreamContext
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE, KeyValue

from gpudra_bus.connection import Backoff

WATCH_HEARTBEAT = 1.0  # seconds between the server's idle heartbeats to a watch
INACTIVE_THRESHOLD = 60.0  # seconds the server keeps a watch's consumer nobody listens to
RESET_MAX = 30.0  # seconds between two resets of a watch that stays quiet, at most

MARKER_REASON = "Nats-Marker-Reason"  # nats-server 2.11+: TTL / purge markers
_MARKER_OPS = {"MaxAge": KV_PURGE, "Purge": KV_PURGE, "Remove": KV_DEL}


async def watch_kv(
    kv: KeyValue,
    keys: str = ">",
    *,
    include_history: bool = False,
    ignore_deletes: bool = False,
    meta_only: bool = False,
    heartbeat: float = WATCH_HEARTBEAT,
    inactive_threshold: float = INACTIVE_THRESHOLD,
) -> KeyValue.KeyWatcher:
    """A watch of `keys` in `kv`, as `kv.watch(keys, ...)`, resuming quickly (module docstring)."""
    # nats-py keeps a bucket's JetStream context, name, stream and subject prefix private, and
    # fills a KeyWatcher through its private queue, as done here.
    js: JetStreamContext = kv._js
    prefix = kv._pre
    watcher = KeyValue.KeyWatcher(kv)  # type: ignore[no-untyped-call]
    queue = watcher._updates
    setup: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def caught_up(pending: int) -> None:
        if pending == 0 and not watcher._init_done:
            watcher._init_done = True
            await queue.put(None)

    async def on_msg(msg: Msg) -> None:
        if not setup.done():
            await asyncio.wait_for(asyncio.shield(setup), js._timeout)
        meta = msg.metadata
        headers = msg.headers or {}
        op = headers.get(KV_OP)
        if op is None and MARKER_REASON in headers:
            op = _MARKER_OPS.get(headers[MARKER_REASON])
            if op is None:  # a marker of a kind this code does not know: no entry
                await caught_up(meta.num_pending)
                return
        if ignore_deletes and op in (KV_DEL, KV_PURGE):
            await caught_up(meta.num_pending)
            return
        entry = KeyValue.Entry(
            bucket=kv._name,
            key=msg.subject[len(prefix) :],
            value=msg.data,
            revision=meta.sequence.stream,
            delta=meta.num_pending,
            created=meta.timestamp,  # type: ignore[arg-type]  # a datetime, as nats-py's
            operation=op,
        )
        await queue.put(entry)
        await caught_up(meta.num_pending)

    watcher._sub = await js.subscribe(
        f"{prefix}{keys}",
        stream=kv._stream,
        cb=on_msg,
        ordered_consumer=True,
        idle_heartbeat=heartbeat,
        deliver_policy=None if include_history else DeliverPolicy.LAST_PER_SUBJECT,
        headers_only=meta_only,
        inactive_threshold=inactive_threshold,
    )
    resume_quickly(watcher._sub, heartbeat)
    try:
        info = await watcher._sub.consumer_info()
        watcher._pending = info.num_pending
        if nothing_to_deliver(info):
            await caught_up(0)  # nothing to replay; else the last message says caught up
    except BaseException:
        setup.cancel()
        await watcher._sub.unsubscribe()
        raise
    setup.set_result(None)
    return watcher


def nothing_to_deliver(info: ConsumerInfo) -> bool:
    """Whether a new consumer will deliver nothing at all: none pending and the *server* has
    sent none. The client's own count (`delivered`, which nats-py's watch asks) can still be 0
    when the server has sent the replay and the read loop has not counted it yet: asked that
    way, an empty answer could come before the replay. When the server sent some, the last one
    sent carries pending 0 in its metadata."""
    sent = info.delivered.consumer_seq if info.delivered is not None else 0
    return info.num_pending == 0 and sent == 0


class ResumingBucket(KeyValue):
    """A KV bucket whose watches are `watch_kv`'s (see the module docstring)."""

    async def watch(
        self,
        keys: str,
        headers_only: bool = False,
        include_history: bool = False,
        ignore_deletes: bool = False,
        meta_only: bool = False,
        inactive_threshold: float | None = None,
    ) -> KeyValue.KeyWatcher:
        # `headers_only` is accepted and ignored, as nats-py's watch does (`meta_only` is it).
        return await watch_kv(
            self,
            keys,
            include_history=include_history,
            ignore_deletes=ignore_deletes,
            meta_only=meta_only,
            inactive_threshold=inactive_threshold or INACTIVE_THRESHOLD,
        )


def resuming_bucket(kv: KeyValue) -> ResumingBucket:
    """`kv` as a `ResumingBucket` (the same bucket, connection and options)."""
    if isinstance(kv, ResumingBucket):
        return kv
    return ResumingBucket(
        name=kv._name, stream=kv._stream, pre=kv._pre, js=kv._js, direct=kv._direct
    )


def resume_quickly(sub: JetStreamContext.PushSubscription, heartbeat: float) -> None:
    """Check `sub`'s heartbeats our way (see the module docstring) instead of nats-py's.

    `sub` is an ordered push subscription made with `idle_heartbeat=heartbeat`; its
    `unsubscribe()` ends the check, as it ends nats-py's.
    """
    # nats-py keeps an ordered subscription's state (`_JSI`) and its check task private.
    jsi: Any = sub._sub._jsi
    if jsi is None or not jsi._ordered or jsi._hbtask is None:
        raise ValueError("resume_quickly needs an ordered push subscription with heartbeats")
    jsi._hbtask.cancel()
    jsi._hbtask = asyncio.create_task(_check_heartbeats(jsi, heartbeat), name="kv-watch-heartbeats")


async def _check_heartbeats(jsi: Any, heartbeat: float) -> None:
    nc = jsi._conn
    window = 2 * heartbeat  # nats-py's: a consumer may miss one heartbeat, not two
    backoff = Backoff(initial=window, maximum=RESET_MAX)
    loop = asyncio.get_running_loop()
    resets = 0  # since the watch was last heard from
    next_reset = 0.0  # no reset before this (loop time): the backoff of the current silence
    while not nc.is_closed:
        started = loop.time()
        await asyncio.sleep(window)
        if jsi._active:  # set by nats-py on every message and heartbeat
            jsi._active = False
            # The watch is back: the backoff was for that silence. A later one (the server
            # restarts again soon after) is reset at the first look, not up to RESET_MAX later.
            resets = 0
            next_reset = 0.0
            continue
        if loop.time() - started - window > heartbeat / 2:
            # This process was starved (a loaded machine): the heartbeats may sit unread in the
            # socket. A reset proves nothing then and may skip a value the bucket has replaced.
            continue
        if not nc.is_connected or loop.time() < next_reset:
            continue
        await jsi.reset_ordered_consumer(jsi._sseq + 1)
        next_reset = loop.time() + backoff.delay(resets)
        resets += 1
