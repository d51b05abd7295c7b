"""A claim's life after its last consumer, across the three services (real NATS, processes).

- Standalone mode (the claim-writer records consumers itself): a pod that names a claim gets it
  allocated and is added to its `reservedFor`; once the pod is deleted the claim is released, its
  devices are free, and it is NOT allocated again with nobody to use it (it carries
  `gpudra.io/consumers-left`); a new pod naming it brings it back: allocated, reserved for that pod.
  A pod deleted while the claim-writer was down releases its claim the same way at the restart.
- Kubernetes mode (the fake API server): kube-controller-manager clearing a claim after its pod
  left frees the devices and the claim waits (marked) for the next pod that names it — also when
  the clearing happened while the claim-writer was down (seen at its restart), and also for a
  claim kube-scheduler allocated itself (no scheduling gate: adopted); a claim that
  cannot be placed gets a Warning `FailedAllocation` Event whose note is the allocator's
  explanation.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from control_plane.cluster import (
    UNSCHEDULABLE,
    Cluster,
    all_started,
    claim_manifest,
    claim_or_none,
    devices_of,
    publish_nodes,
    slices_ready,
    wait_for,
)
from control_plane.gang_test import holders as held
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.claims import ClaimStore
from gpudra_kube.consumers import Outcome, unreserve
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import EVENTS, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra_testing.kubeapi import FakeKubeApi

pytestmark = pytest.mark.slow

CONSUMERS_LEFT = "gpudra.io/consumers-left"
ALLOCATION_ID = "gpudra.io/allocation-id"


def _find(api: FakeKubeApi, resource: Any, name: str) -> dict[str, Any] | None:
    return next((o for o in api.objects(resource) if o["metadata"]["name"] == name), None)


async def _job_1_gone(api: FakeKubeApi, kubeconfig: str) -> dict[str, Any]:
    """Pod job-1 is deleted and kube-controller-manager clears claim `data`'s status
    (`reservedFor` and the allocation together); the claim as stored then."""
    client = await ApiStore.from_kubeconfig(kubeconfig)
    try:
        await client.delete(PODS, "job-1", "default")
    finally:
        await client.close()
    cleared = _find(api, RESOURCE_CLAIMS, "data")
    assert cleared is not None
    cleared["status"] = {}
    return await api.put(RESOURCE_CLAIMS, cleared)


async def _ungated(api: FakeKubeApi, pod: str) -> dict[str, Any] | None:
    """Claim `data` once it is allocated and `pod`'s scheduling gate is lifted."""
    claim, p = _find(api, RESOURCE_CLAIMS, "data"), _find(api, PODS, pod)
    ready = claim and devices_of(claim) and p and not p["spec"].get("schedulingGates")
    return claim if ready else None


async def _reserved_for_job_1(
    api: FakeKubeApi, nc: Client, cluster: Cluster, kube: tuple[str, ...]
) -> None:
    """Kubernetes mode: the three services up, claim `data` allocated for pod job-1 and reserved
    for it (as kube-scheduler does when it binds the pod)."""
    await publish_nodes(nc, ["node-k"])
    cluster.start_inventory(*kube)
    cluster.start_allocator()
    cluster.start_claim_writer(*kube)
    await slices_ready(nc, cluster, 1)
    first = await api.put(PODS, pod_naming("job-1", "data"))
    await api.put(RESOURCE_CLAIMS, claim_manifest("data", count=2))
    claim = await wait_for(lambda: _ungated(api, "job-1"), 60, "data allocated for job-1", cluster)
    assert await held(nc) == {"default/data"}
    claim["status"]["reservedFor"] = [
        {"resource": "pods", "name": "job-1", "uid": first["metadata"]["uid"]}
    ]
    await api.put(RESOURCE_CLAIMS, claim)


async def _released_then_given_to_job_2(
    api: FakeKubeApi, nc: Client, cluster: Cluster, when: str
) -> None:
    """Claim `data` is released (devices free) and marked, stays unallocated with nobody to use
    it, and is allocated again once pod job-2 names it."""

    async def released() -> dict[str, Any] | None:
        claim = _find(api, RESOURCE_CLAIMS, "data")
        marked = CONSUMERS_LEFT in ((claim or {}).get("metadata", {}).get("annotations") or {})
        free = "default/data" not in await held(nc)
        return claim if marked and free and not devices_of(claim or {}) else None

    await wait_for(released, 60, f"data released and marked {when}", cluster)
    await asyncio.sleep(3.0)
    still = _find(api, RESOURCE_CLAIMS, "data")
    assert still is not None
    assert not devices_of(still), f"re-allocated with no consumer {when}"

    await api.put(PODS, pod_naming("job-2", "data"))
    await wait_for(lambda: _ungated(api, "job-2"), 60, "data allocated for job-2", cluster)
    logs = cluster.logs()
    assert "Traceback" not in logs, logs


