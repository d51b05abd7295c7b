"""The rendered RBAC against the API calls gpudra's code really makes.

Each test runs a service's Kubernetes-facing code (the same classes its main module wires up)
against the fake API server, records every request, turns each into the (API group, resource,
verb) an API server authorizes, and asks the rendered ClusterRoles whether the service account may
make it, as the RBAC authorizer would: a call no rule grants would be refused (403) in a cluster.
Limits: only the paths these tests drive are seen, so grants for calls
elsewhere are checked by `kustomize_test.test_rbac_grants_exactly_the_documented_list`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from deploy import manifests
from deploy.manifests import by_kind
from gpudra_inventory.mirror import SliceMirror
from gpudra_inventory.nodes import ClusterNodes
from gpudra_inventory.pools import Change, PoolBook
from gpudra_inventory.wipes import SliceWatch
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.recorder import WARNING, EventRecorder, reference
from gpudra_kube.resources import EVENTS, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES, KubeObject
from gpudra_kubelet_plugin.claimsource import StoreClaimSource
from gpudra_kubelet_plugin.errors import ClaimNotFoundError
from gpudra_slices import SliceOptions
from gpudra_testing.kubeapi import FakeKubeApi

Grant = tuple[str, str, str]  # (API group, resource[/subresource], verb)
Objs = list[dict[str, Any]]


class RecordingKubeApi(FakeKubeApi):
    """The fake API server, also recording each request's query (list and watch differ there)."""

    def __init__(self) -> None:
        super().__init__(validate_version=None, bookmark_interval=0.1)
        self.calls: list[tuple[str, str, dict[str, str]]] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.calls.append((request.method, request.path, dict(request.query)))
        return await super()._handle(request)

    def grants_used(self) -> set[Grant]:
        return {_authorization_attributes(*call) for call in self.calls}


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def _authorization_attributes(method: str, path: str, query: dict[str, str]) -> Grant:
    """What the API server's RBAC authorizer checks for one resource request."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        raise AssertionError(f"not a resource request: {method} {path}")
    if rest[:1] == ["namespaces"]:
        rest = rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2:]
    if sub:
        resource = f"{resource}/{sub[0]}"
    if method == "GET":
        if name is not None:
            return group, resource, "get"
        watching = query.get("watch", "").lower() in ("1", "true")
        return group, resource, "watch" if watching else "list"
    return group, resource, _VERBS[method]


def _grants(objs: Objs, service_account: str) -> set[Grant]:
    """(group, resource, verb) the rendered ClusterRoles give `service_account`."""
    roles = {r["metadata"]["name"]: r for r in by_kind(objs, "ClusterRole")}
    out: set[Grant] = set()
    for binding in by_kind(objs, "ClusterRoleBinding"):
        subjects = binding["subjects"]
        if not any(
            s["kind"] == "ServiceAccount"
            and s["name"] == service_account
            and s["namespace"] == manifests.NAMESPACE
            for s in subjects
        ):
            continue
        for rule in roles[binding["roleRef"]["name"]]["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((group, resource, verb))
    return out


@pytest.fixture
async def kube_api() -> AsyncIterator[RecordingKubeApi]:
    api = RecordingKubeApi()
    await api.start()
    try:
        yield api
    finally:
        await api.stop()


@pytest.fixture
async def store(kube_api: RecordingKubeApi, tmp_path: Path) -> AsyncIterator[ApiStore]:
    api = await ApiStore.from_kubeconfig(str(kube_api.write_kubeconfig(tmp_path / "kubeconfig")))
    try:
        yield api
    finally:
        await api.close()


OVERLAY_PARAMS = [pytest.param(name, id=name) for name in manifests.OVERLAYS]


@pytest.fixture(params=OVERLAY_PARAMS)
def overlay(request: pytest.FixtureRequest, rendered: dict[str, Objs]) -> Objs:
    objs: Objs = rendered[request.param]
    return objs


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_claim_writer_may_make_every_call_of_its_event_series(
    overlay: Objs, kube_api: RecordingKubeApi, store: ApiStore
) -> None:
    """The recorder creates an Event, updates it as a series, and on a 409 Conflict (someone
    else wrote the Event) reads it again before updating: get is part of the series."""
    clock = Clock()
    recorder = EventRecorder(
        store, controller="gpudra.io/claim-writer", instance="cw-0", clock=clock
    )
    claim = reference(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c1", "namespace": "team-a", "uid": "uid-1"},
        }
    )

    def failed(note: str) -> None:
        recorder.record(
            claim, type=WARNING, reason="FailedAllocation", action="Allocate", note=note
        )

    failed("no fit")
    await recorder.process_pending()
    [event] = kube_api.objects(EVENTS)
    await kube_api.put(EVENTS, {**event, "note": "edited"})  # our resourceVersion is stale now
    clock.now += 1
    failed("still no fit")
    await recorder.process_pending()
    [event] = kube_api.objects(EVENTS)
    assert (event["series"]["count"], event["note"]) == (2, "still no fit")

    used = kube_api.grants_used()
    assert ("events.k8s.io", "events", "get") in used  # the conflict path ran
    assert used - _grants(overlay, "gpudra-claim-writer") == set()


async def _drain(events: AsyncIterator[Any]) -> None:
    async for _ in events:
        pass


async def test_no_grant_names_a_verb_the_api_adapter_never_sends(
    overlay: Objs, kube_api: RecordingKubeApi, store: ApiStore
) -> None:
    """Every gpudra service reaches the API through `gpudra_kube`'s `Store` (ApiStore in a
    cluster). Each of its calls, made once here, gives the verbs it can send at all: a grant of
    any other verb (say patch) is one no gpudra code can use."""
    claim: KubeObject = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": "team-a"},
        "spec": {"devices": {}},
    }
    listed = await store.list(RESOURCE_CLAIMS, "team-a")
    await _drain(
        store.watch(
            RESOURCE_CLAIMS, "team-a", resource_version=listed.resource_version, timeout=0.2
        )
    )
    created = await store.create(RESOURCE_CLAIMS, claim)
    current = await store.get(RESOURCE_CLAIMS, "c1", "team-a")
    replaced = await store.replace(RESOURCE_CLAIMS, {**current, "metadata": current["metadata"]})
    await store.replace_status(RESOURCE_CLAIMS, {**replaced, "status": {}})
    await store.delete(RESOURCE_CLAIMS, "c1", "team-a")
    assert created["metadata"]["name"] == "c1"
    sendable = {verb for _, _, verb in kube_api.grants_used()}
    assert sendable == {"list", "watch", "get", "create", "update", "delete"}

    for service in ("gpudra-inventory", "gpudra-claim-writer", "gpudra-kubelet-plugin"):
        never_sent = {g for g in _grants(overlay, service) if g[2] not in sendable}
        assert never_sent == set(), service


# --- services whose every API call is one component: grants must be exactly those calls ------


async def test_kubelet_plugin_grants_are_exactly_its_claim_reads(
    overlay: Objs, kube_api: RecordingKubeApi, store: ApiStore
) -> None:
    """In a cluster the plugin's only API use is `StoreClaimSource` (main.py, claim source
    'kubernetes'): one get per claim the kubelet asks it to prepare, never a list or a watch."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": "team-a"},
        "spec": {"devices": {}},
    }
    await kube_api.put(RESOURCE_CLAIMS, claim)
    source = StoreClaimSource(store)
    assert (await source.get("team-a", "c1"))["metadata"]["name"] == "c1"
    with pytest.raises(ClaimNotFoundError):
        await source.get("team-a", "gone")
    assert kube_api.grants_used() == _grants(overlay, "gpudra-kubelet-plugin")


