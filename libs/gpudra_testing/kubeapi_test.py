from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from gpudra_kube.resources import RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra_testing.kubeapi import FakeKubeApi


@pytest_asyncio.fixture
async def api() -> AsyncIterator[FakeKubeApi]:
    async with FakeKubeApi(bookmark_interval=0.05) as server:
        yield server


CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def claim(name: str = "c1", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, **meta},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }


async def call(
    api: FakeKubeApi, method: str, path: str, body: Any = None
) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, api.url + path, json=body) as resp,
    ):
        return resp.status, await resp.json()


async def watch_lines(api: FakeKubeApi, query: str, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{api.url}{CLAIMS}?watch=true&{query}") as resp,
    ):
        async for line in resp.content:
            out.append(json.loads(line))
            if len(out) >= n:
                break
    return out


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        pytest.param("GET", "/apis/resource.k8s.io/v1/namespaces/x/nope", 404, id="unknown-plural"),
        pytest.param("GET", "/apis/other/v1/resourceclaims", 404, id="unknown-group"),
        pytest.param("GET", "/apis/resource.k8s.io/v1/namespaces/x/resourceslices", 404, id="cluster-scoped-in-ns"),
        pytest.param("GET", "/apis/resource.k8s.io/v1/resourceslices/s/status", 404, id="no-status-subresource"),
        pytest.param("GET", "/apis/resource.k8s.io/v1/resourceclaims/c1", 404, id="namespaced-without-ns"),
        pytest.param("PATCH", CLAIMS + "/c1", 405, id="patch-unsupported"),
        pytest.param("GET", "/healthz", 404, id="unknown-root"),
    ],
)  # fmt: skip
async def test_routing(api: FakeKubeApi, method: str, path: str, code: int) -> None:
    status, body = await call(api, method, path)
    assert status == code
    assert body["kind"] == "Status"
    assert body["code"] == code


async def test_create_sets_server_fields_and_clears_status(api: FakeKubeApi) -> None:
    c = claim(uid="mine")
    c["status"] = {"reservedFor": []}
    status, created = await call(api, "POST", CLAIMS, c)
    assert status == 201
    meta = created["metadata"]
    assert meta["uid"] != "mine"
    assert meta["namespace"] == "default"
    assert meta["generation"] == 1
    assert meta["creationTimestamp"].endswith("Z")
    assert "status" not in created
    status, body = await call(api, "POST", CLAIMS, claim())
    assert (status, body["reason"]) == (409, "AlreadyExists")


async def test_generate_name(api: FakeKubeApi) -> None:
    c = claim("")
    c["metadata"] = {"generateName": "pod-gpu-"}
    status, created = await call(api, "POST", CLAIMS, c)
    assert status == 201
    assert created["metadata"]["name"].startswith("pod-gpu-")
    assert len(created["metadata"]["name"]) == len("pod-gpu-") + 5


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        pytest.param(lambda c: c["spec"].update(bogus=True), 422, id="unknown-field"),
        pytest.param(lambda c: c["spec"]["devices"]["requests"][0].update(name=5), 422, id="wrong-type"),
        pytest.param(lambda c: c.update(kind="Pod"), 400, id="wrong-kind"),
        pytest.param(lambda c: c["metadata"].update(namespace="other"), 400, id="namespace-mismatch"),
        pytest.param(lambda c: c["metadata"].pop("name"), 422, id="no-name"),
    ],
)  # fmt: skip
async def test_invalid_objects_are_rejected(api: FakeKubeApi, mutate: Any, code: int) -> None:
    c = claim()
    mutate(c)
    status, body = await call(api, "POST", CLAIMS, c)
    assert status == code, body
    assert api.objects(RESOURCE_CLAIMS) == []


async def test_update_rules(api: FakeKubeApi) -> None:
    _, created = await call(api, "POST", CLAIMS, claim())
    rv = created["metadata"]["resourceVersion"]
    with_status = {
        **created,
        "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]},
    }
    status, after_status = await call(api, "PUT", CLAIMS + "/c1/status", with_status)
    assert status == 200
    assert after_status["status"]["reservedFor"][0]["name"] == "p"
    assert after_status["metadata"]["generation"] == 1
    # Stale version: conflict, nothing changes.
    status, body = await call(
        api,
        "PUT",
        CLAIMS + "/c1",
        {**created, "metadata": {**created["metadata"], "resourceVersion": rv}},
    )
    assert (status, body["reason"]) == (409, "Conflict")
    # Main resource: spec change bumps generation, status is kept.
    new = json.loads(json.dumps(after_status))
    new["spec"]["devices"]["requests"][0]["name"] = "gpu2"
    new.pop("status")
    status, updated = await call(api, "PUT", CLAIMS + "/c1", new)
    assert status == 200
    assert updated["metadata"]["generation"] == 2
    assert updated["status"] == after_status["status"]
    status, _ = await call(api, "PUT", CLAIMS + "/other", new)
    assert status == 400  # name in body differs from the URL


async def test_watch_initial_state_changes_and_timeout(api: FakeKubeApi) -> None:
    await call(api, "POST", CLAIMS, claim("a"))
    await api.put(
        RESOURCE_CLAIMS, {**claim("b"), "metadata": {"name": "b", "namespace": "default"}}
    )
    events = await watch_lines(api, "timeoutSeconds=1", 10)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]  # the stream ended at the timeout


