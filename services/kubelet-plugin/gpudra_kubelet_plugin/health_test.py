from __future__ import annotations

import asyncio
import dataclasses
import uuid

import nats
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from gpudra_bus import INVENTORY_STREAM, STREAMS, ensure_stream
from gpudra_kubelet_plugin import healthfeed
from gpudra_kubelet_plugin.conftest import GPU0, GPU1, NODE, node_devices
from gpudra_kubelet_plugin.health import MAX_MESSAGE, HealthEvent, HealthHub
from gpudra_testing import NatsServer
from gpudrapb.v1 import inventory_pb2 as pb


def hub() -> HealthHub:
    return HealthHub(NODE, node_devices(), clock=lambda: 1000.0)


MIGS = ["gpu-1-mig-1-0", "gpu-1-mig-3g-40gb-4", "gpu-1-mig-4g-40gb-0"]


@pytest.mark.parametrize(
    ("event", "affected"),
    [
        pytest.param(HealthEvent("XID", True, device_uuid=GPU0), ["gpu-0"], id="gpu-by-uuid"),
        pytest.param(
            HealthEvent("XID", True, device_uuid=GPU1), ["gpu-1", *MIGS], id="mig-parent-by-uuid"
        ),
        pytest.param(
            HealthEvent("XID", True, device_name="gpu-1"), ["gpu-1", *MIGS], id="mig-parent-by-name"
        ),
        pytest.param(
            HealthEvent("XID", True, device_name="gpu-1-mig-1-0"),
            ["gpu-1-mig-1-0"],
            id="one-mig",
        ),
        pytest.param(HealthEvent("XID", True, device_uuid="GPU-unknown"), [], id="unknown"),
    ],
)
async def test_affected_devices(event: HealthEvent, affected: list[str]) -> None:
    h = hub()
    assert await h.update(event) == affected
    assert sorted(d.device for d in h.snapshot() if d.status == "unhealthy") == affected


async def test_watch_gets_full_lists_and_collapses_missed_changes() -> None:
    h = hub()
    watch = h.watch()
    first = await anext(watch)
    assert {d.status for d in first} == {"healthy"}
    assert {d.updated for d in first} == {1000.0}
    await h.update(HealthEvent("XID", True, "XID 48", device_uuid=GPU0, time=1234.0))
    await h.update(HealthEvent("XID", False, device_uuid=GPU0))
    assert await h.update(HealthEvent("XID", False, device_uuid=GPU0)) == []  # no change
    second = await asyncio.wait_for(anext(watch), 10)
    assert {d.status for d in second} == {"healthy"}  # the two changes arrive as the newest list
    pending = asyncio.ensure_future(anext(watch))
    await asyncio.sleep(0.01)
    assert not pending.done()  # no change, no message
    await h.update(HealthEvent("LOST", True, "x" * 5000, device_name="gpu-0"))
    third = await asyncio.wait_for(pending, 10)
    gpu0 = next(d for d in third if d.device == "gpu-0")
    assert (gpu0.status, len(gpu0.message)) == ("unhealthy", MAX_MESSAGE)
    await watch.aclose()


@pytest.mark.parametrize(
    ("events", "status", "message"),
    [
        pytest.param([("XID", True), ("ECC", True)], "unhealthy", "ECC; XID", id="two-conditions"),
        pytest.param(
            [("XID", True), ("ECC", True), ("XID", False)], "unhealthy", "ECC", id="one-cleared"
        ),
        pytest.param(
            [("XID", True), ("ECC", True), ("XID", False), ("ECC", False)],
            "healthy",
            "",
            id="all-cleared",
        ),
        pytest.param([("ECC", False)], "healthy", "", id="clear-unknown"),
    ],
)
async def test_a_device_is_unhealthy_while_any_condition_is_active(
    events: list[tuple[str, bool]], status: str, message: str
) -> None:
    h = hub()
    for condition, active in events:
        await h.update(HealthEvent(condition, active, condition, device_uuid=GPU0))
    gpu0 = next(d for d in h.snapshot() if d.device == "gpu-0")
    assert (gpu0.status, gpu0.message) == (status, message)