async def _job_1_leaves_while_the_claim_writer_is_down(
    api: FakeKubeApi, nc: Client, cluster: Cluster, kubeconfig: str
) -> None:
    """The claim-writer is killed, pod job-1 deleted, and kube-controller-manager clears claim
    `data`'s allocation and then removes its finalizer: the allocator still holds its devices."""
    cluster.kill("claim-writer")
    cleared = await _job_1_gone(api, kubeconfig)
    del cleared["metadata"]["finalizers"]
    await api.put(RESOURCE_CLAIMS, cleared)
    assert await held(nc) == {"default/data"}, "nobody told the allocator yet"


def pod_naming(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingGates": [{"name": "gpudra.io/allocation"}],
            "containers": [{"name": "main", "image": "busybox"}],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": claim}],
        },
    }


def consumers(claim: dict[str, Any] | None) -> list[str]:
    reserved = ((claim or {}).get("status") or {}).get("reservedFor") or []
    return [str(r.get("name")) for r in reserved]


async def used_by(store: KvStore, pod: str) -> dict[str, Any] | None:
    """Claim `data`, once it is allocated and `pod` is its one consumer."""
    claim = await claim_or_none(store, "data")
    return claim if devices_of(claim or {}) and consumers(claim) == [pod] else None


async def _standalone_data_for(
    nc: Client, cluster: Cluster, store: KvStore, pod: str
) -> dict[str, Any]:
    """Standalone mode, one node: the three services up, pod `pod` and claim `data` created;
    the claim once it is allocated with `pod` its one consumer."""
    await publish_nodes(nc, ["node-1"])
    cluster.start_inventory()
    cluster.start_allocator()
    cluster.start_claim_writer()
    await slices_ready(nc, cluster, 1)
    await store.create(PODS, pod_naming(pod, "data"))
    await store.create(RESOURCE_CLAIMS, claim_manifest("data", count=2))
    claim: dict[str, Any] = await wait_for(
        lambda: used_by(store, pod), 60, f"data allocated for {pod}", cluster
    )
    return claim


async def test_a_claim_whose_pod_left_waits_for_the_next_pod(nc: Client, cluster: Cluster) -> None:
    store = KvStore(nc)
    first = await _standalone_data_for(nc, cluster, store, "job-1")
    assert await held(nc) == {"default/data"}
    first_devices = devices_of(first)
    assert len(first_devices) == 2

    # The job is done: its pod goes. The claim is released and its devices are free ...
    await store.delete(PODS, "job-1", "default")

    async def released() -> dict[str, Any] | None:
        claim = await claim_or_none(store, "data")
        idle = claim is not None and not devices_of(claim) and "default/data" not in await held(nc)
        return claim if idle else None

    idle = await wait_for(released, 60, "data released and its devices free", cluster)
    assert consumers(idle) == []
    assert CONSUMERS_LEFT in (idle["metadata"].get("annotations") or {})
    # ... and nobody allocates it again: not at the release, not on the allocator's retries
    # (every second here), not when another claim changes the inventory's use.
    await store.create(RESOURCE_CLAIMS, claim_manifest("other", count=1))
    await wait_for(
        lambda: _allocated(store, "other"), 60, "an unrelated claim allocated meanwhile", cluster
    )
    await asyncio.sleep(3.0)
    still = await claim_or_none(store, "data")
    assert still is not None
    assert not devices_of(still), "re-allocated with no consumer"
    assert await held(nc) == {"default/other"}
    assert UNSCHEDULABLE not in (still["metadata"].get("annotations") or {})

    # The next pod that names it brings it back, reserved for that pod.
    await store.create(PODS, pod_naming("job-2", "data"))
    again = await wait_for(lambda: used_by(store, "job-2"), 60, "data allocated for job-2", cluster)
    assert len(devices_of(again)) == 2
    assert await held(nc) == {"default/data", "default/other"}
    pod = await store.get(PODS, "job-2", "default")
    assert not pod["spec"].get("schedulingGates"), "the new pod's gate lifted"
    logs = cluster.logs()
    assert "Traceback" not in logs, logs


async def _allocated(store: KvStore, name: str) -> bool:
    return bool(devices_of(await claim_or_none(store, name) or {}))


