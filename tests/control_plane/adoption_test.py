"""Allocations gpudra did not make (kube-scheduler's, for pods without gpudra's scheduling gate),
adopted by a real allocator process: what it holds afterwards, read from the reservations bucket.

- One claim's events are handled in order: an adoption and the deallocation published right after
  it never leave the claim's devices held.
- A decision that kube-scheduler beat to the claim (its allocation written first) is given up
  for the allocation the claim got: the claim-writer sends it back, the allocator frees the
  decision's devices and holds the claim's, and the next claim gets the freed ones.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.js.kv import KeyValue

from control_plane.cluster import (
    Cluster,
    all_started,
    claim_manifest,
    devices_of,
    kubernetes_mode,
    publish_nodes,
    slices_ready,
    wait_for,
)
from gpudra_allocator.holdings import CLAIM_PREFIX, ClaimRecord, PoolHoldings, pool_key
from gpudra_bus import CLAIM_EVENT, CLAIMS_STREAM, RESERVATIONS_BUCKET, Publisher, subjects
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.kvkeys import bucket_keys
from gpudrapb.v1 import claims_pb2

pytestmark = pytest.mark.slow

DRIVER = "gpu.nvidia.com"


def allocated(name: str, uid: str, node: str, devices: list[int]) -> dict[str, Any]:
    claim = claim_manifest(name, count=len(devices))
    claim["metadata"].update(uid=uid, resourceVersion="7")
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{i}"}
                    for i in devices
                ]
            }
        }
    }
    return claim


def event(kind: claims_pb2.ClaimEvent.Kind.ValueType, claim: dict[str, Any]) -> Any:
    meta = claim["metadata"]
    return claims_pb2.ClaimEvent(
        kind=kind,
        claim=claims_pb2.ClaimRef(
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            resource_version=meta["resourceVersion"],
        ),
        claim_json=json.dumps(claim).encode(),
    )


async def held(kv: KeyValue, node: str) -> list[str]:
    """Devices of `node`'s pool that the reservations hold, by claim UID and device."""
    try:
        entry = await kv.get(pool_key(DRIVER, node))
    except Exception:  # - no holdings written for the pool yet
        return []
    return sorted(f"{h.uid}:{h.device}" for h in PoolHoldings.decode(entry.value or b"").holdings)


async def records(kv: KeyValue) -> dict[str, ClaimRecord]:
    out = {}
    for key in await bucket_keys(kv):
        if key.startswith(CLAIM_PREFIX):
            out[key[len(CLAIM_PREFIX) :]] = ClaimRecord.decode((await kv.get(key)).value or b"")
    return out


def named(api: FakeKubeApi, name: str) -> dict[str, Any] | None:
    return next((o for o in api.objects(RESOURCE_CLAIMS) if o["metadata"]["name"] == name), None)


async def next_claim_gets(api: FakeKubeApi, cluster: Cluster, count: int) -> list[str]:
    """A new claim `next` of `count` GPUs, once allocated: its devices."""
    await api.put(RESOURCE_CLAIMS, claim_manifest("next", count=count))

    async def allocated_next() -> list[str]:
        found = named(api, "next")
        return sorted(d for _, _, d in devices_of(found)) if found else []

    result: list[str] = await wait_for(allocated_next, 30, "the next claim allocated", cluster)
    return result


@pytest.mark.parametrize("replicas", [1, 2])
async def test_an_adoption_and_the_deallocation_right_after_it_leave_nothing_held(
    nc: Client, cluster: Cluster, replicas: int
) -> None:
    await publish_nodes(nc, ["node-a"])
    cluster.start_inventory()
    for i in range(replicas):
        # Replicas share one durable consumer; one event per pull spreads a claim's events over
        # them, so either replica may get either event of a pair.
        cluster.start_allocator(f"allocator-{i}", *(["--batch", "1"] if replicas > 1 else []))
    await slices_ready(nc, cluster, 1)
    js = nc.jetstream()
    publisher = Publisher(nc)
    # Pairs published back to back land in one fetch of an allocator, or in two replicas'
    # fetches: handled side by side, the deallocation could find nothing to free before the
    # adoption stored its holdings.
    claims = [allocated(f"c{i}", f"uid-{i}", "node-a", [i % 8]) for i in range(24)]
    for claim in claims:
        cleared = copy.deepcopy(claim)
        cleared.pop("status")
        cleared["metadata"]["resourceVersion"] = "8"
        name, uid = claim["metadata"]["name"], claim["metadata"]["uid"]
        for kind, doc, msg_id in (
            (claims_pb2.ClaimEvent.KIND_ALLOCATED_EXTERNALLY, claim, f"{uid}/external"),
            (claims_pb2.ClaimEvent.KIND_DELETED, cleared, f"{uid}/deallocated/8"),
        ):
            await publisher.publish(
                subjects.claims("default", name), event(kind, doc), CLAIM_EVENT, msg_id=msg_id
            )

    async def all_handled() -> bool:
        try:
            info = await js.consumer_info(CLAIMS_STREAM, "allocator")
        except nats.js.errors.NotFoundError:
            return False  # the allocator has not subscribed yet
        return bool(info.num_pending == 0 and info.num_ack_pending == 0)

    await wait_for(all_handled, 60, "every claim event handled", cluster)
    kv = await js.key_value(RESERVATIONS_BUCKET)
    assert await held(kv, "node-a") == [], cluster.logs()
    # Each claim's record is the mark of its cleared allocation: nothing decided, nothing held.
    states = {uid: record.state for uid, record in (await records(kv)).items()}
    assert states == {f"uid-{i}": "cleared" for i in range(24)}, cluster.logs()


