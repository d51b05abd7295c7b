"""Gangs across the three services: all members placed together, or none holds anything.

Two allocator replicas share the claim stream, so a gang's members reach both: membership and the
gang's one decision live in the reservations bucket. The fleet is GB200 NVL72 trays (4 GPUs each)
in two fabric cliques, 3 trays in one and 4 in the other; a gang of 4 claims x 4 GPUs in one
clique fits only in the larger clique, all together. A member re-created after the decision (a
late member) is placed in the gang's clique only, or waits for room there.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client

from control_plane.cluster import (
    NODE_INVENTORY,
    UNSCHEDULABLE,
    Cluster,
    claim_manifest,
    claims,
    devices_of,
    node_inventory,
    slices_ready,
    wait_for,
)
from gpudra_allocator.gangs import decision_key, members_key
from gpudra_bus import (
    RESERVATIONS_BUCKET,
    Publisher,
    subjects,
)
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import RESOURCE_CLAIMS
from gpudra_testing.kvkeys import bucket_keys
from gpudrapb.v1 import inventory_pb2 as pb

pytestmark = pytest.mark.slow

CLIQUES = {"small": 3, "large": 4}  # clique -> trays of 4 GPUs
CLIQUE_ATTRIBUTE = "gpu.nvidia.com/cliqueID"


async def publish_trays(nc: Client) -> dict[str, str]:
    """One GB200 tray inventory per node, its GPUs in the node's clique; node -> clique."""
    template = node_inventory("template", "gb200-nvl72-tray")
    publisher = Publisher(nc)
    placed = {}
    for clique, trays in CLIQUES.items():
        for i in range(trays):
            node = f"tray-{clique}-{i}"
            inventory = pb.NodeInventory()
            inventory.CopyFrom(template)
            inventory.node = node
            for device in inventory.devices:
                device.clique_id = f"cluster-1.{clique}"
            await publisher.publish(subjects.inventory(node), inventory, NODE_INVENTORY)
            placed[node] = clique
    return placed


def member(gang: str, i: int, size: int) -> dict[str, Any]:
    claim = claim_manifest(f"{gang}-{i}", count=4)
    claim["metadata"]["annotations"] = {
        "gpudra.io/gang": gang,
        "gpudra.io/gang-size": str(size),
        "gpudra.io/gang-match-attribute": CLIQUE_ATTRIBUTE,
    }
    return claim


def reason(claim: dict[str, Any]) -> str:
    return str((claim["metadata"].get("annotations") or {}).get(UNSCHEDULABLE, ""))


async def holders(nc: Client) -> set[str]:
    """Claims (namespace/name) holding any device in the reservations bucket."""
    kv = await nc.jetstream().key_value(RESERVATIONS_BUCKET)
    out = set()
    for key in await bucket_keys(kv, "p."):
        entry = await kv.get(key)
        out |= {h["claim"] for h in json.loads(entry.value or b"{}").get("holdings", [])}
    return out


async def test_a_gang_is_placed_all_together_or_holds_nothing(nc: Client, cluster: Cluster) -> None:
    store = KvStore(nc)
    clique_of = await publish_trays(nc)
    cluster.start_inventory()
    cluster.start_allocator("allocator-1")
    cluster.start_allocator("allocator-2")
    cluster.start_claim_writer()
    await slices_ready(nc, cluster, len(clique_of), "every tray's slices")

    # Three of four members: nobody holds anything, each says what it waits for.
    for i in range(3):
        await store.create(RESOURCE_CLAIMS, member("train", i, 4))

    async def waiting() -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        found = [objs.get(f"train-{i}") for i in range(3)]
        return objs if all(c and "3 of 4" in reason(c) for c in found) else None

    await wait_for(waiting, 30, "three members waiting for the fourth", cluster)
    assert await holders(nc) == set()

    await store.create(RESOURCE_CLAIMS, member("train", 3, 4))

    async def placed() -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        found = [objs.get(f"train-{i}") for i in range(4)]
        return objs if all(c and devices_of(c) for c in found) else None

    objs = await wait_for(placed, 60, "the whole gang allocated", cluster)
    used = [d for i in range(4) for d in devices_of(objs[f"train-{i}"])]
    assert len(used) == len(set(used)) == 16
    pools = {pool for _, pool, _ in used}
    assert {clique_of[p] for p in pools} == {"large"}, pools
    for i in range(4):
        assert not reason(objs[f"train-{i}"]), "the waiting reason is cleared on allocation"

    # A second gang of the same shape fits in no clique now (the small one has 12 GPUs): it
    # reserves nothing, and every member is told why.
    for i in range(4):
        await store.create(RESOURCE_CLAIMS, member("again", i, 4))

    async def refused() -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        found = [objs.get(f"again-{i}") for i in range(4)]
        return objs if all(c and "do not fit together" in reason(c) for c in found) else None

    objs = await wait_for(refused, 60, "every member of the second gang explained", cluster)
    assert all(not devices_of(objs[f"again-{i}"]) for i in range(4))
    assert await holders(nc) == {f"default/train-{i}" for i in range(4)}

    # Releasing the first gang lets the second one in, whole.
    for i in range(4):
        await store.delete(RESOURCE_CLAIMS, f"train-{i}", "default")

    async def second_placed() -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        found = [objs.get(f"again-{i}") for i in range(4)]
        return objs if all(c and devices_of(c) for c in found) else None

    objs = await wait_for(second_placed, 60, "the second gang allocated after the release", cluster)
    used = [d for i in range(4) for d in devices_of(objs[f"again-{i}"])]
    assert len(set(used)) == 16
    assert {clique_of[p] for _, p, _ in used} == {"large"}
    # The first gang's members left it when deleted: its membership and decision keys are gone.
    kv = await nc.jetstream().key_value(RESERVATIONS_BUCKET)
    gang_keys = sorted(k for k in await bucket_keys(kv) if k[:2] in ("m.", "g."))
    assert gang_keys == [decision_key("default/again"), members_key("default/again")], gang_keys
    logs = cluster.logs()
    assert "Traceback" not in logs, logs


