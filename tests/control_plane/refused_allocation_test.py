"""Kubernetes mode, across the three services (real NATS, processes, the fake API server): an
allocation the API server refuses for good (422 on the claim's status write, as its validation or
an admission policy would) leaves the claim pending with the refusal as its reason (annotation
and Warning Event), frees the devices the decision held, and is not decided again while the
claim is unchanged: not in a loop, and not after a claim-writer restart lists it again.

The decisions stream (which keeps every decision the allocator published) says how often the
claim was decided; the allocator's `/statusz` counters (`claims.refused`, `claims.refusedUnchanged`,
`claims.unschedulable`) and the claim-writer's (`writeback.refused`) what each process did with
it. They are read once the allocator's claims consumer has nothing pending or unacknowledged (an
event is acknowledged after its decision is published), so a decision still in flight cannot
slip past them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import nats.js.errors
import pytest
from nats.aio.client import Client

from control_plane.cluster import (
    UNSCHEDULABLE,
    Cluster,
    Service,
    all_started,
    claim_manifest,
    devices_of,
    kubernetes_mode,
    wait_for,
)
from gpudra_bus import ALLOCATION_DECISION, CLAIMS_STREAM, DECISIONS_STREAM, CodecError, subjects
from gpudra_kube.resources import EVENTS, RESOURCE_CLAIMS
from gpudra_testing.kubeapi import FakeKubeApi
from gpudra_testing.statusz import get_status
from gpudrapb.v1 import claims_pb2

pytestmark = pytest.mark.slow

REFUSED = "refused"
STATUS_PATH = f"/resourceclaims/{REFUSED}/status"
GPUS = 8  # node-k is one DGX H100: a claim of 8 takes every GPU the refused decision held


def named(api: FakeKubeApi, name: str) -> dict[str, Any] | None:
    return next((o for o in api.objects(RESOURCE_CLAIMS) if o["metadata"]["name"] == name), None)


def reason_of(claim: dict[str, Any] | None) -> str:
    return str(((claim or {}).get("metadata", {}).get("annotations") or {}).get(UNSCHEDULABLE, ""))


def warnings_about(api: FakeKubeApi, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in api.objects(EVENTS)
        if (e.get("regarding") or {}).get("name") == name
        and e.get("type") == "Warning"
        and e.get("reason") == "FailedAllocation"
    ]


def status_writes(api: FakeKubeApi) -> int:
    """The refused claim's status writes the API server was asked for (each one refused)."""
    return sum(1 for method, path in api.requests if method == "PUT" and path.endswith(STATUS_PATH))


async def decisions_about(nc: Client, name: str) -> list[claims_pb2.AllocationDecision]:
    """Every decision the allocator published about claim `name`, from the decisions stream
    (which keeps them; a repeated announcement of one decision is dropped by its message id)."""
    js = nc.jetstream()
    last = (await js.stream_info(DECISIONS_STREAM)).state.last_seq
    found = []
    for seq in range(1, last + 1):
        msg = await js.get_msg(DECISIONS_STREAM, seq)
        if msg.subject != subjects.allocations("default", name):
            continue
        try:
            found.append(ALLOCATION_DECISION.decode(msg.data or b"", msg.headers))
        except CodecError:
            continue  # the allocator's `Released` for it
    return found


async def statusz(service: Service, cluster: Cluster) -> dict[str, Any]:
    """`service`'s `/statusz`, once it answers."""

    async def answer() -> dict[str, Any] | None:
        port = service.health_port()
        return None if port is None else await asyncio.to_thread(get_status, port)

    doc: dict[str, Any] = await wait_for(answer, 30, f"{service.name}'s /statusz", cluster)
    return doc


async def allocator_idle(nc: Client, cluster: Cluster) -> dict[str, Any]:
    """The allocator's `claims` counters once every claim event stored so far is handled and
    acknowledged."""
    js = nc.jetstream()

    async def idle() -> bool:
        try:
            info = await js.consumer_info(CLAIMS_STREAM, "allocator")
        except nats.js.errors.NotFoundError:
            return False
        return bool(info.num_pending == 0 and info.num_ack_pending == 0)

    await wait_for(idle, 60, "the allocator's claim events all handled", cluster)
    counts: dict[str, Any] = (await statusz(cluster.services["allocator"], cluster))["claims"]
    return counts


