"""Intake against a real nats-server and the standalone claim store: which claims are offered."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from gpudra_bus import Publisher, subjects
from gpudra_bus.subjects import Kind as SubjectKind
from gpudra_claim_writer.consumers import consumers_left
from gpudra_claim_writer.events import PodUnits
from gpudra_claim_writer.intake import Intake
from gpudra_claim_writer.ownership import Ownership
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import DEVICE_CLASSES, RESOURCE_CLAIMS
from gpudra_kube.store import EventType, WatchEvent
from gpudrapb.v1 import claims_pb2


def claim(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "generation": 1},
        "spec": {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}
        },
    }


@pytest.mark.parametrize(
    ("device_class", "pending", "foreign"),
    [
        pytest.param("gpu.nvidia.com", 1, 0, id="built-in-class"),
        pytest.param("nic.example.com", 0, 1, id="other-drivers-class"),
        pytest.param("later.example.com", 1, 0, id="undefined-class-waits-in-the-allocator"),
    ],
)
async def test_only_gpudras_claims_are_offered_and_gated_pods_hear_of_every_claim(
    nc: Client, device_class: str, pending: int, foreign: int
) -> None:
    store = KvStore(nc)
    await store.create(
        DEVICE_CLASSES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "nic.example.com"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nic.example.com"'}}]},
        },
    )
    heard: list[tuple[str, str]] = []

    async def on_claim(namespace: str, name: str) -> None:
        heard.append((namespace, name))

    intake = Intake(store, Publisher(nc), on_claim=on_claim, ownership=Ownership(store))
    event = WatchEvent(EventType.ADDED, claim("c", device_class))
    await intake.on_event(event)
    await intake.on_event(event)  # a repeat (relist) decides nothing new
    assert intake.published["pending"] == pending
    assert intake.published["foreign"] == foreign
    assert heard == [("default", "c"), ("default", "c")]


class Heard:
    """ClaimEvents the intake publishes, as a core NATS subscriber sees them."""

    def __init__(self) -> None:
        self.events: list[claims_pb2.ClaimEvent] = []

    async def on_msg(self, msg: Msg) -> None:
        event = claims_pb2.ClaimEvent()
        event.ParseFromString(msg.data)
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [claims_pb2.ClaimEvent.Kind.Name(e.kind) for e in self.events]


async def settle(heard: Heard, count: int) -> None:
    for _ in range(200):
        if len(heard.events) >= count:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # nothing more on its way


@pytest.mark.parametrize(
    ("reserved_for", "marked", "after"),
    [
        pytest.param(
            [{"resource": "pods", "name": "job-0", "uid": "pod-1"}],
            True,
            ["KIND_PENDING", "KIND_DELETED"],
            id="consumers-left-it-waits-for-a-pod",
        ),
        pytest.param(
            [],
            False,
            ["KIND_PENDING", "KIND_DELETED"],
            id="never-consumed-stays-eager",
        ),
    ],
)
async def test_a_claim_whose_consumers_left_is_marked_and_never_offered_alone(
    nc: Client, reserved_for: list[dict[str, str]], marked: bool, after: list[str]
) -> None:
    store = KvStore(nc)
    heard = Heard()
    sub = await nc.subscribe(subjects.all_of(SubjectKind.CLAIMS), cb=heard.on_msg)
    ownership = Ownership(store)
    units = PodUnits(store, Publisher(nc), ownership)
    await units.pod_changed(WatchEvent(EventType.SYNCED, {}))
    intake = Intake(store, Publisher(nc), ownership=ownership, pods=units)
    stored = await store.create(RESOURCE_CLAIMS, claim("named", "gpu.nvidia.com"))
    await intake.on_event(WatchEvent(EventType.ADDED, stored))
    stored["status"] = {"allocation": {"devices": {"results": []}}, "reservedFor": reserved_for}
    stored["status"]["allocation"]["devices"]["results"] = [
        {"request": "r", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
    ]
    if not reserved_for:
        del stored["status"]["reservedFor"]
    stored = await store.replace_status(RESOURCE_CLAIMS, stored)
    intake.written(stored["metadata"]["uid"])  # the write-back wrote it
    await intake.on_event(WatchEvent(EventType.MODIFIED, stored))
    # The last consumer leaves: reservedFor and the allocation are cleared in one write.
    stored["status"] = {}
    stored = await store.replace_status(RESOURCE_CLAIMS, stored)
    await intake.on_event(WatchEvent(EventType.MODIFIED, stored))
    current = await store.get(RESOURCE_CLAIMS, "named", "default")
    assert consumers_left(current) is marked
    # Later revisions of the pending claim (the marker itself, the finalizer removed) offer it
    # again only when nobody used it.
    await intake.on_event(WatchEvent(EventType.MODIFIED, current))
    await settle(heard, len(after))
    await sub.unsubscribe()
    assert heard.kinds() == after
    assert intake.published["waiting"] == (1 if marked else 0)
    if marked:
        dealloc = heard.events[-1]
        assert consumers_left(json.loads(dealloc.claim_json)), "released as marked"
