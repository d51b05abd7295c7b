from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gpudra_bus import streams, subjects, tracing
from gpudra_bus.codec import SCHEMA_HEADER
from gpudra_bus.codecs import ALLOCATION_DECISION, CLAIM_EVENT
from gpudra_bus.connection import Backoff
from gpudra_bus.errors import (
    BusRetryableError,
    CorruptMessageError,
    OversizedMessageError,
    StreamConfigError,
)
from gpudra_bus.publisher import (
    ERROR_TYPE_HEADER,
    ORIGINAL_SUBJECT_HEADER,
    TRUNCATED_FROM_HEADER,
    DeadLetters,
    Publisher,
    receive,
)
from gpudra_testing import NatsServer
from gpudrapb.v1 import claims_pb2

FAST = Backoff(initial=0.01, maximum=0.2)


def _event(name: str = "c1") -> claims_pb2.ClaimEvent:
    return claims_pb2.ClaimEvent(
        kind=claims_pb2.ClaimEvent.KIND_PENDING,
        claim=claims_pb2.ClaimRef(namespace="default", name=name, uid=f"uid-{name}"),
    )


async def test_publish_carries_schema_and_trace_and_deduplicates(fresh_nc: Client) -> None:
    js = fresh_nc.jetstream()
    await streams.ensure_streams(js)
    pub = Publisher(fresh_nc, backoff=FAST)
    subject = subjects.claims("default", "c1")
    first = await pub.publish(subject, _event(), CLAIM_EVENT, msg_id="uid-c1/1")
    again = await pub.publish(subject, _event(), CLAIM_EVENT, msg_id="uid-c1/1")
    assert again.duplicate
    assert not first.duplicate
    assert (await js.stream_info(streams.CLAIMS_STREAM)).state.messages == 1
    msg = await js.get_msg(streams.CLAIMS_STREAM, first.seq)
    assert msg.headers is not None
    assert msg.headers[SCHEMA_HEADER] == "gpudra.v1.ClaimEvent;v=1"
    assert CLAIM_EVENT.decode(msg.data or b"", msg.headers) == _event()


async def test_publish_without_a_stream_fails_permanently(fresh_nc: Client) -> None:
    pub = Publisher(fresh_nc, backoff=FAST, max_no_stream=3)
    with pytest.raises(StreamConfigError):
        await pub.publish(subjects.claims("default", "c1"), _event(), CLAIM_EVENT)


async def test_a_message_over_max_payload_with_its_headers_is_refused_not_sent(
    fresh_nc: Client,
) -> None:
    # Within the codec's limit (the server's default max_payload) on its own, over it once the
    # schema, message id and trace headers are added: the server would answer by closing the
    # connection for good, taking every subscription of the service with it.
    js = fresh_nc.jetstream()
    await streams.ensure_streams(js)
    pub = Publisher(fresh_nc, backoff=FAST)
    event = _event("big")
    event.claim.uid = "u" * (fresh_nc.max_payload - 40)
    assert len(event.SerializeToString()) <= CLAIM_EVENT.max_bytes
    with pytest.raises(OversizedMessageError, match="max_payload"):
        await pub.publish(subjects.claims("default", "big"), event, CLAIM_EVENT, deadline=5)
    assert fresh_nc.is_connected
    assert pub.retries == 0
    await pub.publish(subjects.claims("default", "c1"), _event(), CLAIM_EVENT, deadline=10)
    assert (await js.stream_info(streams.CLAIMS_STREAM)).state.messages == 1


async def test_publish_during_outage_is_stored_after_restart(
    fresh_nats_server: NatsServer, fresh_nc: Client
) -> None:
    js = fresh_nc.jetstream()
    await streams.ensure_streams(js)
    pub = Publisher(fresh_nc, ack_timeout=0.5, backoff=FAST)
    await asyncio.to_thread(fresh_nats_server.kill)
    publishing = asyncio.create_task(
        pub.publish(subjects.claims("default", "late"), _event("late"), CLAIM_EVENT, msg_id="late")
    )
    await asyncio.sleep(0.5)
    assert not publishing.done()
    await asyncio.to_thread(fresh_nats_server.restart)
    ack = await asyncio.wait_for(publishing, 20)
    assert ack.stream == streams.CLAIMS_STREAM
    assert pub.retries > 0
    info = await js.stream_info(streams.CLAIMS_STREAM)
    assert info.state.messages == 1  # stored once, however many attempts it took


