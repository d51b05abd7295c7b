"""Pods of the wrong shape in the standalone store (written past `gpudra apply`'s checks: the KV
store checks no schema): the pod watch's loops (gates, pod units, consumers) read such a field as
absent and go on with every other pod, never end (which ended the service, at every restart)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.client import Client

from gpudra_bus import Publisher
from gpudra_claim_writer.claims import SCHEDULING_GATE
from gpudra_claim_writer.conftest import cancel_and_wait, until
from gpudra_claim_writer.consumers import Consumers
from gpudra_claim_writer.events import PodUnits
from gpudra_claim_writer.gates import Gates
from gpudra_claim_writer.ownership import Ownership
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import PODS


def gated_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulingGates": [{"name": SCHEDULING_GATE}],
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param({"spec": "gated"}, id="spec-not-an-object"),
        pytest.param({"status": "Running"}, id="status-not-an-object"),
        pytest.param(
            {"status": {"phase": "Running", "resourceClaimStatuses": "gpu"}},
            id="claim-statuses-not-a-list",
        ),
    ],
)
async def test_a_malformed_pod_does_not_stop_the_pod_loops(
    nc: Client, shape: dict[str, Any]
) -> None:
    store = KvStore(nc)
    bad = gated_pod("bad")
    bad["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    bad = await store.create(PODS, {**bad, **{k: v for k, v in shape.items() if k == "spec"}})
    if "status" in shape:  # a create drops the status: written through its subresource
        await store.replace_status(PODS, {**bad, "status": shape["status"]})
    ownership = Ownership(store)
    units = PodUnits(store, Publisher(nc), ownership)
    gates = Gates(store, ownership=ownership, on_pod=units.pod_changed)
    consumers = Consumers(store)
    tasks = [asyncio.create_task(gates.run()), asyncio.create_task(consumers.run())]
    try:
        await until(lambda: units.synced or any(t.done() for t in tasks))
        await store.create(PODS, gated_pod("good"))  # names no claim: let go at once
        await until(lambda: gates.lifted == 1 or any(t.done() for t in tasks))
        await asyncio.sleep(0.1)
        for task in tasks:
            assert not task.done(), task.exception()
    finally:
        await cancel_and_wait(*tasks)
    assert gates.lifted == 1
