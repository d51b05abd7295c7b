"""The JetStream streams and KV buckets gpudra needs, created idempotently at start.

Promises:
- `ensure_streams` / `ensure_buckets` may run any number of times, from every service at once:
  a missing stream or bucket is created; an existing one with the same configuration is left alone;
  one whose configuration differs is updated where JetStream allows it, otherwise the call fails
  with `StreamConfigError` naming it (never silently keeps a wrong retention policy).
- The layout: the inventory stream keeps only the last message per node (a new node-agent snapshot
  replaces the old one, and a restarted consumer sees every node's latest); the claims stream is a
  work queue (each event is removed once a consumer acks it); decisions and dead letters are kept
  for a bounded time. Publishes may carry `Nats-Msg-Id` and are de-duplicated within
  `DUPLICATE_WINDOW`.
- JetStream that does not answer yet (a cluster electing its meta leader, which takes seconds
  after the servers start; a server restarting) is waited for: `ensure_streams` and
  `ensure_buckets` retry retryable errors with a growing delay for up to `patience` seconds
  (default `ENSURE_PATIENCE`) before raising them. Without that every service crash-looped on a
  fresh deployment until the cluster had formed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.kv import KeyValue

from gpudra_bus import subjects
from gpudra_bus.connection import Backoff, translate
from gpudra_bus.errors import BusRetryableError, StreamConfigError
from gpudra_bus.kvwatch import resuming_bucket
from gpudra_bus.subjects import Kind

log = logging.getLogger(__name__)
T = TypeVar("T")

DUPLICATE_WINDOW = 120.0  # seconds
ENSURE_PATIENCE = 60.0  # seconds JetStream may take to answer at start
_DAY = 24 * 3600.0
# JetStream's "stream name already in use with a different configuration".
_ERR_STREAM_NAME_IN_USE = 10058

INVENTORY_STREAM = "GPUDRA_INVENTORY"
CLAIMS_STREAM = "GPUDRA_CLAIMS"
DECISIONS_STREAM = "GPUDRA_DECISIONS"
DEADLETTER_STREAM = "GPUDRA_DEADLETTER"

SLICES_BUCKET = "gpudra-slices"
RESERVATIONS_BUCKET = "gpudra-reservations"
CLAIMS_BUCKET = "gpudra-claims"
CLAIM_TEMPLATES_BUCKET = "gpudra-claimtemplates"
DEVICE_CLASSES_BUCKET = "gpudra-deviceclasses"
PODS_BUCKET = "gpudra-pods"


@dataclass(frozen=True)
class StreamSpec:
    """One stream: the parts of its configuration gpudra cares about."""

    name: str
    subjects: tuple[str, ...]
    retention: RetentionPolicy = RetentionPolicy.LIMITS
    max_msgs_per_subject: int = -1
    max_age: float = 0.0  # seconds; 0 = unlimited
    max_bytes: int = -1
    description: str = ""

    def config(self, replicas: int) -> StreamConfig:
        return StreamConfig(
            name=self.name,
            description=self.description or None,
            subjects=list(self.subjects),
            retention=self.retention,
            max_msgs_per_subject=self.max_msgs_per_subject,
            max_age=self.max_age or None,
            max_bytes=self.max_bytes,
            storage=StorageType.FILE,
            num_replicas=replicas,
            discard=DiscardPolicy.OLD,
            # JetStream requires the window to fit inside max_age.
            duplicate_window=min(DUPLICATE_WINDOW, self.max_age or DUPLICATE_WINDOW),
            allow_direct=True,
        )


@dataclass(frozen=True)
class BucketSpec:
    """One KV bucket."""

    name: str
    history: int = 1
    description: str = ""

    def config(self, replicas: int) -> KeyValueConfig:
        return KeyValueConfig(
            bucket=self.name,
            description=self.description or None,
            history=self.history,
            storage=StorageType.FILE,
            replicas=replicas,
        )


STREAMS: tuple[StreamSpec, ...] = (
    StreamSpec(
        INVENTORY_STREAM,
        (subjects.all_of(Kind.INVENTORY),),
        max_msgs_per_subject=1,
        description="latest NodeInventory per node",
    ),
    StreamSpec(
        CLAIMS_STREAM,
        (subjects.all_of(Kind.CLAIMS),),
        retention=RetentionPolicy.WORK_QUEUE,
        description="ClaimEvents waiting for an allocator",
    ),
    StreamSpec(
        DECISIONS_STREAM,
        (subjects.all_of(Kind.ALLOCATIONS),),
        max_age=7 * _DAY,
        description="allocation decisions and releases",
    ),
    StreamSpec(
        DEADLETTER_STREAM,
        (f"{subjects.ROOT}.{Kind.DEADLETTER.value}.>",),
        max_age=7 * _DAY,
        max_bytes=256 * 1024 * 1024,
        description="malformed messages, kept for inspection",
    ),
)

BUCKETS: tuple[BucketSpec, ...] = (
    BucketSpec(SLICES_BUCKET, description="ResourceSlices by name"),
    BucketSpec(RESERVATIONS_BUCKET, description="device reservations (compare-and-set)"),
    BucketSpec(CLAIMS_BUCKET, description="standalone ResourceClaims as v1 JSON"),
    BucketSpec(CLAIM_TEMPLATES_BUCKET, description="standalone ResourceClaimTemplates"),
    BucketSpec(DEVICE_CLASSES_BUCKET, description="standalone DeviceClasses"),
    BucketSpec(PODS_BUCKET, description="standalone Pods (consumers and scheduling gates)"),
)


def _name_in_use(exc: nats.js.errors.APIError) -> bool:
    return exc.err_code == _ERR_STREAM_NAME_IN_USE


async def ensure_stream(js: JetStreamContext, spec: StreamSpec, *, replicas: int = 1) -> None:
    """Create `spec`'s stream, or bring an existing one to `spec`'s configuration."""
    config = spec.config(replicas)
    try:
        await js.add_stream(config)
        return
    except nats.js.errors.BadRequestError as exc:
        if not _name_in_use(exc):
            raise StreamConfigError(f"creating stream {spec.name}: {exc}") from exc
    except ValueError as exc:  # nats-py validates names before asking the server
        raise StreamConfigError(f"creating stream {spec.name}: {exc}") from exc
    except (nats.errors.Error, OSError) as exc:
        raise translate(exc, f"creating stream {spec.name}") from exc
    try:
        await js.update_stream(config)
    except nats.js.errors.APIError as exc:
        raise StreamConfigError(
            f"stream {spec.name} exists with a configuration that cannot be updated: {exc}"
        ) from exc
    except (nats.errors.Error, OSError) as exc:
        raise translate(exc, f"updating stream {spec.name}") from exc


async def ensure_bucket(js: JetStreamContext, spec: BucketSpec, *, replicas: int = 1) -> KeyValue:
    """Create `spec`'s KV bucket (or accept an identical one) and return a handle to it, whose
    watches resume within seconds of a server restart (`kvwatch.resuming_bucket`)."""
    try:
        return resuming_bucket(await js.create_key_value(spec.config(replicas)))
    except nats.js.errors.BadRequestError as exc:
        if not _name_in_use(exc):
            raise StreamConfigError(f"creating bucket {spec.name}: {exc}") from exc
    except (ValueError, nats.js.errors.InvalidBucketNameError) as exc:
        raise StreamConfigError(f"creating bucket {spec.name}: {exc}") from exc
    except (nats.errors.Error, OSError) as exc:
        raise translate(exc, f"creating bucket {spec.name}") from exc
    # The bucket exists with other settings (history, replicas, ...): a bucket is a stream named
    # KV_<bucket>; update that stream's settings we own, keep the rest as the server has it.
    # Replicas and storage are ours too: a bucket left at one replica after the setting was
    # raised, or kept in memory, loses its contents with one server; JetStream refuses a storage
    # change, which surfaces as the StreamConfigError below, as it does for a stream.
    stream = f"KV_{spec.name}"
    wanted = spec.config(replicas)
    try:
        info = await js.stream_info(stream)
        await js.update_stream(
            replace(
                info.config,
                description=wanted.description,
                max_msgs_per_subject=wanted.history,
                num_replicas=wanted.replicas,
                storage=wanted.storage,
            )
        )
        return resuming_bucket(await js.key_value(spec.name))
    except nats.js.errors.APIError as exc:
        raise StreamConfigError(f"bucket {spec.name} cannot be reconciled: {exc}") from exc
    except (nats.errors.Error, OSError) as exc:
        raise translate(exc, f"opening bucket {spec.name}") from exc


async def _patiently(what: str, call: Callable[[], Awaitable[T]], patience: float) -> T:
    """`call()`, retried while it fails with a retryable error, for up to `patience` seconds."""
    backoff = Backoff(initial=0.2, maximum=5.0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    attempt = 0
    while True:
        try:
            return await call()
        except BusRetryableError as exc:
            wait = backoff.delay(attempt)
            attempt += 1
            if loop.time() + wait > deadline:
                raise
            log.info("%s: %s; JetStream not ready, retrying in %.1fs", what, exc, wait)
            await asyncio.sleep(wait)


async def ensure_streams(
    js: JetStreamContext,
    specs: Sequence[StreamSpec] = STREAMS,
    *,
    replicas: int = 1,
    patience: float = ENSURE_PATIENCE,
) -> None:
    """`ensure_stream` for every spec (default: all of gpudra's streams), each retried while
    JetStream is not ready, for up to `patience` seconds."""
    for spec in specs:
        await _patiently(
            f"stream {spec.name}",
            functools.partial(ensure_stream, js, spec, replicas=replicas),
            patience,
        )


async def ensure_buckets(
    js: JetStreamContext,
    specs: Sequence[BucketSpec] = BUCKETS,
    *,
    replicas: int = 1,
    patience: float = ENSURE_PATIENCE,
) -> dict[str, KeyValue]:
    """`ensure_bucket` for every spec (default: all of gpudra's buckets), handles by name; each
    retried while JetStream is not ready, for up to `patience` seconds."""
    out: dict[str, KeyValue] = {}
    for spec in specs:
        out[spec.name] = await _patiently(
            f"bucket {spec.name}",
            functools.partial(ensure_bucket, js, spec, replicas=replicas),
            patience,
        )
    return out