def _slice(node: str, devices: int) -> KubeObject:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{manifests.DRIVER}"},
        "spec": {
            "driver": manifests.DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": devices, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


async def test_inventory_grants_are_exactly_its_slice_mirror(
    overlay: Objs, kube_api: RecordingKubeApi, store: ApiStore
) -> None:
    """In a cluster the inventory's only API use is `SliceMirror` (main.py, mode 'kubernetes'):
    it creates, reads and replaces a node's slices, deletes the ones a change drops, and at start
    lists them to prune what no pool owns. Its `SliceWatch` (the leader's) lists and watches the
    slices, to write back at once those the kubelet deletes. Its `ClusterNodes` lists and watches
    the Nodes that own the slices, and gets a Node the watch does not know before removing that
    node's slices."""
    for node in ("n1", "n2"):
        await kube_api.put(NODES, {"metadata": {"name": node}})
    nodes = ClusterNodes(store, watch_timeout=1.0)
    following = asyncio.create_task(nodes.run())  # list, watch
    try:
        for _ in range(200):
            if nodes.synced:
                break
            await asyncio.sleep(0.05)
        assert nodes.uid("n1") is not None
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
    wipes = SliceWatch(store, manifests.DRIVER, delay=1.0, watch_timeout=1.0)
    wipes.follow(True)  # list, watch
    try:
        for _ in range(200):
            if any(q.get("watch") for m, p, q in kube_api.calls if p.endswith("/resourceslices")):
                break
            await asyncio.sleep(0.05)
    finally:
        await wipes.close()
    mirror = SliceMirror(store, manifests.DRIVER, nodes=nodes)
    await mirror.apply(Change("n1", 1, write=[_slice("n1", 1)], delete=[]))  # get 404, create
    await mirror.apply(Change("n1", 2, write=[_slice("n1", 2)], delete=[]))  # get, update
    await mirror.apply(Change("n2", 1, write=[_slice("n2", 1)], delete=[]))
    await mirror.apply(Change("n2", 2, write=[], delete=[_slice("n2", 1)["metadata"]["name"]]))
    await kube_api.put(RESOURCE_SLICES, _slice("n3", 1))  # left over from a vanished node
    assert await mirror.prune(PoolBook(SliceOptions())) == 2  # list, delete
    await kube_api.put(RESOURCE_SLICES, _slice("n4", 1))
    # A pool of a Node the watch has not seen: get the Node (404), delete the pool's slices.
    await mirror.apply(Change("n4", 2, write=[_slice("n4", 2)], delete=[]))
    assert kube_api.objects(RESOURCE_SLICES) == []
    assert kube_api.grants_used() == _grants(overlay, "gpudra-inventory")
