"""Claim Events: the pure helpers, and the write-back recording them through a real nats-server
into the HTTP-level fake API (which validates every Event against the v1.34 schema)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from nats.aio.client import Client

from gpudra_bus import (
    ALLOCATION_DECISION,
    Publisher,
    subjects,
)
from gpudra_claim_writer.claims import UNSCHEDULABLE_ANNOTATION
from gpudra_claim_writer.conftest import cancel_and_wait, new_claim, until
from gpudra_claim_writer.kube_events import (
    CONTROLLER,
    ClaimEvents,
    allocation_note,
    related_pod,
)
from gpudra_claim_writer.writeback import Writeback
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.recorder import EventRecorder
from gpudra_kube.resources import EVENTS, RESOURCE_CLAIMS
from gpudra_testing.kubeapi import FakeKubeApi
from gpudrapb.v1 import claims_pb2

ALLOCATION: dict[str, Any] = {
    "devices": {
        "results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": f"gpu-{i}"}
            for i in range(2)
        ]
    },
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
        ]
    },
}


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        pytest.param({"metadata": {"namespace": "a"}}, None, id="no-pod-known"),
        pytest.param(
            {
                "metadata": {
                    "namespace": "a",
                    "ownerReferences": [
                        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r"},
                        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"},
                    ],
                }
            },
            {"apiVersion": "v1", "kind": "Pod", "namespace": "a", "name": "p", "uid": "u1"},
            id="template-claim-owned-by-its-pod",
        ),
        pytest.param(
            {
                "metadata": {"namespace": "a"},
                "status": {
                    "reservedFor": [
                        {"apiGroup": "example.com", "resource": "jobs", "name": "j", "uid": "x"},
                        {"resource": "pods", "name": "q", "uid": "u2"},
                    ]
                },
            },
            {"apiVersion": "v1", "kind": "Pod", "namespace": "a", "name": "q", "uid": "u2"},
            id="first-pod-consumer",
        ),
    ],
)
def test_related_pod(claim: dict[str, Any], expected: dict[str, str] | None) -> None:
    assert related_pod(claim) == expected


@pytest.mark.parametrize(
    ("allocation", "expected"),
    [
        pytest.param(
            ALLOCATION, "allocated 2 device(s) on node n1: n1/gpu-0, n1/gpu-1", id="node-pinned"
        ),
        pytest.param({"devices": {"results": []}}, "allocated 0 device(s)", id="nothing"),
        pytest.param(
            {"devices": {"results": [{"pool": "p", "device": f"d{i}"} for i in range(10)]}},
            "allocated 10 device(s): p/d0, p/d1, p/d2, p/d3, p/d4, p/d5, p/d6, p/d7, … (2 more)",
            id="long-list-cut",
        ),
    ],
)
def test_allocation_note(allocation: dict[str, Any], expected: str) -> None:
    assert allocation_note(allocation) == expected


def test_without_a_recorder_nothing_happens() -> None:
    events = ClaimEvents(None)
    events.unschedulable({"metadata": {"name": "c"}}, "no")
    events.allocated({"metadata": {"name": "c"}}, ALLOCATION)


# -- through the write-back ------------------------------------------------------------------------


async def decide(
    publisher: Publisher, claim: dict[str, Any], n: int, *, reason: str = "", allocated: bool
) -> None:
    meta = claim["metadata"]
    ref = claims_pb2.ClaimRef(namespace="default", name=meta["name"], uid=meta["uid"])
    decision = claims_pb2.AllocationDecision(claim=ref)
    if allocated:
        decision.outcome = claims_pb2.AllocationDecision.OUTCOME_ALLOCATED
        decision.allocation_json = json.dumps(ALLOCATION).encode()
        decision.node_name = "n1"
    else:
        decision.outcome = claims_pb2.AllocationDecision.OUTCOME_UNSCHEDULABLE
        decision.reason = reason
    await publisher.publish(
        subjects.allocations("default", meta["name"]),
        decision,
        ALLOCATION_DECISION,
        msg_id=f"{meta['uid']}/{n}",
    )


async def test_retried_unschedulable_is_one_warning_series_then_one_normal_event(
    nc: Client, api: tuple[FakeKubeApi, ApiStore]
) -> None:
    fake, store = api
    claim = await store.create(RESOURCE_CLAIMS, new_claim("big"))
    recorder = EventRecorder(store, controller=CONTROLLER, instance="cw-0", series_interval=3600)
    publisher = Publisher(nc)
    writeback = Writeback(
        nc, store, publisher, consumer="events-test", events=ClaimEvents(recorder)
    )
    tasks = [asyncio.create_task(writeback.run()), asyncio.create_task(recorder.run())]
    try:
        for n in range(5):
            await decide(publisher, claim, n, reason=f"needs 8 GPUs, {n} free", allocated=False)
        await until(lambda: writeback.counts["unschedulable"] == 5)
        await until(lambda: recorder.counts["created"] + recorder.counts["updated"] >= 2)
        [warning] = fake.objects(EVENTS)
        assert warning["type"] == "Warning"
        assert warning["reason"] == "FailedAllocation"
        assert warning["regarding"]["name"] == "big"
        assert warning["regarding"]["uid"] == claim["metadata"]["uid"]
        assert warning["series"]["count"] == 2  # later repeats wait for the interval
        current = await store.get(RESOURCE_CLAIMS, "big", "default")
        assert current["metadata"]["annotations"][UNSCHEDULABLE_ANNOTATION].startswith("needs 8")

        await decide(publisher, claim, 100, allocated=True)
        await decide(publisher, claim, 101, allocated=True)  # a repeat: no second event
        await until(lambda: writeback.counts["allocated"] == 2)
        await until(lambda: recorder.counts["created"] == 2)
        await recorder.flush(force=True)
        events = {e["reason"]: e for e in fake.objects(EVENTS)}
        assert set(events) == {"FailedAllocation", "Allocated"}
        assert events["Allocated"]["type"] == "Normal"
        assert events["Allocated"]["note"] == (
            "allocated 2 device(s) on node n1: n1/gpu-0, n1/gpu-1"
        )
        assert events["FailedAllocation"]["series"]["count"] == 5
        # Decisions of one claim may be written concurrently: the note is one of them.
        assert events["FailedAllocation"]["note"] in {f"needs 8 GPUs, {n} free" for n in range(5)}
    finally:
        await cancel_and_wait(*tasks)
