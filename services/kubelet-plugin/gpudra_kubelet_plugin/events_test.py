from __future__ import annotations

import asyncio
import uuid

import nats
import pytest
from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from gpudra_bus import tracing
from gpudra_kubelet_plugin.conftest import KIND, Node, make_claim
from gpudra_kubelet_plugin.errors import DeviceError
from gpudra_kubelet_plugin.events import CLAIM_HEADER, PREPARED, UNPREPARED, NatsEvents
from gpudra_kubelet_plugin.state import ClaimRef
from gpudra_kubelet_plugin.traces import TRACEPARENT_ANNOTATION

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


async def test_outcomes_are_published_in_the_claims_trace(node: Node, nats_url: str) -> None:
    events_node = f"node-{uuid.uuid4().hex[:8]}"
    nc = await nats.connect(nats_url)
    received: asyncio.Queue[Msg] = asyncio.Queue()

    async def collect(msg: Msg) -> None:
        await received.put(msg)

    provider = TracerProvider()
    try:
        await nc.subscribe(f"gpudra.prepared.{events_node}", cb=collect)
        state = node.state()
        state._events = NatsEvents(nc, events_node)
        state._tracer = provider.get_tracer("test")
        await state.start()
        good = make_claim("c", "uid-e", [("gpu", "gpu-0")])
        good["metadata"]["annotations"] = {
            TRACEPARENT_ANNOTATION: f"00-{TRACE_ID}-00f067aa0ba902b7-01"
        }
        node.claims.put(good)
        node.claims.put(make_claim("bad", "uid-b", [("gpu", "gpu-9")]))

        await state.prepare(ClaimRef("uid-e", "default", "c"))
        msg = await asyncio.wait_for(received.get(), 5)
        answer = PREPARED.decode(msg.data, msg.headers).claims["uid-e"]
        assert (answer.error, list(answer.devices[0].cdi_device_ids)) == (
            "",
            [f"{KIND}=uid-e-gpu-0"],
        )
        assert msg.headers is not None
        assert msg.headers[CLAIM_HEADER] == "default/c"
        carried = tracing.extract(msg.headers)
        assert (
            format(trace.get_current_span(carried).get_span_context().trace_id, "032x") == TRACE_ID
        )

        with pytest.raises(DeviceError):
            await state.prepare(ClaimRef("uid-b", "default", "bad"))
        msg = await asyncio.wait_for(received.get(), 5)
        assert "no device 'gpu-9'" in PREPARED.decode(msg.data, msg.headers).claims["uid-b"].error

        await state.unprepare(ClaimRef("uid-e", "default", "c"))
        msg = await asyncio.wait_for(received.get(), 5)
        assert UNPREPARED.decode(msg.data, msg.headers).claims["uid-e"].error == ""
        await state.unprepare(ClaimRef("uid-never", "default", "never"))  # unknown: no event
        await asyncio.sleep(0.05)
        assert received.empty()
    finally:
        provider.shutdown()
        await nc.drain()
