"""A CEL selector that fails at run time on a device is not an invalid claim: against a real
nats-server, through the service's own `serve`, the claim (alone, in a pod, in a gang) is told
"CEL runtime error ..." and held, and is allocated once the driver republishes the slice with the
attribute or the class is fixed; a claim that is invalid in itself is refused for good.

The retry interval is far longer than the tests: what allocates the claim is the change."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from gpudra_allocator.conftest import gpu_claim_doc, gpu_slice_doc, pending_event, serving
from gpudra_bus import (
    ALLOCATION_DECISION,
    CLAIM_EVENT,
    DEVICE_CLASSES_BUCKET,
    SLICES_BUCKET,
    CodecError,
    Publisher,
    subjects,
)
from gpudra_bus.subjects import Kind
from gpudra_standalone.nats_server import NatsServer
from gpudra_testing.statusz import until_status
from gpudrapb.v1 import claims_pb2

MODEL = 'device.attributes["gpu.nvidia.com"].model == "h100"'  # no has() guard
Outcome = claims_pb2.AllocationDecision


@pytest.fixture
async def allocator(fresh_nats_server: NatsServer) -> AsyncIterator[int]:
    # only a change can retry a held claim within the test
    async with serving(fresh_nats_server.url, retry_interval=600.0) as port:
        yield port


class Bus:
    """A client that plays the inventory (slices), `gpudra apply` (classes) and the
    claim-writer (claim events), and hears every allocation decision."""

    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.decisions: dict[str, list[claims_pb2.AllocationDecision]] = {}

    async def start(self) -> None:
        await self.nc.subscribe(subjects.all_of(Kind.ALLOCATIONS), cb=self._heard)

    async def _heard(self, msg: Msg) -> None:
        try:
            decision = ALLOCATION_DECISION.decode(msg.data, msg.headers)
        except CodecError:
            return  # a `Released`
        self.decisions.setdefault(decision.claim.name, []).append(decision)

    async def put_slice(self, node: str, generation: int, model: str | None) -> None:
        doc = gpu_slice_doc(node, 2)
        doc["spec"]["pool"]["generation"] = generation
        if model is not None:
            for device in doc["spec"]["devices"]:
                device["attributes"]["model"] = {"string": model}
        kv = await self.nc.jetstream().key_value(SLICES_BUCKET)
        await kv.put(f"{node}-slice", json.dumps(doc).encode())

    async def put_class(self, name: str, expression: str) -> None:
        doc = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }
        kv = await self.nc.jetstream().key_value(DEVICE_CLASSES_BUCKET)
        await kv.put(name, json.dumps(doc).encode())

    async def send(self, event: claims_pb2.ClaimEvent) -> None:
        ref = event.claim
        await Publisher(self.nc).publish(
            subjects.claims(ref.namespace, ref.name), event, CLAIM_EVENT
        )

    def last(self, name: str) -> claims_pb2.AllocationDecision | None:
        told = self.decisions.get(name)
        return told[-1] if told else None

    async def until(self, names: list[str], check: Callable[[Outcome | None], bool]) -> None:
        for _ in range(200):  # 10 s
            if all(check(self.last(name)) for name in names):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"never got there: {[self.last(n) for n in names]}")


@pytest.fixture
async def bus(allocator: int, fresh_nats_server: NatsServer) -> AsyncIterator[Bus]:
    nc = await nats.connect(fresh_nats_server.url)
    try:
        heard = Bus(nc)
        await heard.start()
        yield heard
    finally:
        await nc.close()


def claim_event(
    name: str,
    selector: str | None = MODEL,
    device_class: str = "gpu.nvidia.com",
    unit: str = "lone",
    names: tuple[str, ...] = (),
) -> claims_pb2.ClaimEvent:
    """A pending claim for one GPU whose request selects with `selector`; `unit` "pod": sent
    with the pod `default/p` that uses every claim of `names`, "gang": a member of the gang
    `default/g` of `len(names)` members."""
    doc = gpu_claim_doc(name, 1)
    exactly = doc["spec"]["devices"]["requests"][0]["exactly"]
    exactly["deviceClassName"] = device_class
    if selector is not None:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    event = pending_event(doc)
    if unit == "pod":
        event.pod_uid, event.pod_name = "p", "default/p"
        event.pod_claims.extend(f"uid-{n}" for n in names)
    elif unit == "gang":
        event.gang_id, event.gang_size = "default/g", len(names)
    return event


def unschedulable(decision: Outcome | None) -> bool:
    return decision is not None and decision.outcome == Outcome.OUTCOME_UNSCHEDULABLE


def allocated(decision: Outcome | None) -> bool:
    return decision is not None and decision.outcome == Outcome.OUTCOME_ALLOCATED


@pytest.mark.parametrize(
    ("unit", "names"),
    [
        pytest.param("lone", ("c",), id="lone-claim"),
        pytest.param("pod", ("a", "b"), id="pod-of-two-claims"),
        pytest.param("gang", ("a", "b"), id="gang-of-two"),
    ],
)
async def test_a_cel_runtime_error_waits_for_the_slice_that_clears_it(
    bus: Bus, allocator: int, unit: str, names: tuple[str, ...]
) -> None:
    await bus.put_slice("node-a", 1, model=None)  # the driver has not published `model` yet
    await until_status(allocator, lambda s: s["index"]["slices"] == 1)
    for name in names:
        await bus.send(claim_event(name, unit=unit, names=names))
    await bus.until(list(names), unschedulable)
    for name in names:
        told = bus.last(name)
        assert told is not None
        assert "CEL runtime error: no such key: model" in told.reason, told.reason
        assert "invalid claim" not in told.reason, told.reason
        assert "retried when" in told.reason, told.reason
    status = await until_status(allocator, lambda s: s["waiting"]["claims"] == len(names))
    assert status["claims"]["decided"] == 0

    await bus.put_slice("node-a", 2, model="h100")  # republished with the attribute
    await bus.until(list(names), allocated)
    for name in names:
        told = bus.last(name)
        assert told is not None
        assert told.node_name == "node-a"
    await until_status(allocator, lambda s: s["waiting"]["claims"] == 0)


async def test_a_cel_runtime_error_of_a_class_waits_for_the_fixed_class(
    bus: Bus, allocator: int
) -> None:
    await bus.put_slice("node-a", 1, model=None)
    await bus.put_class("picky", MODEL)
    await until_status(
        allocator, lambda s: s["index"]["slices"] == 1 and s["index"]["classesVersion"] >= 1
    )
    await bus.send(claim_event("c", selector=None, device_class="picky"))
    await bus.until(["c"], unschedulable)
    told = bus.last("c")
    assert told is not None
    assert told.reason.startswith("class picky: selector #0 on device"), told.reason
    assert "CEL runtime error" in told.reason

    await bus.put_class("picky", 'device.attributes["gpu.nvidia.com"].type == "gpu"')
    await bus.until(["c"], allocated)


async def test_an_invalid_claim_is_refused_for_good(bus: Bus, allocator: int) -> None:
    """A selector that does not compile: no slice can help, the event is acknowledged."""
    await bus.put_slice("node-a", 1, model=None)
    await until_status(allocator, lambda s: s["index"]["slices"] == 1)
    await bus.send(claim_event("c", selector='device.attributes["gpu.nvidia.com"].model =='))
    await bus.until(["c"], unschedulable)
    told = bus.last("c")
    assert told is not None
    assert told.reason.startswith("invalid claim: "), told.reason
    assert "CEL compile error" in told.reason
    await until_status(allocator, lambda s: s["waiting"]["claims"] == 0)

    await bus.put_slice("node-a", 2, model="h100")
    await until_status(allocator, lambda s: s["index"]["version"] >= 2)
    await asyncio.sleep(1.0)  # a retry would be due (`_MIN_RETRY_GAP`): none comes
    assert [d.outcome for d in bus.decisions["c"]] == [Outcome.OUTCOME_UNSCHEDULABLE]