async def test_a_mig_devices_own_condition_survives_its_gpus_recovery() -> None:
    h = hub()
    await h.update(HealthEvent("XID", True, "own", device_name="gpu-1-mig-1-0"))
    await h.update(HealthEvent("XID", True, "parent", device_uuid=GPU1))
    await h.update(HealthEvent("XID", False, device_uuid=GPU1))
    status = {d.device: (d.status, d.message) for d in h.snapshot()}
    assert status["gpu-1-mig-1-0"] == ("unhealthy", "own")
    assert status["gpu-1"] == ("healthy", "")


def _event(
    kind: pb.HealthCondition.Kind.ValueType, code: int = 0, cleared: bool = False, message: str = ""
) -> pb.HealthEvent:
    return pb.HealthEvent(
        node=NODE,
        device_name="gpu-1",
        device_uuid=GPU1,
        condition=pb.HealthCondition(kind=kind, code=code, message=message),
        cleared=cleared,
        time=Timestamp(seconds=77),
    )


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param(
            _event(pb.HealthCondition.KIND_XID, 79, message="fell off the bus"),
            HealthEvent("XID", True, "XID 79: fell off the bus", "gpu-1", GPU1, 77.0),
            id="xid",
        ),
        pytest.param(
            _event(pb.HealthCondition.KIND_ECC, 3),
            HealthEvent("ECC", True, "uncorrected ECC errors", "gpu-1", GPU1, 77.0),
            id="ecc",
        ),
        pytest.param(
            _event(pb.HealthCondition.KIND_LOST, cleared=True),
            HealthEvent("LOST", False, "GPU lost", "gpu-1", GPU1, 77.0),
            id="lost-cleared",
        ),
        pytest.param(
            _event(99),  # type: ignore[arg-type]
            HealthEvent("KIND_99", True, "unknown condition", "gpu-1", GPU1, 77.0),
            id="newer-kind",
        ),
    ],
)
def test_translate(message: pb.HealthEvent, expected: HealthEvent) -> None:
    assert healthfeed.translate(message) == expected


async def test_feed_from_nats(nats_url: str) -> None:
    node = f"node-{uuid.uuid4().hex[:8]}.example.com"  # dots become one subject token
    h = HealthHub(node, node_devices())
    nc = await nats.connect(nats_url)
    try:
        await healthfeed.subscribe(nc, node, h)
        watch = h.watch()
        await anext(watch)
        subject = f"gpudra.health.{node.replace('.', '_')}"
        await nc.publish(
            subject, b"garbage", headers={"Gpudra-Schema": "gpudra.v1.HealthEvent;v=1"}
        )
        await nc.publish(subject, b"", headers={"Gpudra-Schema": "gpudra.v1.NodeInventory;v=1"})
        data, headers = healthfeed.HEALTH_EVENT.encode(_event(pb.HealthCondition.KIND_XID, 79))
        await nc.publish(subject, data, headers=headers)
        update = await asyncio.wait_for(anext(watch), 5)
        status = {d.device: (d.status, d.message) for d in update}
        assert status["gpu-1"] == ("unhealthy", "XID 79")
        assert status["gpu-0"] == ("healthy", "")
        await watch.aclose()
    finally:
        await nc.drain()


