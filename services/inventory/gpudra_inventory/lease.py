"""Leader election between inventory replicas: a lease held as one key of a NATS KV bucket.

Why a KV key whose bucket has a max-age (the lease's TTL) rather than an expiry timestamp in the
value that the others compare with their own clocks: the server's clock alone decides when a lease
lapses — a holder that stops renewing loses the key `ttl` seconds after its last renewal was stored
— so the replicas need no synchronised clocks, only clocks that run at about the same rate. And
revision-checked create (only while the key is absent) and update (only at the revision the holder
wrote last) make acquiring and renewing compare-and-set operations on the server.

Promises:
- At most one holder at a time: two replicas racing for a free key cannot both win, and a renewal
  succeeds only if nobody else held the key since the holder's last write (revisions are unique
  stream sequence numbers).
- `held()` turns False at the latest `SAFETY * ttl` after the start of the last successful
  acquisition or renewal, measured on the local monotonic clock. The server expires that renewal
  no earlier than `ttl` after storing it, i.e. after it was sent, so a holder cut off from NATS
  stops acting as leader before any other replica can acquire the key.
- Each acquisition (not a renewal) increments `epoch`: the service re-reads what is written and
  takes over again whenever the epoch it led in is not the current one.
- `release()` deletes the key at the held revision: a graceful stop hands over within one retry
  interval of the standby instead of a whole TTL. A replica whose holder name equals the one in
  the key (the same pod, restarted) takes the lease back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from gpudra_bus import StreamConfigError, translate
from gpudra_inventory.nats_errors import NATS_ERRORS, wrong_revision

log = logging.getLogger(__name__)

LEASE_BUCKET = "gpudra-leases"
LEASE_KEY = "inventory"
# Fraction of the TTL a holder trusts its lease for after the start of a renewal: the rest
# absorbs clock-rate differences and the time between a write check and the write itself.
SAFETY = 0.75
_ERR_STREAM_NAME_IN_USE = 10058


async def ensure_lease_bucket(js: JetStreamContext, ttl: float, *, replicas: int = 1) -> KeyValue:
    """The lease bucket with max-age `ttl` (created, or an existing one's max-age set to `ttl`:
    every replica must run with the same TTL, the last one started wins)."""
    config = KeyValueConfig(
        bucket=LEASE_BUCKET,
        description="leader leases (key per service, expires after the holder's TTL)",
        history=1,
        ttl=ttl,
        storage=StorageType.FILE,
        replicas=replicas,
    )
    try:
        return await js.create_key_value(config)
    except nats.js.errors.BadRequestError as exc:
        if exc.err_code != _ERR_STREAM_NAME_IN_USE:
            raise StreamConfigError(f"creating bucket {LEASE_BUCKET}: {exc}") from exc
    except NATS_ERRORS as exc:
        raise translate(exc, f"creating bucket {LEASE_BUCKET}") from exc
    stream = f"KV_{LEASE_BUCKET}"
    try:
        info = await js.stream_info(stream)
        if info.config.max_age != ttl:
            log.warning("lease TTL changed from %ss to %ss", info.config.max_age, ttl)
            await js.update_stream(
                replace(info.config, max_age=ttl, duplicate_window=min(ttl, 120.0))
            )
        return await js.key_value(LEASE_BUCKET)
    except nats.js.errors.APIError as exc:
        raise StreamConfigError(f"bucket {LEASE_BUCKET} cannot be reconciled: {exc}") from exc
    except NATS_ERRORS as exc:
        raise translate(exc, f"opening bucket {LEASE_BUCKET}") from exc


class Lease:
    """One replica's side of the lease: `attempt()` acquires or renews, `run()` keeps doing so."""

    def __init__(
        self,
        kv: KeyValue,
        holder: str,
        ttl: float,
        *,
        key: str = LEASE_KEY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.holder = holder
        self.ttl = ttl
        self.epoch = 0
        self._kv = kv
        self._key = key
        self._clock = clock
        self._revision: int | None = None
        self._valid_until = float("-inf")

    @property
    def retry_interval(self) -> float:
        """Seconds between renewals (holder) or acquisition attempts (standby)."""
        return self.ttl / 4

    def held(self) -> bool:
        """Whether this replica may act as the leader now."""
        return self._revision is not None and self._clock() < self._valid_until

    async def attempt(self) -> bool:
        """Renew the lease, or acquire it if it is free; whether it is held afterwards. NATS
        being away is no error: the lease is then held until its local deadline passes."""
        started = self._clock()
        value = json.dumps({"holder": self.holder, "ttl": self.ttl}).encode()
        try:
            if self._revision is not None:
                try:
                    self._revision = await self._kv.update(self._key, value, last=self._revision)
                except nats.js.errors.KeyWrongLastSequenceError:
                    log.warning("lease %s lapsed or was taken: no longer the leader", self._key)
                    self._drop()
            if self._revision is None:
                revision = await self._acquire(value)
                if revision is None:
                    return False
                self._revision = revision
                self.epoch += 1
                log.info("lease %s acquired by %s (epoch %d)", self._key, self.holder, self.epoch)
        except NATS_ERRORS as exc:
            log.warning("lease %s not renewed (%s: %s)", self._key, type(exc).__name__, exc)
            return self.held()
        self._valid_until = started + self.ttl * SAFETY
        return True

    async def _acquire(self, value: bytes) -> int | None:
        try:
            return await self._kv.create(self._key, value)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        # Someone holds it. The same holder name is this replica restarted: take it back.
        try:
            entry = await self._kv.get(self._key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return None  # lapsed meanwhile; the next attempt creates it
        if _holder_of(entry.value) != self.holder or entry.revision is None:
            return None
        try:
            return await self._kv.update(self._key, value, last=entry.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return None

    def _drop(self) -> None:
        self._revision = None
        self._valid_until = float("-inf")

    async def current_holder(self) -> str | None:
        """The holder named in the key now (None when nobody holds the lease)."""
        try:
            entry = await self._kv.get(self._key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return None
        except NATS_ERRORS as exc:
            raise translate(exc, f"reading lease {self._key}") from exc
        return _holder_of(entry.value)

    async def run(self, stop: asyncio.Event) -> None:
        """Acquire or renew every `retry_interval` seconds until `stop` is set."""
        while not stop.is_set():
            await self.attempt()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.retry_interval)

    async def release(self) -> None:
        """Give the lease up (delete the key at the held revision); harmless when not held."""
        revision = self._revision
        self._drop()
        if revision is None:
            return
        # Past the local deadline too: the delete is revision-checked, so it cannot remove a key
        # someone else has written since.
        try:
            await self._kv.delete(self._key, last=revision)
            log.info("lease %s released by %s", self._key, self.holder)
        except NATS_ERRORS as exc:
            # Someone else's now, or NATS is away: the key expires by itself.
            level = logging.INFO if wrong_revision(exc) else logging.WARNING
            log.log(level, "lease %s not released (%s); it expires by itself", self._key, exc)


def _holder_of(value: bytes | None) -> str | None:
    try:
        holder = json.loads(value or b"").get("holder")
    except (ValueError, AttributeError):
        return None
    return holder if isinstance(holder, str) else None
