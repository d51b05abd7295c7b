from __future__ import annotations

import uuid

from gpudra_bus import ALLOCATION_DECISION, RELEASED, connect, ensure_streams, subjects
from gpudra_cli.standalone.events import claim_events
from gpudrapb.v1 import claims_pb2


async def test_a_claims_decisions_are_its_events(nats_url: str) -> None:
    nc = await connect(nats_url, name="events-test", deadline=5)
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        name = f"c-{uuid.uuid4().hex[:8]}"
        subject = subjects.allocations("default", name)
        first = claims_pb2.AllocationDecision(
            outcome=claims_pb2.AllocationDecision.OUTCOME_UNSCHEDULABLE,
            reason="needs 16 GPUs",
            allocator_id="allocator-0",
        )
        second = claims_pb2.AllocationDecision(
            outcome=claims_pb2.AllocationDecision.OUTCOME_ALLOCATED, node_name="node-a"
        )
        for message, codec in ((first, ALLOCATION_DECISION), (second, ALLOCATION_DECISION)):
            data, headers = codec.encode(message)
            await js.publish(subject, data, headers=headers)
        data, headers = RELEASED.encode(claims_pb2.Released(reason="claim deleted"))
        await js.publish(subject, data, headers=headers)
        await js.publish(subject, b"junk", headers={"Gpudra-Schema": "gpudra.v1.Nope;v=1"})
        events = await claim_events(nc, "default", name)
        assert [(e.source, e.what) for e in events] == [
            ("allocator-0", "unschedulable: needs 16 GPUs"),
            ("allocator", "allocated on node-a"),
            ("allocator", "released: claim deleted"),
            ("?", "message of schema gpudra.v1.Nope"),
        ]
        assert all(e.time for e in events)
        assert await claim_events(nc, "default", f"none-{uuid.uuid4().hex[:6]}") == []
    finally:
        await nc.drain()