async def test_kubernetes_mode_an_unschedulable_claim_gets_a_failed_allocation_event(
    nc: Client, cluster: Cluster, tmp_path: Path
) -> None:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as api:
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        await publish_nodes(nc, ["node-k"])
        cluster.start_inventory("--mode", "kubernetes", "--kubeconfig", kubeconfig)
        cluster.start_allocator()
        cluster.start_claim_writer("--mode", "kubernetes", "--kubeconfig", kubeconfig)
        await slices_ready(nc, cluster, 1)
        # Nine GPUs on a node of eight: never placed.
        stored = await api.put(RESOURCE_CLAIMS, claim_manifest("too-big", count=9))

        def failed() -> list[dict[str, Any]]:
            return [
                e
                for e in api.objects(EVENTS)
                if e.get("reason") == "FailedAllocation"
                and (e.get("regarding") or {}).get("name") == "too-big"
            ]

        async def explained() -> list[dict[str, Any]]:
            return failed()

        (event, *more) = await wait_for(explained, 60, "a FailedAllocation Event", cluster)
        assert not more, "repeats fold into one Event's series"
        assert event["type"] == "Warning"
        assert event["action"] == "Allocate"
        regarding = event["regarding"]
        assert regarding["kind"] == "ResourceClaim"
        assert regarding["uid"] == stored["metadata"]["uid"]
        assert regarding["namespace"] == "default"
        claim = next(o for o in api.objects(RESOURCE_CLAIMS) if o["metadata"]["name"] == "too-big")
        reason = (claim["metadata"].get("annotations") or {}).get(UNSCHEDULABLE, "")
        assert reason, "the claim says why too"
        assert event["note"][:60] == reason[:60], (event["note"], reason)
        assert not devices_of(claim)
        logs = cluster.logs()
        assert "Traceback" not in logs, logs


async def test_kubernetes_mode_a_claim_cleared_after_its_pod_waits_for_the_next_pod(
    nc: Client, cluster: Cluster, tmp_path: Path
) -> None:
    """kube-scheduler reserved the claim for its pod; the pod is deleted and kube-controller-
    manager clears the claim's reservation and allocation: gpudra frees the devices and does not
    allocate the claim again until a new (gated) pod names it."""
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as api:
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        await _reserved_for_job_1(
            api, nc, cluster, ("--mode", "kubernetes", "--kubeconfig", kubeconfig)
        )
        await asyncio.sleep(1.0)  # the claim-writer sees the consumer
        # The pod goes; kube-controller-manager clears reservedFor and the allocation together.
        await _job_1_gone(api, kubeconfig)
        await _released_then_given_to_job_2(api, nc, cluster, "")


async def test_a_claim_whose_pod_finished_waits_for_the_next_pod(
    nc: Client, cluster: Cluster
) -> None:
    """A Job's pod finishes and stays (phase Succeeded): the claim is released and waits; the
    Job's next pod, created later beside the finished one, gets it."""
    store = KvStore(nc)
    await _standalone_data_for(nc, cluster, store, "run-1")
    finished = await store.get(PODS, "run-1", "default")
    finished["status"] = {"phase": "Succeeded"}
    await store.replace_status(PODS, finished)

    async def released() -> dict[str, Any] | None:
        claim = await claim_or_none(store, "data")
        idle = claim is not None and not devices_of(claim) and "default/data" not in await held(nc)
        return claim if idle else None

    await wait_for(released, 60, "data released and its devices free", cluster)
    await asyncio.sleep(3.0)
    still = await claim_or_none(store, "data")
    assert still is not None
    assert not devices_of(still), "re-allocated for a finished pod"
    await store.create(PODS, pod_naming("run-2", "data"))
    await wait_for(lambda: used_by(store, "run-2"), 60, "data allocated for run-2", cluster)
    logs = cluster.logs()
    assert "Traceback" not in logs, logs


async def test_kubernetes_mode_a_claim_cleared_while_the_claim_writer_was_down_is_released(
    nc: Client, cluster: Cluster, tmp_path: Path
) -> None:
    """The claim-writer is killed while the claim is reserved for its pod; the pod goes and
    kube-controller-manager clears the allocation and then removes the delete-protection finalizer.
    The restarted claim-writer releases the devices and marks the claim, which waits for the next
    pod instead of getting its old allocation back."""
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as api:
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        kube = ("--mode", "kubernetes", "--kubeconfig", kubeconfig)
        await _reserved_for_job_1(api, nc, cluster, kube)

        await _job_1_leaves_while_the_claim_writer_is_down(api, nc, cluster, kubeconfig)
        cluster.start_claim_writer(*kube)
        await all_started(cluster)
        await _released_then_given_to_job_2(api, nc, cluster, "after the restart")


