"""Pod gates against the HTTP-level fake API: lifted for gpudra's allocated claims, never deadlocked
by claims that are not gpudra's (kube-scheduler allocates those only once the gate is gone)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from gpudra_claim_writer.claims import SCHEDULING_GATE
from gpudra_claim_writer.gates import Gates
from gpudra_claim_writer.ownership import Ownership, serves
from gpudra_kube.api_backend import ApiStore, load_api_client
from gpudra_kube.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS
from gpudra_testing.kubeapi import FakeKubeApi

ALLOCATION = {
    "devices": {
        "results": [
            {"request": "r", "driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-0"}
        ]
    }
}


def device_class(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def claim(name: str, device_class: str, allocated: bool = False) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}
        },
    }
    if allocated:
        obj["status"] = {"allocation": ALLOCATION}
    return obj


def pod(
    name: str, claims: list[str], gates: tuple[str, ...] = (SCHEDULING_GATE,)
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingGates": [{"name": g} for g in gates],
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [
                {"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)
            ],
        },
    }


@pytest_asyncio.fixture
async def api(tmp_path: Any) -> AsyncIterator[tuple[FakeKubeApi, ApiStore]]:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as fake:
        client = await load_api_client(str(fake.write_kubeconfig(tmp_path / "kubeconfig")))
        store = ApiStore(client)
        await fake.put(
            DEVICE_CLASSES, device_class("nic.example.com", 'device.driver == "nic.example.com"')
        )
        await fake.put(
            DEVICE_CLASSES,
            device_class(
                "h100.example.com", 'device.attributes["gpu.nvidia.com"].productName == "H100"'
            ),
        )
        try:
            yield fake, store
        finally:
            await store.close()


def gates_of(fake: FakeKubeApi, name: str) -> list[str]:
    found = next(p for p in fake.objects(PODS) if p["metadata"]["name"] == name)
    return [g["name"] for g in found["spec"].get("schedulingGates") or []]


@pytest.mark.parametrize(
    ("claims", "pod_claims", "gates_left"),
    [
        pytest.param([], [], [], id="no-claims-lifted-at-once"),
        pytest.param(
            [claim("nic", "nic.example.com")], ["nic"], [], id="only-foreign-claim-lifted"
        ),
        pytest.param(
            [claim("gpu", "gpu.nvidia.com")], ["gpu"], [SCHEDULING_GATE], id="ours-pending-kept"
        ),
        pytest.param(
            [claim("gpu", "h100.example.com")],
            ["gpu"],
            [SCHEDULING_GATE],
            id="applied-class-of-our-driver-kept",
        ),
        pytest.param(
            [claim("gpu", "gpu.nvidia.com", allocated=True), claim("nic", "nic.example.com")],
            ["gpu", "nic"],
            [],
            id="ours-allocated-foreign-pending-lifted",
        ),
        pytest.param(
            [claim("gpu", "gpu.nvidia.com"), claim("nic", "nic.example.com")],
            ["gpu", "nic"],
            [SCHEDULING_GATE],
            id="ours-pending-foreign-pending-kept",
        ),
        pytest.param([], ["not-created-yet"], [SCHEDULING_GATE], id="missing-claim-kept"),
        pytest.param(
            [claim("odd", "nobody-defined.example.com")],
            ["odd"],
            [SCHEDULING_GATE],
            id="undefined-class-counts-as-ours",
        ),
    ],
)
async def test_check_pod(
    api: tuple[FakeKubeApi, ApiStore],
    claims: list[dict[str, Any]],
    pod_claims: list[str],
    gates_left: list[str],
) -> None:
    fake, store = api
    for c in claims:
        await fake.put(RESOURCE_CLAIMS, c)
    stored = await fake.put(PODS, pod("p", pod_claims, (SCHEDULING_GATE, "other.io/gate")))
    await Gates(store).check_pod(stored)
    assert gates_of(fake, "p") == [*gates_left, "other.io/gate"]


async def test_claim_changes_lift_the_gates_of_the_pods_that_wait_for_them(
    api: tuple[FakeKubeApi, ApiStore],
) -> None:
    fake, store = api
    gates = Gates(store, watch_timeout=2.0)
    # What the pod informer would have recorded: two gated pods and their claims.
    waiting = await fake.put(PODS, pod("waits-for-nic", ["nic"]))
    ours = await fake.put(PODS, pod("waits-for-gpu", ["gpu"]))
    await gates.check_pod(waiting)
    await gates.check_pod(ours)
    gates.seen(waiting)
    gates.seen(ours)
    assert gates_of(fake, "waits-for-nic") == [SCHEDULING_GATE]

    # The foreign claim appears (created after its pod): its pod is let go, the other waits.
    await fake.put(RESOURCE_CLAIMS, claim("nic", "nic.example.com"))
    await fake.put(RESOURCE_CLAIMS, claim("gpu", "gpu.nvidia.com"))
    await gates.claim_changed("default", "nic")
    await gates.claim_changed("default", "gpu")
    assert gates_of(fake, "waits-for-nic") == []
    assert gates_of(fake, "waits-for-gpu") == [SCHEDULING_GATE]

    # gpudra allocates its claim: now that pod goes too.
    await fake.put(RESOURCE_CLAIMS, claim("gpu", "gpu.nvidia.com", allocated=True))
    await gates.claim_changed("default", "gpu")
    assert gates_of(fake, "waits-for-gpu") == []
    assert gates.lifted == 2


@pytest.mark.parametrize(
    ("expression", "ours"),
    [
        pytest.param('device.driver == "gpu.nvidia.com"', True, id="driver-double-quoted"),
        pytest.param("device.driver == 'gpu.nvidia.com'", True, id="driver-single-quoted"),
        pytest.param('device.attributes["gpu.nvidia.com"].type == "gpu"', True, id="attributes"),
        pytest.param('device.driver == "nic.example.com"', False, id="other-driver"),
        pytest.param('device.driver == "x.gpu.nvidia.com"', False, id="longer-name"),
        pytest.param("", True, id="no-selectors-selects-every-device"),
    ],
)
def test_serves(expression: str, ours: bool) -> None:
    doc = device_class("c", expression)
    if not expression:
        doc["spec"] = {}
    assert serves(doc, ["gpu.nvidia.com"]) is ours


async def test_builtin_classes_are_ours_without_reading_the_store(
    api: tuple[FakeKubeApi, ApiStore],
) -> None:
    fake, store = api
    ownership = Ownership(store)
    before = len(fake.requests)
    assert await ownership.class_is_ours("mig.nvidia.com")
    assert len(fake.requests) == before
    assert not await ownership.claim_is_ours(claim("nic", "nic.example.com"))
