"""gpudra's NATS layer: subjects, protobuf codecs with schema versions, streams and KV buckets,
connections that reconnect forever, publishing that survives outages, dead letters, W3C trace
propagation in message headers, and KV key listings and watches that survive cancellation and
server restarts.

Typical use in a service::

    nc = await connect(url, name="allocator")
    await ensure_streams(nc.jetstream())
    buckets = await ensure_buckets(nc.jetstream())
    publisher = Publisher(nc)
    await publisher.publish(subjects.claims(ns, name), event, CLAIM_EVENT, msg_id=uid)
"""

from __future__ import annotations

from gpudra_bus import subjects, tracing
from gpudra_bus.codec import DEFAULT_MAX_BYTES, SCHEMA_HEADER, Codec, Schema, schema_of
from gpudra_bus.codecs import ALLOCATION_DECISION, CLAIM_EVENT, RELEASED
from gpudra_bus.connection import (
    NATS_ERRORS,
    Backoff,
    connect,
    disconnect,
    flush_subscriptions,
    translate,
    wrong_revision,
)
from gpudra_bus.consume import fetch_ready
from gpudra_bus.errors import (
    BusError,
    BusPermanentError,
    BusRetryableError,
    BusTimeoutError,
    CodecError,
    CorruptMessageError,
    InvalidSubjectError,
    MissingSchemaError,
    NotConnectedError,
    OversizedMessageError,
    SchemaMismatchError,
    StreamConfigError,
)
from gpudra_bus.kvlist import current_entries, live_keys
from gpudra_bus.kvwatch import (
    WATCH_HEARTBEAT,
    ResumingBucket,
    resume_quickly,
    resuming_bucket,
    watch_kv,
)
from gpudra_bus.publisher import DeadLetters, Publisher, receive
from gpudra_bus.streams import (
    BUCKETS,
    CLAIM_TEMPLATES_BUCKET,
    CLAIMS_BUCKET,
    CLAIMS_STREAM,
    DEADLETTER_STREAM,
    DECISIONS_STREAM,
    DEVICE_CLASSES_BUCKET,
    DUPLICATE_WINDOW,
    INVENTORY_STREAM,
    PODS_BUCKET,
    RESERVATIONS_BUCKET,
    SLICES_BUCKET,
    STREAMS,
    BucketSpec,
    StreamSpec,
    ensure_bucket,
    ensure_buckets,
    ensure_stream,
    ensure_streams,
)

__all__ = [
    "ALLOCATION_DECISION",
    "BUCKETS",
    "Backoff",
    "BucketSpec",
    "BusError",
    "BusPermanentError",
    "BusRetryableError",
    "BusTimeoutError",
    "CLAIMS_BUCKET",
    "CLAIMS_STREAM",
    "CLAIM_EVENT",
    "CLAIM_TEMPLATES_BUCKET",
    "Codec",
    "CodecError",
    "CorruptMessageError",
    "DEADLETTER_STREAM",
    "DECISIONS_STREAM",
    "DEFAULT_MAX_BYTES",
    "DEVICE_CLASSES_BUCKET",
    "DUPLICATE_WINDOW",
    "DeadLetters",
    "INVENTORY_STREAM",
    "InvalidSubjectError",
    "MissingSchemaError",
    "NATS_ERRORS",
    "NotConnectedError",
    "OversizedMessageError",
    "PODS_BUCKET",
    "Publisher",
    "RELEASED",
    "RESERVATIONS_BUCKET",
    "ResumingBucket",
    "SCHEMA_HEADER",
    "SLICES_BUCKET",
    "STREAMS",
    "Schema",
    "SchemaMismatchError",
    "StreamConfigError",
    "StreamSpec",
    "WATCH_HEARTBEAT",
    "connect",
    "current_entries",
    "disconnect",
    "flush_subscriptions",
    "ensure_bucket",
    "ensure_buckets",
    "ensure_stream",
    "ensure_streams",
    "fetch_ready",
    "live_keys",
    "receive",
    "resume_quickly",
    "resuming_bucket",
    "schema_of",
    "subjects",
    "tracing",
    "translate",
    "watch_kv",
    "wrong_revision",
]