async def test_a_decision_kube_scheduler_beat_is_given_up_for_the_claims_allocation(
    nc: Client, cluster: Cluster, tmp_path: Path
) -> None:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as api:
        kv = await kubernetes_mode(nc, cluster, api, tmp_path)

        # The write-back cannot write the claim yet (the API refuses it), so the allocator's
        # decision is stored and held, but not on the claim.
        api.inject_error(
            503,
            reason="ServiceUnavailable",
            method="PUT",
            times=10_000,
            path_contains="/resourceclaims/raced",
        )
        stored = await api.put(RESOURCE_CLAIMS, claim_manifest("raced", count=4))
        uid = stored["metadata"]["uid"]

        async def decided() -> ClaimRecord | None:
            return (await records(kv)).get(uid)

        decision = await wait_for(decided, 30, "gpudra's decision for the claim", cluster)
        assert decision.allocator == "allocator"
        ours = sorted(d["device"] for d in (decision.allocation or {})["devices"]["results"])
        # kube-scheduler allocates the claim for its ungated pod, on the other four GPUs.
        theirs = [i for i in range(8) if f"gpu-{i}" not in ours]
        claim = next(o for o in api.objects(RESOURCE_CLAIMS) if o["metadata"]["uid"] == uid)
        claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
        claim["status"] = allocated("raced", uid, "node-k", theirs)["status"]
        await api.put(RESOURCE_CLAIMS, claim)
        api.clear_faults()

        async def adopted() -> list[str]:
            record = (await records(kv)).get(uid)
            if record is None or record.allocator != "external":
                return []
            return await held(kv, "node-k")

        holdings = await wait_for(adopted, 30, "the claim's own allocation held", cluster)
        assert holdings == sorted(f"{uid}:gpu-{i}" for i in theirs)

        # The next claim gets the devices gpudra's decision had held, not the raced claim's.
        assert await next_claim_gets(api, cluster, 4) == ours
        raced = named(api, "raced")
        assert raced is not None
        assert sorted(d for _, _, d in devices_of(raced)) == [f"gpu-{i}" for i in theirs]
        cluster.stop_all()


async def test_an_allocation_cleared_and_made_again_while_the_claim_writer_was_down(
    nc: Client, cluster: Cluster, tmp_path: Path
) -> None:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as api:
        kv = await kubernetes_mode(nc, cluster, api, tmp_path)
        stored = await api.put(RESOURCE_CLAIMS, claim_manifest("reused", count=4))
        uid = stored["metadata"]["uid"]

        async def written() -> list[str]:
            claim = named(api, "reused")
            return sorted(d for _, _, d in devices_of(claim)) if claim else []

        ours = await wait_for(written, 30, "gpudra's allocation written", cluster)
        cluster.kill("claim-writer")
        # Meanwhile its pod finished (kube-controller-manager cleared the allocation) and
        # kube-scheduler allocated it for the next pod, on the other four GPUs: the claim keeps
        # its finalizer and the allocation id of gpudra's decision.
        claim = named(api, "reused")
        assert claim is not None
        theirs = [i for i in range(8) if f"gpu-{i}" not in ours]
        claim["status"] = allocated("reused", uid, "node-k", theirs)["status"]
        await api.put(RESOURCE_CLAIMS, claim)
        cluster.start_claim_writer(
            "--mode", "kubernetes", "--kubeconfig", str(tmp_path / "kubeconfig")
        )
        await all_started(cluster)

        async def swapped() -> list[str]:
            record = (await records(kv)).get(uid)
            if record is None or record.allocator != "external":
                return []
            return await held(kv, "node-k")

        holdings = await wait_for(
            swapped, 30, "the new allocation held, the old one freed", cluster
        )
        assert holdings == sorted(f"{uid}:gpu-{i}" for i in theirs)
        assert await next_claim_gets(api, cluster, 4) == ours
        cluster.stop_all()