async def test_kubernetes_mode_a_claim_kube_scheduler_allocated_is_released_after_a_restart(
    nc: Client, cluster: Cluster, tmp_path: Path
) -> None:
    """No scheduling gate (production leaves it out): kube-scheduler allocates the claim from
    gpudra's slices itself and the claim-writer adopts it (the allocator holds its devices). The
    claim-writer is killed; the pod goes, kube-controller-manager clears the allocation and removes
    the finalizer. The restarted claim-writer releases the devices and marks the claim, which
    waits for the next pod instead of being allocated again."""
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as api:
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        kube = ("--mode", "kubernetes", "--kubeconfig", kubeconfig)
        await api.put(NODES, {"metadata": {"name": "node-k"}})  # the slices' owner
        await publish_nodes(nc, ["node-k"])
        cluster.start_inventory(*kube)
        cluster.start_allocator()
        cluster.start_claim_writer(*kube)
        await slices_ready(nc, cluster, 1)
        pool, devices = await wait_for(lambda: _two_gpus(api), 60, "node-k's GPU slice", cluster)
        ungated = pod_naming("job-1", "data")
        del ungated["spec"]["schedulingGates"]
        job_1 = await api.put(PODS, ungated)
        # kube-scheduler binds job-1: the finalizer, then the allocation and the reservation.
        scheduled = claim_manifest("data", count=2)
        scheduled["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
        scheduled["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": pool, "device": d}
                        for d in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-k"]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": "job-1", "uid": job_1["metadata"]["uid"]}],
        }
        await api.put(RESOURCE_CLAIMS, scheduled)

        async def adopted() -> str:
            claim = _find(api, RESOURCE_CLAIMS, "data") or {}
            witness = (claim["metadata"].get("annotations") or {}).get(ALLOCATION_ID, "")
            return witness if witness and await held(nc) == {"default/data"} else ""

        witness = await wait_for(adopted, 60, "data adopted, with an allocation id", cluster)

        await _job_1_leaves_while_the_claim_writer_is_down(api, nc, cluster, kubeconfig)
        cluster.start_claim_writer(*kube)
        await all_started(cluster)
        await _released_then_given_to_job_2(api, nc, cluster, "after the restart")
        marked = _find(api, RESOURCE_CLAIMS, "data") or {}
        assert marked["metadata"]["annotations"][CONSUMERS_LEFT] == witness, "marked for it"


async def _two_gpus(api: FakeKubeApi) -> tuple[str, list[str]] | None:
    """The pool of a gpudra ResourceSlice in the API and two of its whole GPUs."""
    for found in api.objects(RESOURCE_SLICES):
        spec = found.get("spec") or {}
        names = {str(d.get("name")) for d in spec.get("devices") or []}
        if spec.get("driver") == "gpu.nvidia.com" and {"gpu-0", "gpu-1"} <= names:
            return str(spec["pool"]["name"]), ["gpu-0", "gpu-1"]
    return None


async def test_a_claim_whose_pod_left_while_the_claim_writer_was_down_is_released(
    nc: Client, cluster: Cluster
) -> None:
    """Standalone: the claim-writer keeps `reservedFor` itself. It removed the last consumer of a
    claim (its pod was deleted), which cleared the allocation, and was killed before its intake
    reported the release. The restarted claim-writer reports it and marks the claim."""
    store = KvStore(nc)
    await _standalone_data_for(nc, cluster, store, "job-1")
    pod = await store.get(PODS, "job-1", "default")

    cluster.kill("claim-writer")
    await store.delete(PODS, "job-1", "default")
    # What its consumers loop did last: the allocation cleared, the finalizer dropped.
    assert await unreserve(ClaimStore(store), "default", "data", pod["metadata"]["uid"]) is (
        Outcome.RELEASED
    )
    assert await held(nc) == {"default/data"}, "nobody told the allocator yet"
    cluster.start_claim_writer()
    await all_started(cluster)

    async def released() -> dict[str, Any] | None:
        claim = await claim_or_none(store, "data")
        marked = CONSUMERS_LEFT in ((claim or {}).get("metadata", {}).get("annotations") or {})
        free = "default/data" not in await held(nc)
        return claim if marked and free and not devices_of(claim or {}) else None

    await wait_for(released, 60, "data released and marked after the restart", cluster)
    await asyncio.sleep(3.0)
    still = await claim_or_none(store, "data")
    assert still is not None
    assert not devices_of(still), "re-allocated with no consumer after the restart"
    await store.create(PODS, pod_naming("job-2", "data"))
    await wait_for(lambda: used_by(store, "job-2"), 60, "data allocated for job-2", cluster)
    logs = cluster.logs()
    assert "Traceback" not in logs, logs