@pytest.mark.parametrize(
    ("events", "described", "active", "unhealthy"),
    [
        pytest.param(
            [HealthEvent("XID", True, "XID 79", "gpu-1", GPU1)],
            {"gpu-1", GPU1},
            [],
            {},
            id="missed-clear",
        ),
        pytest.param(
            [],
            {"gpu-1", GPU1},
            [HealthEvent("ECC", True, "3 uncorrected ECC errors", "gpu-1", GPU1)],
            {n: "3 uncorrected ECC errors" for n in ["gpu-1", *MIGS]},
            id="missed-condition-reaches-mig-devices",
        ),
        pytest.param(
            [HealthEvent("LOST", True, "GPU lost", device_name="gpu-1")],
            {"gpu-1", GPU1},
            [],
            {},
            id="event-by-name-only",
        ),
        pytest.param(
            [HealthEvent("XID", True, "XID 79", "gpu-1", GPU1)],
            {"gpu-1", GPU1},
            [HealthEvent("XID", True, "XID 94", "gpu-1", GPU1)],
            {n: "XID 94" for n in ["gpu-1", *MIGS]},
            id="newer-code",
        ),
        pytest.param(
            [
                HealthEvent("XID", True, "XID 79", "gpu-0", GPU0),
                HealthEvent("XID", True, "own", device_name="gpu-1-mig-1-0"),
            ],
            {"gpu-1", GPU1},
            [],
            {"gpu-0": "XID 79", "gpu-1-mig-1-0": "own"},
            id="devices-not-described-keep-theirs",
        ),
    ],
)
async def test_an_inventory_is_the_complete_state_of_the_devices_it_describes(
    events: list[HealthEvent],
    described: set[str],
    active: list[HealthEvent],
    unhealthy: dict[str, str],
) -> None:
    h = hub()
    for event in events:
        await h.update(event)
    await h.reconcile(described, active)
    assert {d.device: d.message for d in h.snapshot() if d.status == "unhealthy"} == unhealthy
    assert await h.reconcile(described, active) == []  # the same report again changes nothing


async def test_each_new_inventory_generation_corrects_missed_events_once(
    fresh_nats_server: NatsServer,
) -> None:
    nc = await nats.connect(fresh_nats_server.url)
    try:
        js = nc.jetstream()
        await ensure_stream(js, next(s for s in STREAMS if s.name == INVENTORY_STREAM))

        async def store(generation: int, *conditions: pb.HealthCondition) -> None:
            gpu1 = pb.Device(name="gpu-1", uuid=GPU1, type=pb.Device.TYPE_GPU, health=conditions)
            inventory = pb.NodeInventory(node=NODE, generation=generation, devices=[gpu1])
            data, headers = healthfeed.NODE_INVENTORY.encode(inventory)
            await js.publish(f"gpudra.inventory.{NODE}", data, headers=headers)

        h = hub()
        check = healthfeed.InventoryCheck(js, NODE, h)
        assert await check.once() is None  # nothing stored yet: healthy
        await store(1, pb.HealthCondition(kind=pb.HealthCondition.KIND_XID, code=79))
        assert await check.once() == 1
        assert {d.device for d in h.snapshot() if d.status == "unhealthy"} == {"gpu-1", *MIGS}
        await store(2)  # cleared; the event that said so never came
        assert await check.once() == 0
        assert {d.status for d in h.snapshot()} == {"healthy"}
        # An event newer than the stored inventory (whose own inventory is not stored yet, or a
        # heartbeat of the same generation) is not undone by it.
        await h.update(HealthEvent("ECC", True, "ECC", "gpu-1", GPU1))
        await store(2)
        assert await check.once() is None
        assert next(d for d in h.snapshot() if d.device == "gpu-1").status == "unhealthy"
    finally:
        await nc.drain()