async def test_watch_bookmarks_and_gone(api: FakeKubeApi) -> None:
    rv = api.resource_version
    events = await watch_lines(api, f"resourceVersion={rv}&allowWatchBookmarks=true", 1)
    assert events[0]["type"] == "BOOKMARK"
    assert events[0]["object"]["metadata"]["resourceVersion"] == str(rv)
    await call(api, "POST", CLAIMS, claim("a"))
    api.compact()
    (gone,) = await watch_lines(api, f"resourceVersion={rv}", 5)
    assert gone["type"] == "ERROR"
    assert gone["object"]["code"] == 410


async def test_delete_with_finalizers_and_injected_faults(api: FakeKubeApi) -> None:
    await call(api, "POST", CLAIMS, claim(finalizers=["x.io/f"]))
    status, marked = await call(api, "DELETE", CLAIMS + "/c1")
    assert status == 200
    assert marked["metadata"]["deletionTimestamp"]
    api.inject_error(503, method="GET", times=2)
    assert (await call(api, "GET", CLAIMS + "/c1"))[0] == 503
    assert (await call(api, "GET", CLAIMS + "/c1"))[0] == 503
    status, current = await call(api, "GET", CLAIMS + "/c1")
    assert status == 200
    current["metadata"]["finalizers"] = []
    assert (await call(api, "PUT", CLAIMS + "/c1", current))[0] == 200
    assert (await call(api, "GET", CLAIMS + "/c1"))[0] == 404


async def test_cluster_scoped_list(api: FakeKubeApi) -> None:
    s = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s1"},
        "spec": {
            "driver": "d.example.com",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "allNodes": True,
        },
    }
    status, _ = await call(api, "POST", "/apis/resource.k8s.io/v1/resourceslices", s)
    assert status == 201
    status, listed = await call(api, "GET", "/apis/resource.k8s.io/v1/resourceslices")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["s1"]
    assert "kind" not in listed["items"][0]
    assert listed["metadata"]["resourceVersion"] == str(api.resource_version)
    assert len(api.objects(RESOURCE_SLICES)) == 1


async def test_pagination_and_expired_continue(api: FakeKubeApi) -> None:
    for i in range(3):
        await call(api, "POST", CLAIMS, claim(f"c{i}"))
    status, first = await call(api, "GET", CLAIMS + "?limit=2")
    assert status == 200
    assert [i["metadata"]["name"] for i in first["items"]] == ["c0", "c1"]
    assert first["metadata"]["remainingItemCount"] == 1
    token = first["metadata"]["continue"]
    status, second = await call(api, "GET", f"{CLAIMS}?limit=2&continue={token}")
    assert [i["metadata"]["name"] for i in second["items"]] == ["c2"]
    assert "continue" not in second["metadata"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    await call(api, "POST", CLAIMS, claim("late"))
    status, body = await call(api, "GET", f"{CLAIMS}?limit=2&continue={token}")
    assert (status, body["reason"]) == (410, "Expired")
    assert (await call(api, "GET", f"{CLAIMS}?continue=garbage!"))[0] == 400


async def test_only_accepted_tokens_are_served(api: FakeKubeApi) -> None:
    """After `accept_tokens`, a request without one of them is 401, before any fault or route."""
    assert (await call(api, "GET", CLAIMS))[0] == 200  # no tokens configured: all served
    api.accept_tokens("new")
    api.inject_error(503, times=1)
    for headers in ({}, {"Authorization": "Bearer old"}, {"Authorization": "Basic new"}):
        async with (
            aiohttp.ClientSession(headers=headers) as session,
            session.get(api.url + CLAIMS) as resp,
        ):
            assert resp.status == 401
            assert (await resp.json())["reason"] == "Unauthorized"
    async with (
        aiohttp.ClientSession(headers={"Authorization": "Bearer new"}) as session,
        session.get(api.url + CLAIMS) as resp,
    ):
        assert resp.status == 503  # authenticated: the injected fault is still there


async def test_throttling_says_when_to_retry(api: FakeKubeApi) -> None:
    """A 429 with `retry_after` carries the header and the Status detail, as the server's."""
    api.inject_error(429, reason="TooManyRequests", retry_after=3)
    async with aiohttp.ClientSession() as session, session.get(api.url + CLAIMS) as resp:
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "3"
        assert (await resp.json())["details"] == {"retryAfterSeconds": 3}
    assert (await call(api, "GET", CLAIMS))[0] == 200


async def test_core_v1_nodes_are_served(api: FakeKubeApi) -> None:
    """Nodes (cluster-scoped core v1): what the inventory follows to own its slices."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    status, created = await call(api, "POST", "/api/v1/nodes", node)
    assert status == 201
    assert created["metadata"]["uid"]
    status, got = await call(api, "GET", "/api/v1/nodes/n1")
    assert (status, got["metadata"]["uid"]) == (200, created["metadata"]["uid"])
    status, listed = await call(api, "GET", "/api/v1/nodes")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["n1"]
    status, _ = await call(api, "DELETE", "/api/v1/nodes/n1")
    assert status == 200
    status, _ = await call(api, "GET", "/api/v1/nodes/n1")
    assert status == 404
