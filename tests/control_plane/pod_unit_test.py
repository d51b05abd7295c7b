"""A pod's claims as one unit across the three services: on one node together, or none reserved.

Three DGX H100 nodes (8 GPUs each), two allocator replicas, the claim-writer watching pods in the
standalone store as it watches them in a cluster. Pods are written as Kubernetes writes them: the
pod names ResourceClaimTemplates, its claims are created owned by the pod, then the pod's
`status.resourceClaimStatuses` names them (the resourceclaim controller's order).
- a pod with 4 + 4 GPUs, applied from a manifest as `gpudra apply` does, lands on one node;
- a pod with 5 + 5 GPUs would fit claim by claim (two free nodes) but never on one node: it stays
  pending, both claims say why, and nothing is reserved for either;
- a gang of 2 pods x (4 + 3) GPUs: each pod's claims on one node, the two pods on two nodes;
- a claim allocated before its pod existed pins the pod's other claim to its node;
- a claim deleted and re-created after its pod's decision is decided beside the pod's other claim;
- in kubernetes mode (the fake API server), a gated pod's claims land on one node and its gate
  lifts, while a pod whose claims fit only apart stays gated with nothing reserved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from control_plane.cluster import (
    UNSCHEDULABLE,
    Cluster,
    claim_manifest,
    claims,
    devices_of,
    publish_nodes,
    slices_ready,
    wait_for,
)
from control_plane.gang_test import holders
from gpudra_cli.standalone.apply import apply_plan
from gpudra_cli.standalone.client import Client as CliClient
from gpudra_cli.standalone.manifests import plan_files
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import PODS, RESOURCE_CLAIMS
from gpudra_testing.kubeapi import FakeKubeApi

pytestmark = pytest.mark.slow

NODES = ["node-1", "node-2", "node-3"]
FITS_MANIFEST = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: fits-gpu0}
spec:
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 4}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: fits-gpu1}
spec:
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 4}}]
---
apiVersion: v1
kind: Pod
metadata: {name: fits}
spec:
  resourceClaims:
    - {name: a, resourceClaimTemplateName: fits-gpu0}
    - {name: b, resourceClaimTemplateName: fits-gpu1}
  containers: [{name: main, image: busybox}]
"""


async def create_pod(
    store: KvStore,
    name: str,
    gpus: list[int],
    annotations: dict[str, str] | None = None,
    named: tuple[str, ...] = (),
) -> None:
    """A pod with one template claim per entry of `gpus` (that many GPUs each), as Kubernetes
    creates it: pod, then its claims (owned by it), then the pod status naming them; `named`:
    existing claims the pod also uses (`resourceClaimName`)."""
    entries = [f"gpu{i}" for i in range(len(gpus))]
    pod = await store.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "schedulingGates": [{"name": "gpudra.io/allocation"}],
                "containers": [{"name": "main", "image": "busybox"}],
                "resourceClaims": [
                    {"name": e, "resourceClaimTemplateName": f"tpl-{e}"} for e in entries
                ]
                + [{"name": f"named-{c}", "resourceClaimName": c} for c in named],
            },
        },
    )
    for entry, count in zip(entries, gpus, strict=True):
        claim = claim_manifest(f"{name}-{entry}", count=count)
        claim["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": name,
                "uid": pod["metadata"]["uid"],
                "controller": True,
            }
        ]
        if annotations:
            claim["metadata"]["annotations"] = dict(annotations)
        await store.create(RESOURCE_CLAIMS, claim)
    pod["status"] = {
        "resourceClaimStatuses": [{"name": e, "resourceClaimName": f"{name}-{e}"} for e in entries]
    }
    await store.replace_status(PODS, pod)


def nodes_of(claim: dict[str, Any]) -> set[str]:
    return {pool for _, pool, _ in devices_of(claim)}


def reason(claim: dict[str, Any]) -> str:
    return str((claim["metadata"].get("annotations") or {}).get(UNSCHEDULABLE, ""))


