"""Pod gates against the HTTP-level fake API: lifted for gpudra's allocated claims, never deadlocked
by claims that are not gpudra's (kube-scheduler allocates those only once the gate is gone)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from gpudra_claim_writer.claims import SCHEDULING_GATE, slim_pod
from gpudra_claim_writer.conftest import cancel_and_wait, until
from gpudra_claim_writer.events import PodEntry
from gpudra_claim_writer.gates import Gates
from gpudra_claim_writer.ownership import Ownership, serves
from gpudra_kube.api_backend import ApiStore, load_api_client
from gpudra_kube.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS
from gpudra_kube.store import EventType, WatchEvent
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


def watching(store: ApiStore) -> contextlib.AbstractAsyncContextManager[Gates]:
    """Gates with `run()` (the pod informer) going, once it has handled its list of pods."""
    return recording(store, [])


@pytest.mark.parametrize(
    "faults",
    [
        pytest.param([(503, "ServiceUnavailable", "PUT", "pods/p")], id="write-unavailable-once"),
        pytest.param(
            [(409, "Conflict", "PUT", "pods/p"), (503, "ServiceUnavailable", "GET", "pods/p")],
            id="re-read-fails",
        ),
        pytest.param(
            [(409, "Conflict", "PUT", "pods/p"), (429, "TooManyRequests", "GET", "pods/p")],
            id="re-read-throttled",
        ),
        pytest.param(
            [(503, "ServiceUnavailable", "GET", "resourceclaims/gpu")], id="claim-read-fails"
        ),
    ],
)
async def test_a_failed_gate_lift_is_not_fatal_and_is_tried_again(
    api: tuple[FakeKubeApi, ApiStore], faults: list[tuple[int, str, str, str]]
) -> None:
    """The API server answers a pod's gate lift (or a read it needs) with an error once: nothing
    is raised (out of `Gates.run`, or the intake's `on_claim`, that would end the claim-writer)
    and the gate is lifted in the end, although no further event of the claim or the pod comes
    (a gated pod gets no status updates; its allocated claim does not change until the pod is
    scheduled)."""
    fake, store = api
    await fake.put(RESOURCE_CLAIMS, claim("gpu", "gpu.nvidia.com"))
    await fake.put(PODS, pod("p", ["gpu"]))
    async with watching(store) as gates:
        assert gates_of(fake, "p") == [SCHEDULING_GATE], "its claim is pending"
        await fake.put(RESOURCE_CLAIMS, claim("gpu", "gpu.nvidia.com", allocated=True))
        gated = await store.get(PODS, "p", "default")
        for status, reason, method, path in faults:
            fake.inject_error(status, reason=reason, method=method, path_contains=path)
        await gates.check_pod(gated)  # as `run` does for the pod's event
        fake.clear_faults()
        # (`lifted` counts once the write's answer is in: after the fake has stored it.)
        await until(lambda: gates.lifted == 1 and not gates.retrying)
    assert gates_of(fake, "p") == []


async def test_a_gate_lift_failing_for_a_while_is_tried_again_until_it_succeeds(
    api: tuple[FakeKubeApi, ApiStore],
) -> None:
    """Every write of a pod fails for longer than one check's tries (an API server restart):
    the pod's watch event is the last trigger there is, so the lift is tried again later; a pod
    deleted meanwhile is forgotten."""
    fake, store = api
    await fake.put(RESOURCE_CLAIMS, claim("gpu", "gpu.nvidia.com", allocated=True))
    async with watching(store) as gates:
        fake.inject_error(503, reason="ServiceUnavailable", method="PUT", times=10**6)
        await fake.put(PODS, pod("p", ["gpu"]))
        await until(lambda: sum(1 for m, _ in fake.requests if m == "PUT") > 12)
        assert gates_of(fake, "p") == [SCHEDULING_GATE]
        assert gates.retrying == {("default", "p")}
        fake.clear_faults()
        await until(lambda: gates.lifted == 1 and not gates.retrying)
        assert gates_of(fake, "p") == []
        fake.inject_error(503, reason="ServiceUnavailable", method="PUT", times=10**6)
        await fake.put(PODS, pod("q", ["gpu"]))
        await until(lambda: gates.retrying == {("default", "q")})
        await store.delete(PODS, "q", "default")
        await until(lambda: not gates.retrying)
        fake.clear_faults()
    assert gates.lifted == 1


def workload_pod(name: str, claims: list[str]) -> dict[str, Any]:
    """A gated pod as users write them: most of its JSON is what gpudra never reads."""
    obj = pod(name, claims)
    obj["metadata"]["labels"] = {"app": "trainer"}
    obj["spec"]["containers"] = [
        {
            "name": "main",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["torchrun", "--nproc-per-node=8", "train.py"],
            "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "resources": {"claims": [{"name": "c0"}]},
        }
    ]
    obj["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    return obj


@contextlib.asynccontextmanager
async def recording(store: ApiStore, seen: list[dict[str, Any]]) -> AsyncIterator[Gates]:
    """Gates with `run()` going, once it has listed the pods; every pod its informer hands
    `on_pod` (added or changed) is appended to `seen`."""
    synced = asyncio.Event()

    async def on_pod(event: WatchEvent) -> None:
        if event.type is EventType.SYNCED:
            synced.set()
        elif event.type in (EventType.ADDED, EventType.MODIFIED):
            seen.append(event.object)

    gates = Gates(store, watch_timeout=2.0, on_pod=on_pod, retry_interval=0.1)
    task = asyncio.create_task(gates.run())
    try:
        await asyncio.wait_for(synced.wait(), 10)
        yield gates
    finally:
        await cancel_and_wait(task)


async def test_the_pod_watch_hands_on_slim_pods(api: tuple[FakeKubeApi, ApiStore]) -> None:
    """The pod informer keeps only what gpudra reads (`slim_pod`): that is what `on_pod`
    (`PodUnits.pod_changed`) gets, and `PodUnits` reads the same entry from it as from the
    whole pod."""
    fake, store = api
    await fake.put(RESOURCE_CLAIMS, claim("gpu", "gpu.nvidia.com"))
    stored = await fake.put(PODS, workload_pod("p", ["gpu"]))
    seen: list[dict[str, Any]] = []
    async with recording(store, seen):
        pass
    assert seen == [slim_pod(stored)]
    assert "containers" not in seen[0]["spec"]
    entry = PodEntry.of(seen[0])
    assert entry is not None
    assert entry == PodEntry.of(stored)
    assert entry.created == stored["metadata"]["creationTimestamp"]


async def test_a_gate_lifted_from_the_watch_keeps_the_whole_pod(
    api: tuple[FakeKubeApi, ApiStore],
) -> None:
    """The watch's copy of a pod is slim; lifting its gate writes the whole pod back, read from
    the store: every container and volume as it was, the gate alone gone."""
    fake, store = api
    await fake.put(RESOURCE_CLAIMS, claim("gpu", "gpu.nvidia.com", allocated=True))
    seen: list[dict[str, Any]] = []
    async with recording(store, seen) as gates:
        stored = await fake.put(PODS, workload_pod("p", ["gpu"]))
        await until(lambda: gates.lifted == 1)
    lifted = await store.get(PODS, "p", "default")
    expected = {k: v for k, v in stored["spec"].items() if k != "schedulingGates"}
    assert lifted["spec"] == expected
    assert lifted["metadata"]["labels"] == {"app": "trainer"}