async def test_seed_from_the_last_inventory(fresh_nats_server: NatsServer) -> None:
    nc = await nats.connect(fresh_nats_server.url)
    try:
        js = nc.jetstream()
        h = HealthHub(NODE, node_devices())
        assert await healthfeed.seed(js, NODE, h) == 0  # no stream yet: healthy, not an error
        spec = next(s for s in STREAMS if s.name == INVENTORY_STREAM)
        await ensure_stream(js, spec)
        assert await healthfeed.seed(js, NODE, h) == 0  # no inventory of this node yet
        xid = pb.HealthCondition(kind=pb.HealthCondition.KIND_XID, code=79)
        inventory = pb.NodeInventory(
            node=NODE,
            devices=[
                pb.Device(name="gpu-0", uuid=GPU0, type=pb.Device.TYPE_GPU),
                pb.Device(name="gpu-1", uuid=GPU1, type=pb.Device.TYPE_GPU, health=[xid]),
            ],
        )
        data, headers = healthfeed.NODE_INVENTORY.encode(inventory)
        await js.publish(f"gpudra.inventory.{NODE}", data, headers=headers)
        assert await healthfeed.seed(js, NODE, h) == 1
        status = {d.device: (d.status, d.message) for d in h.snapshot()}
        assert status["gpu-1"] == ("unhealthy", "XID 79")
        assert status["gpu-1-mig-1-0"] == ("unhealthy", "XID 79")
        assert status["gpu-0"] == ("healthy", "")
    finally:
        await nc.drain()


@pytest.mark.parametrize(
    ("current", "stamp"),
    [
        pytest.param(True, 2000.0, id="feed-current"),
        pytest.param(False, 1000.0, id="feed-down"),
    ],
)
async def test_unchanged_lists_are_refreshed(current: bool, stamp: float) -> None:
    now = [1000.0]
    h = HealthHub(
        NODE, node_devices(), clock=lambda: now[0], refresh_seconds=0.01, is_current=lambda: current
    )
    watch = h.watch()
    await anext(watch)
    now[0] = 2000.0
    refreshed = await asyncio.wait_for(anext(watch), 10)
    assert {d.updated for d in refreshed} == {stamp}
    assert {d.status for d in refreshed} == {"healthy"}
    await watch.aclose()


async def test_sync_follows_mig_devices_made_and_destroyed() -> None:
    h = hub()
    watch = h.watch()
    await anext(watch)
    await h.update(HealthEvent("ECC", True, "parent ECC", device_uuid=GPU1))
    await anext(watch)
    devices = {d.name: d for d in node_devices()}
    placement = devices["gpu-1-mig-3g-40gb-4"]
    made = dataclasses.replace(placement, uuid="MIG-made", gi_cap=40, ci_cap=41, gi_id=2, ci_id=0)
    # Made by the plugin, as a table discovered now would name it: under its placement and its
    # GPU and compute instance ids.
    alias = dataclasses.replace(made, name="gpu-1-mig-2-0")
    now = [*(d for d in devices.values() if d.name != placement.name), made, alias]
    assert await h.sync(now) == ["gpu-1-mig-2-0"]  # the placement's health did not change
    status = {d.device: (d.status, d.message) for d in await anext(watch)}
    assert status["gpu-1-mig-2-0"] == ("unhealthy", "parent ECC")  # its GPU's, inherited
    assert await h.update(HealthEvent("XID", True, "own", device_uuid="MIG-made")) == [
        "gpu-1-mig-2-0",
        "gpu-1-mig-3g-40gb-4",
    ]
    await anext(watch)
    assert await h.sync(now) == []  # nothing new: no message
    # Destroyed: the placement is free again and keeps only its GPU's condition; the other name
    # goes from the stream.
    assert await h.sync(devices.values()) == ["gpu-1-mig-2-0", "gpu-1-mig-3g-40gb-4"]
    status = {d.device: (d.status, d.message) for d in await anext(watch)}
    assert "gpu-1-mig-2-0" not in status
    assert status["gpu-1-mig-3g-40gb-4"] == ("unhealthy", "parent ECC")
    assert await h.update(HealthEvent("XID", False, device_uuid="MIG-made")) == []
    await h.update(HealthEvent("ECC", False, device_uuid=GPU1))
    assert {d.status for d in h.snapshot()} == {"healthy"}
    await watch.aclose()