async def test_publish_deadline_during_outage(
    fresh_nats_server: NatsServer, fresh_nc: Client
) -> None:
    await streams.ensure_streams(fresh_nc.jetstream())
    pub = Publisher(fresh_nc, ack_timeout=0.2, backoff=FAST)
    await asyncio.to_thread(fresh_nats_server.kill)
    with pytest.raises(BusRetryableError):
        await pub.publish(subjects.DRIFT, _event(), CLAIM_EVENT, deadline=0.5)
    await asyncio.to_thread(fresh_nats_server.restart)
    for _ in range(200):
        if fresh_nc.is_connected:
            break
        await asyncio.sleep(0.05)
    assert fresh_nc.is_connected


@pytest.mark.parametrize(
    ("data", "headers", "error_type"),
    [
        pytest.param(b"\x0a\xff", {SCHEMA_HEADER: "gpudra.v1.ClaimEvent;v=1"}, "CorruptMessageError", id="corrupt"),
        pytest.param(b"junk", None, "MissingSchemaError", id="no-header"),
        pytest.param(b"junk", {SCHEMA_HEADER: "gpudra.v1.ClaimEvent;v=9"}, "SchemaMismatchError", id="future-version"),
    ],
)  # fmt: skip
async def test_receive_dead_letters_malformed_events(
    fresh_nc: Client, data: Any, headers: Any, error_type: str
) -> None:
    js = fresh_nc.jetstream()
    await streams.ensure_streams(js)
    pub = Publisher(fresh_nc, backoff=FAST)
    dead = DeadLetters(pub, service="allocator")
    subject = subjects.claims("default", "bad")
    await js.publish(subject, data, headers=headers)
    await pub.publish(subjects.claims("default", "good"), _event("good"), CLAIM_EVENT)
    sub = await js.pull_subscribe(subjects.all_of(subjects.Kind.CLAIMS), durable="alloc")
    bad_msg, good_msg = await sub.fetch(2, timeout=10)
    assert await receive(bad_msg, CLAIM_EVENT, dead) is None
    assert await receive(good_msg, CLAIM_EVENT, dead) == _event("good")
    await good_msg.ack_sync()
    assert dead.counts["claims"] == 1
    # The bad event left the work queue (acked), and is kept, unchanged, as a dead letter.
    assert (await js.stream_info(streams.CLAIMS_STREAM)).state.messages == 0
    parked = await js.get_last_msg(streams.DEADLETTER_STREAM, subjects.deadletter("claims"))
    assert parked.data == data
    assert parked.headers is not None
    assert parked.headers[ORIGINAL_SUBJECT_HEADER] == subject
    assert parked.headers[ERROR_TYPE_HEADER] == error_type
    await sub.unsubscribe()


@pytest.mark.parametrize("how", ["receive", "park"])
async def test_a_redelivered_malformed_message_is_dead_lettered_once(
    fresh_nc: Client, how: str
) -> None:
    # The dead letter is stored, then the ack is lost (the consumer's replica dies, the server
    # restarts): JetStream redelivers the message, and it must not be parked a second time.
    js = fresh_nc.jetstream()
    await streams.ensure_streams(js)
    dead = DeadLetters(Publisher(fresh_nc, backoff=FAST), service="allocator")
    await js.publish(subjects.claims("default", "bad"), b"junk")
    sub = await js.pull_subscribe(
        subjects.all_of(subjects.Kind.CLAIMS),
        durable="alloc",
        config=ConsumerConfig(ack_wait=1.0),
    )
    (first,) = await sub.fetch(1, timeout=10)
    assert first.metadata.num_delivered == 1  # (read, and kept, before the reply is changed)
    first.reply = fresh_nc.new_inbox()  # the ack goes nowhere

    async def reject(msg: Msg) -> None:  # the codec's refusal, or a service's own
        if how == "receive":
            assert await receive(msg, CLAIM_EVENT, dead) is None
        else:
            await dead.park(msg, ValueError("not a claim event"))

    await reject(first)
    (again,) = await sub.fetch(1, timeout=10)
    assert again.metadata.num_delivered == 2
    await reject(again)
    assert (await js.stream_info(streams.DEADLETTER_STREAM)).state.messages == 1
    assert dead.counts["claims"] == 1
    await sub.unsubscribe()