async def test_a_gangs_late_member_keeps_the_gangs_clique(nc: Client, cluster: Cluster) -> None:
    """A member deleted and re-created after its gang's decision is placed in the gang's clique
    only: while that clique is full it waits (saying so) though the other clique has free
    trays, and it lands in the gang's clique once a tray there is free again."""
    store = KvStore(nc)
    clique_of = await publish_trays(nc)
    cluster.start_inventory()
    cluster.start_allocator()
    cluster.start_claim_writer()
    await slices_ready(nc, cluster, len(clique_of), "every tray's slices")
    for i in range(4):
        await store.create(RESOURCE_CLAIMS, member("train", i, 4))

    async def placed(names: list[str]) -> dict[str, dict[str, Any]] | None:
        objs = await claims(store)
        return objs if all(objs.get(n) and devices_of(objs[n]) for n in names) else None

    gang = [f"train-{i}" for i in range(4)]
    objs = await wait_for(lambda: placed(gang), 60, "the gang allocated", cluster)
    assert {clique_of[p] for n in gang for _, p, _ in devices_of(objs[n])} == {"large"}

    # train-3 goes; its tray is taken by a claim outside the gang (the large clique's only
    # free tray fills it best); train-3 comes back (a new claim, the gang's late member).
    await store.delete(RESOURCE_CLAIMS, "train-3", "default")
    await wait_for(
        lambda: _without(nc, "default/train-3"), 30, "train-3's devices released", cluster
    )
    await store.create(RESOURCE_CLAIMS, claim_manifest("blocker", count=4))
    objs = await wait_for(lambda: placed(["blocker"]), 30, "the blocker allocated", cluster)
    assert {clique_of[p] for _, p, _ in devices_of(objs["blocker"])} == {"large"}
    await store.create(RESOURCE_CLAIMS, member("train", 3, 4))

    async def waits() -> dict[str, Any] | None:
        claim = (await claims(store)).get("train-3")
        return claim if claim and "no node in cluster-1.large has room" in reason(claim) else None

    waiting = await wait_for(waits, 30, "train-3 waiting for room in its gang's clique", cluster)
    assert reason(waiting).startswith(
        f"gang default/train is in {CLIQUE_ATTRIBUTE} cluster-1.large: "
        "no node in cluster-1.large has room for claim default/train-3; "
    ), reason(waiting)
    assert not devices_of(waiting), "not placed in the small clique, free as it is"
    assert "default/train-3" not in await holders(nc)

    await store.delete(RESOURCE_CLAIMS, "blocker", "default")
    objs = await wait_for(lambda: placed(["train-3"]), 30, "train-3 placed in the clique", cluster)
    assert {clique_of[p] for _, p, _ in devices_of(objs["train-3"])} == {"large"}
    assert not reason(objs["train-3"])
    used = [d for n in gang for d in devices_of(objs[n])]
    assert len(set(used)) == 16
    logs = cluster.logs()
    assert "Traceback" not in logs, logs


async def _without(nc: Client, claim: str) -> bool:
    return claim not in await holders(nc)