async def test_a_pods_claims_land_on_one_node_or_hold_nothing(
    nc: Client, cluster: Cluster, tmp_path: Path
) -> None:
    store = KvStore(nc)
    await publish_nodes(nc, NODES)
    cluster.start_inventory()
    cluster.start_allocator("allocator-1")
    cluster.start_allocator("allocator-2")
    cluster.start_claim_writer()
    await slices_ready(nc, cluster, len(NODES), "every node's slices")

    # 4 + 4 GPUs: both claims, one node (a whole one). Applied as `gpudra apply` applies a
    # manifest: the pod recorded, its template claims generated and owned by it.
    manifest = tmp_path / "fits.yaml"
    manifest.write_text(FITS_MANIFEST, encoding="utf-8")
    plan = plan_files([manifest])
    assert [c["metadata"]["name"] for c in plan.claims] == ["fits-gpu0-0", "fits-gpu1-0"]
    await apply_plan(CliClient(nc, store), plan)

    async def fits() -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        found = [objs.get(f"fits-gpu{i}-0") for i in range(2)]
        return objs if all(c and devices_of(c) for c in found) else None

    objs = await wait_for(fits, 60, "the 4+4 pod allocated", cluster)
    first = nodes_of(objs["fits-gpu0-0"]) | nodes_of(objs["fits-gpu1-0"])
    assert len(first) == 1, f"one pod, one node: {first}"

    # 5 + 5 GPUs: claim by claim they would take the two free nodes; as a pod, nothing.
    await create_pod(store, "split", [5, 5])

    async def refused() -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        found = [objs.get(f"split-gpu{i}") for i in range(2)]
        return objs if all(c and "do not fit together" in reason(c) for c in found) else None

    objs = await wait_for(refused, 60, "both claims of the 5+5 pod explained", cluster)
    assert "pod default/split: its 2 claims do not fit together on one node" in reason(
        objs["split-gpu0"]
    ), reason(objs["split-gpu0"])
    assert not devices_of(objs["split-gpu0"])
    assert not devices_of(objs["split-gpu1"])
    assert await holders(nc) == {"default/fits-gpu0-0", "default/fits-gpu1-0"}

    # A gang of two pods, 4 + 3 GPUs each: each pod on one node, so the two free nodes.
    gang = {"gpudra.io/gang": "train", "gpudra.io/gang-size": "4"}
    await create_pod(store, "train-0", [4, 3], gang)
    await create_pod(store, "train-1", [4, 3], gang)

    async def gang_placed() -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        found = [objs.get(f"train-{p}-gpu{i}") for p in range(2) for i in range(2)]
        return objs if all(c and devices_of(c) for c in found) else None

    objs = await wait_for(gang_placed, 60, "the 2-pod gang allocated", cluster)
    pod_nodes = []
    for p in range(2):
        node = nodes_of(objs[f"train-{p}-gpu0"]) | nodes_of(objs[f"train-{p}-gpu1"])
        assert len(node) == 1, f"pod train-{p} split over {node}"
        pod_nodes.append(node.pop())
    assert len(set(pod_nodes)) == 2, pod_nodes
    assert not set(pod_nodes) & first
    used = [d for c in objs.values() for d in devices_of(c)]
    assert len(used) == len(set(used)) == 4 + 4 + 2 * (4 + 3)
    assert not devices_of(objs["split-gpu0"])
    assert not devices_of(objs["split-gpu1"])

    # The first pod goes: its claims are deleted; the 5+5 pod still never splits.
    for i in range(2):
        await store.delete(RESOURCE_CLAIMS, f"fits-gpu{i}-0", "default")

    async def freed() -> bool:
        return "default/fits-gpu0-0" not in await holders(nc)

    await wait_for(freed, 60, "the first pod's devices released", cluster)
    objs = await claims(store)
    assert not devices_of(objs["split-gpu0"])
    assert not devices_of(objs["split-gpu1"])
    assert not {"default/split-gpu0", "default/split-gpu1"} & await holders(nc)

    # A claim allocated before any pod used it pins the claims of the pod that comes later: the
    # 1-GPU claim joins it on node-1 although two nodes have exactly one GPU left (where a lone
    # 1-GPU claim would go under the topology policy, which fills partly used nodes first).
    await store.create(RESOURCE_CLAIMS, claim_manifest("early", count=2))

    async def early() -> dict[str, Any] | None:
        objs = await claims(store)
        return objs if devices_of(objs.get("early") or {}) else None

    objs = await wait_for(early, 60, "the early claim allocated", cluster)
    (home,) = nodes_of(objs["early"])
    await create_pod(store, "late", [1], named=("early",))

    async def pinned() -> dict[str, Any] | None:
        objs = await claims(store)
        return objs if devices_of(objs.get("late-gpu0") or {}) else None

    objs = await wait_for(pinned, 60, "the late pod's own claim allocated", cluster)
    assert nodes_of(objs["late-gpu0"]) == {home}

    # A claim that joins its pod after the pod's decision (deleted and re-created, as a pod's
    # template claim is when someone deletes it) is decided too, beside the pod's other claim.
    await create_pod(store, "again", [2, 2])

    async def both() -> dict[str, Any] | None:
        objs = await claims(store)
        found = [objs.get(f"again-gpu{i}") for i in range(2)]
        return objs if all(c and devices_of(c) for c in found) else None

    objs = await wait_for(both, 60, "the 2+2 pod allocated", cluster)
    again = nodes_of(objs["again-gpu0"])
    assert nodes_of(objs["again-gpu1"]) == again
    old_uid = objs["again-gpu1"]["metadata"]["uid"]
    await store.delete(RESOURCE_CLAIMS, "again-gpu1", "default")

    async def gone() -> bool:
        return "again-gpu1" not in await claims(store)

    await wait_for(gone, 30, "the claim deleted", cluster)
    owner = await store.get(PODS, "again", "default")
    recreated = claim_manifest("again-gpu1", count=2)
    recreated["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "again",
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }
    ]
    await store.create(RESOURCE_CLAIMS, recreated)

    async def rejoined() -> dict[str, Any] | None:
        objs = await claims(store)
        claim = objs.get("again-gpu1") or {}
        return objs if claim["metadata"]["uid"] != old_uid and devices_of(claim) else None

    objs = await wait_for(rejoined, 60, "the re-created claim allocated", cluster)
    assert nodes_of(objs["again-gpu1"]) == again, "beside the pod's other claim"
    used = [d for c in objs.values() for d in devices_of(c)]
    assert len(used) == len(set(used)), "no device twice"
    logs = cluster.logs()
    assert "Traceback" not in logs, logs