async def test_a_refused_allocation_frees_its_devices_and_is_not_decided_again(
    nc: Client, cluster: Cluster, tmp_path: Path
) -> None:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as api:
        await kubernetes_mode(nc, cluster, api, tmp_path)
        # The claim-writer restart below repeats the offer of the pending claim under its first
        # message id, which the stream drops within its duplicate window (2 min); a restart
        # later than that is the case to test, so the window is made short (the services
        # started already set it; the restarted claim-writer sets it again, too late to keep
        # an id this short window has forgotten).
        js = nc.jetstream()
        config = (await js.stream_info(CLAIMS_STREAM)).config
        config.duplicate_window = 0.5
        await js.update_stream(config)
        # Every status write of this one claim is refused, as an admission policy would.
        api.inject_error(
            422, reason="Invalid", method="PUT", path_contains=STATUS_PATH, times=1_000_000
        )
        await api.put(RESOURCE_CLAIMS, claim_manifest(REFUSED, count=GPUS))

        async def refusal_told() -> bool:
            claim = named(api, REFUSED)
            return bool(
                "refused" in reason_of(claim)
                and not devices_of(claim or {})
                and warnings_about(api, REFUSED)
            )

        await wait_for(refusal_told, 60, "the refusal written into the claim", cluster)
        assert "refused" in warnings_about(api, REFUSED)[0]["note"]
        assert status_writes(api) >= 1

        # Freed: a claim that needs every GPU of the node, the refused decision's included.
        await api.put(RESOURCE_CLAIMS, claim_manifest("second", count=GPUS))

        async def second_allocated() -> list[tuple[str, str, str]]:
            return devices_of(named(api, "second") or {})

        got = await wait_for(second_allocated, 60, "the second claim allocated", cluster)
        assert sorted(d for _, _, d in got) == sorted(f"gpu-{i}" for i in range(GPUS))

        counts = await allocator_idle(nc, cluster)
        assert counts["refused"] == 1, counts
        (decision,) = await decisions_about(nc, REFUSED)  # decided once: not again, in a loop
        assert decision.outcome == claims_pb2.AllocationDecision.OUTCOME_ALLOCATED
        writes = status_writes(api)
        claim = named(api, REFUSED)
        assert claim is not None
        assert not devices_of(claim)
        assert "refused" in reason_of(claim)

        # A claim-writer restart lists the pending claim again and offers it: the allocator
        # sees it unchanged since the refusal and does not decide it.
        cluster.kill("claim-writer")
        writer = cluster.start_claim_writer(
            "--mode", "kubernetes", "--kubeconfig", str(tmp_path / "kubeconfig")
        )
        await all_started(cluster)

        async def handled() -> dict[str, Any] | None:
            now: dict[str, Any] = (await statusz(cluster.services["allocator"], cluster))["claims"]
            moved = any(now[k] > counts[k] for k in ("refusedUnchanged", "unschedulable"))
            return now if moved or len(await decisions_about(nc, REFUSED)) > 1 else None

        now = await wait_for(
            handled, 60, "the allocator handling the offer of the restart", cluster
        )
        # Decided again, the claim would be allocated (and refused again) or, the node being
        # full, unschedulable (and held for retry: the allocator would never be idle below).
        assert await decisions_about(nc, REFUSED) == [decision], f"decided again: {now}"
        assert now["unschedulable"] == counts["unschedulable"], f"decided again: {now}"
        after = await allocator_idle(nc, cluster)
        assert await decisions_about(nc, REFUSED) == [decision]
        assert after["refusedUnchanged"] > counts["refusedUnchanged"], after
        assert after["refused"] == 1, after
        assert (await statusz(writer, cluster))["writeback"]["refused"] == 0
        assert status_writes(api) == writes, "no allocation written again"
        claim = named(api, REFUSED)
        assert claim is not None
        assert not devices_of(claim)
        assert "refused" in reason_of(claim)
        assert sorted(d for _, _, d in devices_of(named(api, "second") or {})) == sorted(
            d for _, _, d in got
        )
        cluster.stop_all()
        logs = cluster.logs()
        assert "Traceback" not in logs, logs
