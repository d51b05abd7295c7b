"""The three control-plane services as separate processes against a real nats-server.

Claims go in through the standalone claim store (as `gpudra apply` writes them), simulated
node-agents publish DGX H100 inventories, and the assertions read what the claim-writer wrote back.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections import Counter
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
    claims,
    devices_of,
    kubernetes_mode,
    logged,
    publish_nodes,
    slices_ready,
    wait_for,
)
from gpudra_bus import (
    DEADLETTER_STREAM,
    RESERVATIONS_BUCKET,
)
from gpudra_kube.errors import KubeRetryableError
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import (
    DEVICE_CLASSES,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)
from gpudra_standalone.nats_server import NatsServer
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.kvkeys import bucket_keys

pytestmark = pytest.mark.slow

FINALIZER = "resource.kubernetes.io/delete-protection"
TRACEPARENT = "gpudra.io/traceparent"


def all_distinct(objs: dict[str, dict[str, Any]]) -> list[tuple[str, str, str]]:
    used = [d for c in objs.values() for d in devices_of(c)]
    duplicates = [d for d, n in Counter(used).items() if n > 1]
    assert not duplicates, f"devices allocated twice: {duplicates}"
    return used


async def test_claims_in_allocations_out_delete_releases_one_trace(
    nc: Client, cluster: Cluster
) -> None:
    store = KvStore(nc)
    await publish_nodes(nc, ["node-a", "node-b"])
    cluster.start_inventory()
    cluster.start_allocator()
    cluster.start_claim_writer()
    await slices_ready(nc, cluster, 2)

    # A claim of a class nobody applied yet waits (with a reason) until the class is applied.
    await store.create(RESOURCE_CLAIMS, claim_manifest("custom", device_class="h100.example.com"))

    async def custom_is(pred: Any) -> Any:
        claim = await claim_or_none(store, "custom")
        return claim if claim and pred(claim) else None

    waiting = await wait_for(lambda: custom_is(_reason), 30, "a missing-class reason", cluster)
    assert _reason(waiting) == "device class h100.example.com not found"
    await store.create(
        DEVICE_CLASSES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "h100.example.com"},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": 'device.attributes["gpu.nvidia.com"].productName'
                            ' == "NVIDIA H100 80GB HBM3"'
                        }
                    }
                ]
            },
        },
    )
    await wait_for(lambda: custom_is(devices_of), 30, "the custom-class claim allocated", cluster)

    for i in range(7):
        await store.create(RESOURCE_CLAIMS, claim_manifest(f"pair-{i}", count=2))
    await store.create(RESOURCE_CLAIMS, claim_manifest("too-big", count=9))

    async def settled() -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        pairs = [objs.get(f"pair-{i}") for i in range(7)]
        big = objs.get("too-big")
        if all(p and devices_of(p) for p in pairs) and big and _reason(big):
            return objs
        return None

    objs = await wait_for(settled, 60, "7 allocations and one unschedulable reason", cluster)
    used = all_distinct(objs)
    assert len(used) == 15
    assert all(FINALIZER in objs[f"pair-{i}"]["metadata"]["finalizers"] for i in range(7))
    assert "node" in _reason(objs["too-big"]), _reason(objs["too-big"])
    for i in range(7):
        node = objs[f"pair-{i}"]["status"]["allocation"]["nodeSelector"]
        pools = {pool for _, pool, _ in devices_of(objs[f"pair-{i}"])}
        assert len(pools) == 1
        assert pools.pop() in str(node)

    # Four GPUs on one node: only after two claims on the same node are deleted.
    await store.create(RESOURCE_CLAIMS, claim_manifest("quad", count=4))

    async def quad_waits() -> Any:
        quad = await claim_or_none(store, "quad")
        return quad and _reason(quad)

    await wait_for(quad_waits, 30, "quad to be unschedulable", cluster)
    by_node: dict[str, list[str]] = {}
    for i in range(7):
        pool = devices_of(objs[f"pair-{i}"])[0][1]
        by_node.setdefault(pool, []).append(f"pair-{i}")
    victims = max(by_node.values(), key=len)[:2]
    for name in victims:
        await store.delete(RESOURCE_CLAIMS, name, "default")

    async def quad_allocated() -> Any:
        gone = all([await claim_or_none(store, n) is None for n in victims])
        quad = await claim_or_none(store, "quad")
        return gone and quad and devices_of(quad)

    await wait_for(quad_allocated, 60, "deleted claims released and quad allocated", cluster)
    final = await claims(store)
    assert len(all_distinct(final)) == 15 - 4 + 4
    assert UNSCHEDULABLE not in final["quad"]["metadata"].get("annotations", {})

    codes = cluster.stop_all()
    assert codes == {"inventory": 0, "allocator": 0, "claim-writer": 0}, cluster.logs()
    survivor = next(f"pair-{i}" for i in range(7) if f"pair-{i}" not in victims)
    status_span = _assert_one_trace(cluster, final[survivor]["metadata"]["uid"])
    _assert_trace_annotation(final[survivor], status_span)


def _reason(claim: dict[str, Any]) -> str:
    return str((claim["metadata"].get("annotations") or {}).get(UNSCHEDULABLE, ""))


def _assert_one_trace(cluster: Cluster, uid: str) -> dict[str, Any]:
    spans = cluster.spans()
    by_id = {s["context"]["span_id"]: s for s in spans}
    intake = [
        s
        for s in spans
        if s["name"] == "intake claim" and s["attributes"].get("gpudra.claim.uid") == uid
    ]
    assert intake, "the claim-writer traced the claim's intake"
    trace_id = intake[0]["context"]["trace_id"]
    in_trace = [s for s in spans if s["context"]["trace_id"] == trace_id]
    services = {s["resource"]["attributes"]["service.name"] for s in in_trace}
    assert services == {"gpudra-claim-writer", "gpudra-allocator"}, services
    status = [s for s in in_trace if s["name"] == "write claim status"]
    assert status, "the status write is part of the claim's trace"
    # Walk from the status write up to the intake: every hop is a parent in the same trace.
    chain = []
    span: dict[str, Any] | None = status[0]
    while span is not None:
        chain.append((span["resource"]["attributes"]["service.name"], span["name"]))
        span = by_id.get(span.get("parent_id") or "")
    assert chain[-1] == ("gpudra-claim-writer", "intake claim"), chain
    assert ("gpudra-allocator", "process gpudra.claims.>") in chain, chain
    assert ("gpudra-allocator", "publish gpudra.allocations.>") in chain, chain
    return status[0]


def _assert_trace_annotation(claim: dict[str, Any], status_span: dict[str, Any]) -> None:
    """The claim carries its trace on (for the kubelet plugin): child of the status write."""
    traceparent = claim["metadata"]["annotations"][TRACEPARENT]
    version, trace_id, parent_id, _flags = traceparent.split("-")
    assert version == "00"
    assert f"0x{trace_id}" == status_span["context"]["trace_id"]
    assert f"0x{parent_id}" == status_span["context"]["span_id"]


async def test_two_allocator_replicas_never_allocate_one_device_twice(
    nc: Client, cluster: Cluster
) -> None:
    store = KvStore(nc)
    nodes = [f"node-{i}" for i in range(8)]
    await publish_nodes(nc, nodes)
    cluster.start_inventory()
    # Small pulls, and both replicas consuming before the claims arrive: with the default
    # 64-message pull, one replica could take every claim while the other was still starting.
    replicas = ("allocator-1", "allocator-2")
    for replica in replicas:
        cluster.start_allocator(replica, "--batch", "4")
    cluster.start_claim_writer()
    await slices_ready(nc, cluster, len(nodes))
    for replica in replicas:
        await logged(cluster, replica, f"allocator {replica} consuming claim events")
    total, capacity = 80, 8 * len(nodes)
    await asyncio.gather(
        *(store.create(RESOURCE_CLAIMS, claim_manifest(f"one-{i}")) for i in range(total))
    )

    async def decided() -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        done = [c for c in objs.values() if devices_of(c) or _reason(c)]
        allocated = sum(1 for c in objs.values() if devices_of(c))
        return objs if len(done) == total and allocated == capacity else None

    objs = await wait_for(decided, 90, f"{capacity} allocations and the rest explained", cluster)
    assert len(all_distinct(objs)) == capacity
    # Both replicas took part: each decision's record names the replica that won it.
    kv = await nc.jetstream().key_value(RESERVATIONS_BUCKET)
    deciders: Counter[str] = Counter()
    for key in await bucket_keys(kv, "c."):
        entry = await kv.get(key)
        deciders[json.loads(entry.value or b"{}").get("allocator", "")] += 1
    assert sum(deciders.values()) == capacity, deciders
    assert set(deciders) == set(replicas), deciders
    logs = cluster.logs()
    assert "Traceback" not in logs, logs


async def test_allocator_killed_mid_run_loses_nothing(nc: Client, cluster: Cluster) -> None:
    store = KvStore(nc)
    await publish_nodes(nc, ["node-a", "node-b"])
    cluster.start_inventory()
    cluster.start_allocator("allocator-1")
    cluster.start_claim_writer()
    await slices_ready(nc, cluster, 2)
    for i in range(8):
        await store.create(RESOURCE_CLAIMS, claim_manifest(f"first-{i}"))

    async def some_allocated() -> bool:
        return sum(1 for c in (await claims(store)).values() if devices_of(c)) >= 2

    await wait_for(some_allocated, 60, "the first allocations", cluster)
    cluster.kill("allocator-1")
    for i in range(8):
        await store.create(RESOURCE_CLAIMS, claim_manifest(f"second-{i}"))
    cluster.start_allocator("allocator-2")
    await all_started(cluster)

    async def all_allocated() -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        return objs if sum(1 for c in objs.values() if devices_of(c)) == 16 else None

    objs = await wait_for(all_allocated, 60, "all 16 claims allocated after the kill", cluster)
    assert len(all_distinct(objs)) == 16


async def test_kubernetes_mode_adopts_foreign_allocations_and_lifts_the_pod_gate(
    nc: Client, cluster: Cluster, tmp_path: Path
) -> None:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as api:
        await api.put(NODES, {"metadata": {"name": "node-k"}})  # the slices' owner
        kv = await kubernetes_mode(nc, cluster, api, tmp_path)

        async def mirrored() -> list[dict[str, Any]]:
            return api.objects(RESOURCE_SLICES)

        (mirrored_slice,) = await wait_for(mirrored, 30, "the slice mirrored to the API", cluster)
        assert mirrored_slice["spec"]["pool"] == {
            "name": "node-k",
            "generation": 1,
            "resourceSliceCount": 1,
        }

        # kube-scheduler allocated six GPUs of node-k to an ungated pod's claim.
        foreign = claim_manifest("foreign", count=6)
        foreign["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.nvidia.com",
                            "pool": "node-k",
                            "device": f"gpu-{i}",
                        }
                        for i in range(6)
                    ]
                }
            }
        }
        stored = await api.put(RESOURCE_CLAIMS, foreign)

        async def adopted() -> bool:
            try:
                await kv.get(f"c.{stored['metadata']['uid']}")
                return True
            except Exception:  # - not there yet
                return False

        await wait_for(adopted, 30, "the foreign allocation adopted", cluster)

        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "trainer", "namespace": "default"},
            "spec": {
                "schedulingGates": [{"name": "gpudra.io/allocation"}],
                "containers": [{"name": "main", "image": "busybox"}],
                "resourceClaims": [{"name": "gpus", "resourceClaimName": "mine"}],
            },
        }
        await api.put(PODS, pod)
        await api.put(RESOURCE_CLAIMS, claim_manifest("mine", count=2))

        def find(resource: Any, name: str) -> dict[str, Any] | None:
            return next((o for o in api.objects(resource) if o["metadata"]["name"] == name), None)

        async def ungated() -> bool:
            claim, p = find(RESOURCE_CLAIMS, "mine"), find(PODS, "trainer")
            return bool(claim and devices_of(claim) and p and not p["spec"].get("schedulingGates"))

        await wait_for(ungated, 30, "mine allocated and the pod ungated", cluster)

        # A pod whose only claim is another driver's: kube-scheduler allocates that claim, and only
        # once the pod is ungated, so gpudra lets it go at once (the claim comes after the pod).
        await api.put(
            DEVICE_CLASSES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "nic.example.com"},
                "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nic.example"'}}]},
            },
        )
        nic_pod = copy.deepcopy(pod)
        nic_pod["metadata"]["name"] = "nic-user"
        nic_pod["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimName": "nic"}]
        await api.put(PODS, nic_pod)
        await api.put(RESOURCE_CLAIMS, claim_manifest("nic", device_class="nic.example.com"))

        async def nic_pod_ungated() -> bool:
            p = find(PODS, "nic-user")
            return bool(p and not p["spec"].get("schedulingGates"))

        await wait_for(nic_pod_ungated, 30, "the other driver's pod ungated", cluster)
        nic = find(RESOURCE_CLAIMS, "nic")
        assert nic is not None
        assert not devices_of(nic), "gpudra leaves another driver's claim alone"
        assert UNSCHEDULABLE not in (nic["metadata"].get("annotations") or {})
        mine = find(RESOURCE_CLAIMS, "mine")
        assert mine is not None
        assert sorted(d for _, _, d in devices_of(mine)) == ["gpu-6", "gpu-7"]
        assert FINALIZER in mine["metadata"]["finalizers"]
        assert (
            "PUT",
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/mine/status",
        ) in (api.requests)

        # kube-controller-manager clears the foreign claim's allocation (its pod finished): the
        # devices are released, and the claim, still there, is allocated again — by gpudra now.
        cleared = copy.deepcopy(find(RESOURCE_CLAIMS, "foreign"))
        assert cleared is not None
        cleared.pop("status")
        await api.put(RESOURCE_CLAIMS, cleared)
        uid = stored["metadata"]["uid"]

        async def reallocated() -> bool:
            claim = find(RESOURCE_CLAIMS, "foreign")
            try:
                record = json.loads((await kv.get(f"c.{uid}")).value or b"{}")
            except Exception:  # - between release and the new decision
                return False
            return bool(claim and devices_of(claim)) and record.get("allocator") == "allocator"

        await wait_for(reallocated, 30, "the deallocated claim released and decided again", cluster)
        again = find(RESOURCE_CLAIMS, "foreign")
        assert again is not None
        assert sorted(d for _, _, d in devices_of(again)) == [f"gpu-{i}" for i in range(6)]
        cluster.stop_all()


async def test_malformed_events_are_dead_lettered_and_a_nats_outage_loses_nothing(
    nc: Client, cluster: Cluster, fresh_nats_server: NatsServer
) -> None:
    store = KvStore(nc)
    await publish_nodes(nc, ["node-a"])
    cluster.start_inventory()
    cluster.start_allocator()
    cluster.start_claim_writer()
    await slices_ready(nc, cluster, 1)

    js = nc.jetstream()
    await js.publish("gpudra.claims.default.garbage", b"\x00not a claim event")
    for i in range(4):
        await store.create(RESOURCE_CLAIMS, claim_manifest(f"before-{i}"))

    async def allocated(prefix: str, n: int) -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        done = {k: v for k, v in objs.items() if k.startswith(prefix) and devices_of(v)}
        return done if len(done) == n else None

    before = await wait_for(lambda: allocated("before-", 4), 30, "allocations", cluster)
    dead = await js.get_last_msg(DEADLETTER_STREAM, "gpudra.deadletter.claims")
    assert (dead.headers or {}).get("Gpudra-Original-Subject") == "gpudra.claims.default.garbage"

    fresh_nats_server.kill()
    await asyncio.sleep(1.0)
    fresh_nats_server.restart()
    for i in range(4):
        for _ in range(50):
            try:
                await store.create(RESOURCE_CLAIMS, claim_manifest(f"after-{i}"))
                break
            except KubeRetryableError:
                await asyncio.sleep(0.2)

    await wait_for(lambda: allocated("after-", 4), 60, "allocations after the outage", cluster)
    final = await claims(store)
    assert len(all_distinct(final)) == 8
    for name, claim in before.items():
        assert devices_of(final[name]) == devices_of(claim), "decisions survive an outage"
    kv = await nc.jetstream().key_value(RESERVATIONS_BUCKET)
    records = await bucket_keys(kv, "c.")
    assert len(records) == 8, records
