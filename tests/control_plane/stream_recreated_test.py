"""The claims stream deleted and created again while the three services run (real NATS,
processes, standalone mode): an operator's `nats stream rm`, or the stream lost from JetStream's
storage. The new stream numbers its events from 1 again while the allocator's records, written
from the old one, keep their sequences; without a restart of any service, a claim applied
afterwards is allocated, and a claim deleted afterwards has its devices freed (its deallocation
is not taken for older than the record an older, higher-numbered event wrote).

Re-created by whom: by the operator (the test, as `ensure_streams` at a service's start would),
or by nobody, so the services must do it themselves (the allocator's consumer creates the stream
again when it finds it gone).
"""

from __future__ import annotations

from typing import Any

import pytest
from nats.aio.client import Client

from control_plane.cluster import (
    Cluster,
    claim_manifest,
    claim_or_none,
    claims,
    devices_of,
    publish_nodes,
    slices_ready,
    wait_for,
)
from control_plane.gang_test import holders
from gpudra_allocator.holdings import CLAIM_PREFIX, ClaimRecord
from gpudra_bus import CLAIMS_STREAM, RESERVATIONS_BUCKET, ensure_streams
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import RESOURCE_CLAIMS

pytestmark = pytest.mark.slow

EARLY = 6  # one-GPU claims before the stream goes: the last one's record has a high sequence
VICTIM = f"early-{EARLY - 1}"


@pytest.mark.parametrize("recreated_by", ["operator", "services"])
async def test_a_recreated_claims_stream_allocates_and_frees_without_a_restart(
    nc: Client, cluster: Cluster, recreated_by: str
) -> None:
    store = KvStore(nc)
    await publish_nodes(nc, ["node-a"])  # one DGX H100: 8 GPUs
    cluster.start_inventory()
    cluster.start_allocator()
    cluster.start_claim_writer()
    await slices_ready(nc, cluster, 1)

    # One claim after the other: each one's events come later in the old stream than the last.
    for i in range(EARLY):
        await store.create(RESOURCE_CLAIMS, claim_manifest(f"early-{i}"))

        async def allocated(name: str = f"early-{i}") -> Any:
            claim = await claim_or_none(store, name)
            return claim and devices_of(claim)

        await wait_for(allocated, 60, f"early-{i} allocated", cluster)
    js = nc.jetstream()
    old = await js.stream_info(CLAIMS_STREAM)
    assert old.state.last_seq >= EARLY

    await js.delete_stream(CLAIMS_STREAM)
    if recreated_by == "operator":
        await ensure_streams(js)

    # A claim applied afterwards is allocated: its events reach the allocator in the new stream.
    await store.create(RESOURCE_CLAIMS, claim_manifest("after", count=2))

    async def after_allocated() -> Any:
        claim = await claim_or_none(store, "after")
        return claim and devices_of(claim)

    await wait_for(after_allocated, 60, "a claim applied after the stream came back", cluster)
    new = await js.stream_info(CLAIMS_STREAM)
    assert new.state.last_seq < old.state.last_seq, "the new stream numbers from 1 again"

    # A claim deleted afterwards frees its devices: its deallocation's sequence in the new
    # stream is lower than the one that wrote its record in the old stream.
    victim = await claim_or_none(store, VICTIM)
    assert victim is not None
    freed = devices_of(victim)
    reservations = await js.key_value(RESERVATIONS_BUCKET)
    entry = await reservations.get(CLAIM_PREFIX + victim["metadata"]["uid"])
    record = ClaimRecord.decode(entry.value or b"")
    await store.delete(RESOURCE_CLAIMS, VICTIM, "default")

    async def released() -> bool:
        return f"default/{VICTIM}" not in await holders(nc)

    await wait_for(released, 60, f"{VICTIM}'s devices freed", cluster)
    deallocation = (await js.stream_info(CLAIMS_STREAM)).state.last_seq
    assert deallocation < record.seq, "what this test is about: a lower sequence than the record's"
    # Every other GPU is taken: the next claim gets exactly the victim's.
    await store.create(RESOURCE_CLAIMS, claim_manifest("last"))

    async def last_allocated() -> Any:
        claim = await claim_or_none(store, "last")
        return claim and devices_of(claim)

    assert await wait_for(last_allocated, 60, "a claim on the freed GPU", cluster) == freed
    objs = await claims(store)
    used = [d for c in objs.values() for d in devices_of(c)]
    assert len(used) == len(set(used)) == 8, used

    codes = cluster.stop_all()
    assert codes == {"inventory": 0, "allocator": 0, "claim-writer": 0}, cluster.logs()
    logs = cluster.logs()
    assert "Traceback" not in logs, logs