async def test_kubernetes_mode_a_gated_pods_claims_land_together_and_the_gate_lifts(
    nc: Client, cluster: Cluster, tmp_path: Path
) -> None:
    """The claim-writer against the (fake) API server: it learns the pod from the pod watch, the
    pod's 5 + 3 GPU claims (named, created after the pod) go to one node, the gate lifts."""
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as api:
        kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
        await publish_nodes(nc, ["node-a", "node-b"])
        cluster.start_inventory("--mode", "kubernetes", "--kubeconfig", kubeconfig)
        cluster.start_allocator()
        cluster.start_claim_writer("--mode", "kubernetes", "--kubeconfig", kubeconfig)
        await slices_ready(nc, cluster, 2, "both nodes' slices")
        # One GPU of each node is taken already (kube-scheduler, adopted): 7 + 7 free, so a pod
        # of 5 + 3 fits on neither node as a unit; 4 + 3 fits on either.
        for node in ("node-a", "node-b"):
            taken = claim_manifest(f"taken-{node}", count=1)
            taken["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": "gpu.nvidia.com",
                                "pool": node,
                                "device": "gpu-0",
                            }
                        ]
                    }
                }
            }
            await api.put(RESOURCE_CLAIMS, taken)

        async def adopted() -> bool:
            return {"default/taken-node-a", "default/taken-node-b"} <= await holders(nc)

        await wait_for(adopted, 30, "the taken GPUs adopted", cluster)

        def find(resource: Any, name: str) -> dict[str, Any] | None:
            return next((o for o in api.objects(resource) if o["metadata"]["name"] == name), None)

        # The trainer names its claims (created after it: should the claim watch win the race
        # with the pod watch, a claim goes alone and pins the other, still one node); the 5+3
        # pod's claims come from templates, owned by it, so they never go alone.
        for name, gpus in (("too-big", (5, 3)), ("trainer", (4, 3))):
            templated = name == "too-big"
            key = "resourceClaimTemplateName" if templated else "resourceClaimName"
            pod = await api.put(
                PODS,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {
                        "schedulingGates": [{"name": "gpudra.io/allocation"}],
                        "containers": [{"name": "main", "image": "busybox"}],
                        "resourceClaims": [
                            {"name": f"c{i}", key: f"{name}-{i}"} for i in range(len(gpus))
                        ],
                    },
                },
            )
            for i, count in enumerate(gpus):
                claim = claim_manifest(f"{name}-{i}", count=count)
                if templated:
                    claim["metadata"]["ownerReferences"] = [
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": name,
                            "uid": pod["metadata"]["uid"],
                            "controller": True,
                        }
                    ]
                await api.put(RESOURCE_CLAIMS, claim)
            if templated:
                pod["status"] = {
                    "resourceClaimStatuses": [
                        {"name": f"c{i}", "resourceClaimName": f"{name}-{i}"}
                        for i in range(len(gpus))
                    ]
                }
                await api.put(PODS, pod)

        async def ungated() -> bool:
            claims = [find(RESOURCE_CLAIMS, f"trainer-{i}") for i in range(2)]
            pod = find(PODS, "trainer")
            allocated = all(c and devices_of(c) for c in claims)
            return bool(allocated and pod and not pod["spec"].get("schedulingGates"))

        await wait_for(
            ungated, 60, "the trainer pod's claims allocated and its gate lifted", cluster
        )
        c0, c1 = find(RESOURCE_CLAIMS, "trainer-0"), find(RESOURCE_CLAIMS, "trainer-1")
        assert c0 is not None
        assert c1 is not None
        assert len(nodes_of(c0) | nodes_of(c1)) == 1

        async def refused() -> bool:
            claims = [find(RESOURCE_CLAIMS, f"too-big-{i}") for i in range(2)]
            return all(c and "do not fit together" in reason(c) for c in claims)

        await wait_for(refused, 60, "the 5+3 pod's claims explained", cluster)
        for i in range(2):
            waiting = find(RESOURCE_CLAIMS, f"too-big-{i}")
            assert waiting is not None
            assert not devices_of(waiting)
        too_big = find(PODS, "too-big")
        assert too_big is not None
        assert too_big["spec"].get("schedulingGates"), "gated while its claims wait"
        assert not {"default/too-big-0", "default/too-big-1"} & await holders(nc)
        logs = cluster.logs()
        assert "Traceback" not in logs, logs
