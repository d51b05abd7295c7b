from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from gpudra_bus import ensure_buckets, ensure_streams
from gpudra_cli.errors import CliError
from gpudra_cli.standalone.apply import apply_claims, apply_plan, key_of, wait_decided
from gpudra_cli.standalone.client import TRACEPARENT, Client
from gpudra_cli.standalone.errors import NotRunningError
from gpudra_cli.standalone.manifests import Plan
from gpudra_cli.standalone.testdata import claim
from gpudra_kube import PODS, RESOURCE_CLAIMS


@pytest_asyncio.fixture
async def client(nats_url: str) -> AsyncIterator[Client]:
    c = await Client.open(nats_url)
    await ensure_streams(c.nc.jetstream())
    await ensure_buckets(c.nc.jetstream())
    yield c
    await c.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_create_is_idempotent_and_annotate_keeps_the_status(client: Client) -> None:
    name = unique("c")
    stored, created = await client.create_claim(claim(name))
    assert created
    again, created = await client.create_claim(claim(name))
    assert not created
    assert again["metadata"]["uid"] == stored["metadata"]["uid"]
    with_status = dict(again, status=claim(name, [("node-a", "gpu-0")])["status"])
    await client.store.replace_status(RESOURCE_CLAIMS, with_status)
    annotated = await client.annotate(name, "default", TRACEPARENT, "00-" + "1" * 32 + "-" + "2" * 16 + "-01")  # fmt: skip
    assert annotated["metadata"]["annotations"][TRACEPARENT].startswith("00-")
    assert annotated["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    await client.delete_claim(name, "default")
    with pytest.raises(CliError, match="not found"):
        await client.claim(name, "default")
    with pytest.raises(CliError, match="not found"):
        await client.delete_claim(name, "default")


async def test_wait_decided_sees_allocations_and_reasons(client: Client) -> None:
    ok, bad = claim(unique("ok")), claim(unique("bad"))
    applied = await apply_claims(client, [ok, bad])
    assert applied.created == [key_of(ok), key_of(bad)]
    stored = await client.claim(ok["metadata"]["name"], "default")
    stored["status"] = claim("x", [("node-a", "gpu-0")])["status"]
    await client.store.replace_status(RESOURCE_CLAIMS, stored)
    await client.annotate(bad["metadata"]["name"], "default", "gpudra.io/unschedulable", "no")
    found, ms = await wait_decided(
        client, [key_of(ok), key_of(bad)], applied, timeout=10, settle=0.2
    )
    assert set(found) == {key_of(ok), key_of(bad)}
    assert set(ms) == {key_of(ok)}
    assert ms[key_of(ok)] > 0


async def test_an_unreachable_system_is_not_running() -> None:
    with pytest.raises(NotRunningError, match="is `gpudra up` running"):
        await Client.open("nats://127.0.0.1:1", deadline=0.5)


async def test_apply_plan_writes_pods_then_owned_claims_then_pod_status(client: Client) -> None:
    pod_name, template, named = unique("pod"), unique("tpl"), unique("named")
    generated = f"{template}-0"
    statuses = [{"name": "gpu", "resourceClaimName": generated}]
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": template},
                {"name": "other", "resourceClaimName": named},
            ],
        },
        "status": {"resourceClaimStatuses": statuses},
    }
    plan = Plan(
        claims=[claim(generated), claim(named)],
        pods=[pod],
        owners={f"default/{generated}": f"default/{pod_name}"},
    )
    applied = await apply_plan(client, plan)
    assert applied.created == [f"default/{generated}", f"default/{named}"]
    stored = await client.store.get(PODS, pod_name, "default")
    assert stored["status"]["resourceClaimStatuses"] == statuses
    owned = await client.claim(generated, "default")
    (owner,) = owned["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        pod_name,
        stored["metadata"]["uid"],
        True,
    )
    assert "ownerReferences" not in (await client.claim(named, "default"))["metadata"]
    again = await apply_plan(client, plan)
    assert again.unchanged == applied.created, "a second apply changes nothing"
    assert (await client.store.get(PODS, pod_name, "default"))["metadata"]["uid"] == owner["uid"]