async def test_dead_letter_of_foreign_subject_is_counted_not_raised(fresh_nc: Client) -> None:
    dead = DeadLetters(Publisher(fresh_nc, backoff=FAST), service="x")
    assert not await dead.send("other.subject", b"x", None, ValueError("bad"))
    assert dead.counts["unknown"] == 1


@pytest.mark.parametrize(
    ("extra", "kept"),
    [
        pytest.param(0, True, id="small-headers-kept"),
        pytest.param(600 * 1024, False, id="huge-headers-dropped"),
    ],
)
async def test_a_dead_letter_too_large_for_the_server_is_cut_to_fit(
    fresh_nc: Client, extra: int, kept: bool
) -> None:
    # As stored it was within max_payload; with the reason added it would not be, and the server
    # closes the connection of a client that publishes over max_payload.
    js = fresh_nc.jetstream()
    await streams.ensure_streams(js)
    dead = DeadLetters(Publisher(fresh_nc, backoff=FAST), service="allocator")
    headers = {SCHEMA_HEADER: "gpudra.v1.ClaimEvent;v=1", "X-Pad": "p" * extra}
    data = b"\x0a\xff" * ((fresh_nc.max_payload - extra) // 2 - 64)
    subject = subjects.claims("default", "big")
    assert await dead.send(subject, data, headers, CorruptMessageError("truncated"))
    parked = await js.get_last_msg(streams.DEADLETTER_STREAM, subjects.deadletter("claims"))
    assert parked.headers is not None
    assert parked.headers[ORIGINAL_SUBJECT_HEADER] == subject
    assert parked.headers[ERROR_TYPE_HEADER] == "CorruptMessageError"
    assert parked.headers[TRUNCATED_FROM_HEADER] == str(len(data))
    assert (SCHEMA_HEADER in parked.headers) == kept
    assert parked.data is not None
    assert data.startswith(parked.data)
    assert len(parked.data) > fresh_nc.max_payload // 3
    assert fresh_nc.is_connected


async def test_wrong_codec_is_dead_lettered(fresh_nc: Client) -> None:
    js = fresh_nc.jetstream()
    await streams.ensure_streams(js)
    pub = Publisher(fresh_nc, backoff=FAST)
    dead = DeadLetters(pub, service="claim-writer")
    await pub.publish(subjects.allocations("default", "c1"), _event(), CLAIM_EVENT)
    sub = await js.pull_subscribe(subjects.all_of(subjects.Kind.ALLOCATIONS), durable="cw")
    (msg,) = await sub.fetch(1, timeout=10)
    assert await receive(msg, ALLOCATION_DECISION, dead) is None
    assert dead.counts["allocations"] == 1
    await sub.unsubscribe()


async def test_trace_context_crosses_jetstream(fresh_nc: Client) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    js = fresh_nc.jetstream()
    await streams.ensure_streams(js)
    pub = Publisher(fresh_nc, backoff=FAST, tracer=tracer)
    subject = subjects.claims("default", "traced")
    with tracer.start_as_current_span("intake") as intake:
        await pub.publish(subject, _event("traced"), CLAIM_EVENT)
    sub = await js.pull_subscribe(subject, durable="traced")
    (msg,) = await sub.fetch(1, timeout=10)
    with tracing.process_span(msg.subject, msg.headers, tracer=tracer):
        pass
    await msg.ack()
    await sub.unsubscribe()
    provider.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    process = spans["process gpudra.claims.>"]
    assert process.context.trace_id == intake.get_span_context().trace_id
    assert process.parent is not None
    producer = spans["publish gpudra.claims.>"]
    assert process.parent.span_id == producer.context.span_id
    assert producer.parent is not None
    assert producer.parent.span_id == intake.get_span_context().span_id
