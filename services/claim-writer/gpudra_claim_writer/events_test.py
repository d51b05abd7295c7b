"""Pod units against the HTTP-level fake API and a real nats-server: which claims go out, when, and
with which pod."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from nats.aio.client import Client

from gpudra_bus import Publisher, connect, ensure_streams, subjects
from gpudra_bus.subjects import Kind as SubjectKind
from gpudra_claim_writer.conftest import Heard, cancel_and_wait
from gpudra_claim_writer.events import PodEntry, PodUnits, owner_pod
from gpudra_claim_writer.ownership import Ownership
from gpudra_kube.api_backend import ApiStore, load_api_client
from gpudra_kube.errors import KubeError
from gpudra_kube.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS
from gpudra_kube.store import EventType, WatchEvent
from gpudra_testing.kubeapi import FakeKubeApi
from gpudrapb.v1 import claims_pb2

NIC_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "nic.example.com"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "nic.example.com"'}}]},
}


def claim(name: str, device_class: str = "gpu.nvidia.com", owner: str = "") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}
        },
    }
    if owner:
        obj["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": owner,
                "uid": f"pod-{owner}",
                "controller": True,
            }
        ]
    return obj


def pod(
    name: str,
    claims: list[str],
    templates: dict[str, str | None] | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    """A pod naming `claims` directly and, per template entry, a generated claim (None: not yet)."""
    templates = templates or {}
    refs: list[dict[str, Any]] = [
        {"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)
    ]
    refs += [{"name": entry, "resourceClaimTemplateName": "tpl"} for entry in templates]
    statuses = [{"name": e, "resourceClaimName": c} for e, c in templates.items() if c]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"pod-{name}",
            "creationTimestamp": created,
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}], "resourceClaims": refs},
        "status": {"resourceClaimStatuses": statuses} if statuses else {},
    }


class Env:
    def __init__(
        self,
        fake: FakeKubeApi,
        store: ApiStore,
        units: PodUnits,
        publisher: Publisher,
        heard: Heard,
    ) -> None:
        self.fake = fake
        self.store = store
        self.units = units
        self.publisher = publisher
        self.heard = heard

    @property
    def events(self) -> list[claims_pb2.ClaimEvent]:
        """The events taken so far (`heard.take()`: `pod` and `sent` take them)."""
        return self.heard.events

    async def pod(self, obj: dict[str, Any], deleted: bool = False) -> None:
        kind = EventType.DELETED if deleted else EventType.MODIFIED
        await self.units.pod_changed(WatchEvent(kind, obj))
        await self.heard.take()  # it published before it returned: all of that is here

    async def claims(self, *objs: dict[str, Any]) -> None:
        for obj in objs:
            await self.fake.put(RESOURCE_CLAIMS, obj)

    async def sent(self) -> dict[str, tuple[str, list[str]]]:
        """claim name -> (pod name, sorted pod claim names) of every event so far."""
        await self.heard.take()
        return {
            e.claim.name: (e.pod_name, sorted(u.removeprefix("uid-") for u in e.pod_claims))
            for e in self.events
        }


@pytest_asyncio.fixture
async def env(nats_url: str, tmp_path: Any) -> AsyncIterator[Env]:
    nc: Client = await connect(nats_url, name="events-test", deadline=10)
    await ensure_streams(nc.jetstream())
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as fake:
        client = await load_api_client(str(fake.write_kubeconfig(tmp_path / "kubeconfig")))
        store = ApiStore(client)
        await fake.put(DEVICE_CLASSES, NIC_CLASS)
        publisher = Publisher(nc)
        units = PodUnits(store, publisher, Ownership(store))
        await units.pod_changed(WatchEvent(EventType.SYNCED, {}))  # the pod list came back empty
        heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
        try:
            yield Env(fake, store, units, publisher, heard)
        finally:
            await heard.stop()
            await store.close()
    await nc.drain()


def test_owner_pod_is_the_controlling_pod_only() -> None:
    assert owner_pod(claim("a", owner="p")) == "pod-p"
    assert owner_pod(claim("a")) == ""
    other = claim("a")
    other["metadata"]["ownerReferences"] = [{"kind": "Pod", "uid": "x", "controller": False}]
    assert owner_pod(other) == ""


@pytest.mark.parametrize(
    ("obj", "claims"),
    [
        pytest.param(pod("p", ["a", "b", "a"]), ("a", "b"), id="named-claims-once-each"),
        pytest.param(pod("p", ["a"], {"t": "p-t"}), ("a", "p-t"), id="template-claim-generated"),
        pytest.param(pod("p", ["a"], {"t": None}), None, id="template-claim-not-generated-yet"),
        pytest.param(pod("p", []), None, id="no-claims-not-tracked"),
    ],
)
def test_pod_entry(obj: dict[str, Any], claims: tuple[str, ...] | None) -> None:
    entry = PodEntry.of(obj)
    if not obj["spec"]["resourceClaims"]:
        assert entry is None
        return
    assert entry is not None
    assert entry.claims == claims
    assert (entry.uid, entry.key) == ("pod-p", "default/p")


async def test_pod_claims_go_out_together_once_all_exist(env: Env) -> None:
    await env.pod(pod("p", ["a", "b"]))
    await env.claims(claim("a"))
    assert await env.units.offer(claim("a")) is True, "a claim a known pod uses is the pod's"
    assert await env.sent() == {}, "held: claim b does not exist yet"
    await env.claims(claim("b"))
    assert await env.units.offer(claim("b")) is True
    assert await env.sent() == {
        "a": ("default/p", ["a", "b"]),
        "b": ("default/p", ["a", "b"]),
    }
    await env.units.offer(claim("a"))
    await env.pod(pod("p", ["a", "b"]))
    assert len(env.events) == 2, "each claim goes out once per generation"


async def test_a_pod_update_that_changes_no_claim_reads_nothing(env: Env) -> None:
    await env.claims(claim("a"), claim("b"))
    await env.pod(pod("p", ["a", "b"]))
    assert len(await env.sent()) == 2
    env.fake.inject_error(403, method="GET", path_contains="resourceclaims")
    running = pod("p", ["a", "b"])
    running["status"]["phase"] = "Running"
    await env.pod(running)
    with pytest.raises(KubeError):  # the fault is still armed: nothing read a claim before
        await env.store.get(RESOURCE_CLAIMS, "a", "default")


async def test_claim_no_pod_uses_goes_alone_and_template_claim_waits_for_its_pod(
    env: Env,
) -> None:
    assert await env.units.offer(claim("lone")) is False
    generated = claim("p-t", owner="p")
    await env.claims(generated, claim("a"))
    assert await env.units.offer(generated) is True, "a template's claim waits for its pod"
    await env.pod(pod("p", ["a"], {"t": None}))
    assert await env.sent() == {}, "the pod does not name its generated claim yet"
    await env.pod(pod("p", ["a"], {"t": "p-t"}))
    assert await env.sent() == {
        "a": ("default/p", ["a", "p-t"]),
        "p-t": ("default/p", ["a", "p-t"]),
    }


async def test_other_drivers_claims_are_left_out_of_the_pod(env: Env) -> None:
    await env.claims(claim("gpu"), claim("nic", "nic.example.com"))
    await env.pod(pod("p", ["gpu", "nic"]))
    assert await env.sent() == {"gpu": ("default/p", ["gpu"])}


async def test_shared_claim_goes_with_the_oldest_complete_pod(env: Env) -> None:
    await env.claims(claim("shared"), claim("a"), claim("b"))
    old = pod("old", ["shared", "missing"], created="2026-01-01T00:00:00Z")
    young = pod("young", ["shared", "b"], created="2026-01-02T00:00:00Z")
    oldest = pod("oldest", ["shared", "a"], created="2025-12-31T00:00:00Z")
    await env.pod(old)
    await env.pod(young)
    assert await env.sent() == {
        "shared": ("default/young", ["b", "shared"]),
        "b": ("default/young", ["b", "shared"]),
    }, "the old pod is not complete: the young one takes the shared claim"
    await env.pod(oldest)
    assert (await env.sent())["a"] == ("default/oldest", ["a", "shared"])
    assert [e.claim.name for e in env.events].count("shared") == 1, "sent once per generation"


async def test_held_claim_goes_alone_when_its_pod_is_deleted(env: Env) -> None:
    await env.claims(claim("a"))
    await env.pod(pod("p", ["a", "never"]))
    assert await env.units.offer(claim("a")) is True
    assert await env.sent() == {}
    await env.pod(pod("p", ["a", "never"]), deleted=True)
    assert await env.sent() == {"a": ("", [])}, "no pod uses it any more: alone, as before"
    assert await env.units.offer(claim("a")) is False


async def test_allocated_claims_are_listed_not_sent(env: Env) -> None:
    done = claim("done")
    done["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "r", "driver": "gpu.nvidia.com", "pool": "n", "device": "d"}
                ]
            }
        }
    }
    await env.claims(done, claim("new"))
    await env.pod(pod("p", ["done", "new"]))
    assert await env.sent() == {"new": ("default/p", ["done", "new"])}
    assert [e.pod_uid for e in env.events] == ["pod-p"]
    assert env.fake.objects(PODS) == [], "the pod watch feeds the units; nothing is written"


def _names(heard: Heard) -> list[str]:
    """`<claim>:<pod>` of every event heard (the pod empty for a claim sent alone)."""
    return [f"{e.claim.name}:{e.pod_name}" for e in heard.events]


async def test_claims_seen_before_the_pods_were_listed_wait_for_the_list(
    nats_url: str, tmp_path: Any
) -> None:
    nc: Client = await connect(nats_url, name="events-test-sync", deadline=10)
    await ensure_streams(nc.jetstream())
    heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as fake:
        client = await load_api_client(str(fake.write_kubeconfig(tmp_path / "kubeconfig")))
        store = ApiStore(client)
        try:
            units = PodUnits(store, Publisher(nc), Ownership(store))
            for name in ("a", "b", "lone", "gone"):
                await fake.put(RESOURCE_CLAIMS, claim(name))
                assert await units.offer(claim(name)) is True, "held until the pods are listed"
            await units.pod_changed(WatchEvent(EventType.ADDED, pod("p", ["a", "b"])))
            await store.delete(RESOURCE_CLAIMS, "gone", "default")
            await heard.take()
            assert sorted(_names(heard)) == ["a:default/p", "b:default/p"]
            await units.pod_changed(WatchEvent(EventType.SYNCED, {}))
            await heard.take()
            assert sorted(_names(heard)) == ["a:default/p", "b:default/p", "lone:"]
            assert await units.offer(claim("later")) is False, "listed: alone at once"
        finally:
            await heard.stop()
            await store.close()
    await nc.drain()


async def test_a_forgotten_claim_may_go_out_again(env: Env) -> None:
    await env.claims(claim("a"), claim("b"))
    await env.pod(pod("p", ["a", "b"]))
    assert len(env.events) == 2
    env.units.forget("uid-a")
    await env.units.offer(claim("a"))
    await env.sent()
    assert [e.claim.name for e in env.events].count("a") == 2
    assert [e.claim.name for e in env.events].count("b") == 1


ALLOCATED = {
    "allocation": {
        "devices": {
            "results": [{"request": "r", "driver": "gpu.nvidia.com", "pool": "n", "device": "d"}]
        }
    }
}


@pytest.mark.parametrize(
    ("pods", "offered", "with_pod", "sent"),
    [
        pytest.param(
            [pod("p", ["a", "b"])], claim("a"), True, ("default/p", ["a", "b"]), id="with-its-pod"
        ),
        pytest.param(
            [
                pod("young", ["a", "b"], created="2026-01-02T00:00:00Z"),
                pod("old", ["a"], created="2026-01-01T00:00:00Z"),
            ],
            claim("a"),
            True,
            ("default/old", ["a"]),
            id="shared-with-its-home-pod",
        ),
        pytest.param([], claim("a"), False, None, id="no-pod-uses-it-alone"),
        pytest.param(
            [pod("p", ["a", "never"])], claim("a"), False, None, id="incomplete-pod-alone"
        ),
        pytest.param(
            [pod("p", ["a", "b"])],
            {**claim("a"), "status": ALLOCATED},
            True,
            None,
            id="allocated-again-nothing-to-offer",
        ),
    ],
)
async def test_a_deallocated_claim_is_offered_again_with_its_pod(
    env: Env,
    pods: list[dict[str, Any]],
    offered: dict[str, Any],
    with_pod: bool,
    sent: tuple[str, list[str]] | None,
) -> None:
    await env.claims(claim("a"), claim("b"))
    for obj in pods:
        await env.pod(obj)
    await env.sent()
    before = len(env.events)
    assert await env.units.reoffer(offered) is with_pod
    await env.sent()
    again = [e for e in env.events[before:] if e.claim.name == "a"]
    if sent is None:
        assert again == []
        return
    assert [(e.pod_name, sorted(u.removeprefix("uid-") for u in e.pod_claims)) for e in again] == [
        sent
    ]


@pytest.mark.parametrize(
    ("metadata", "status", "tracked"),
    [
        pytest.param({}, {}, True, id="new"),
        pytest.param({}, {"phase": "Running"}, True, id="running"),
        pytest.param({}, {"phase": "Succeeded"}, False, id="finished"),
        pytest.param({}, {"phase": "Failed"}, False, id="failed"),
        pytest.param({"deletionTimestamp": "2026-01-01T00:00:00Z"}, {}, False, id="deleting"),
    ],
)
def test_only_pods_that_may_run_are_units(
    metadata: dict[str, Any], status: dict[str, Any], tracked: bool
) -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u", **metadata},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]},
        "status": status,
    }
    assert (PodEntry.of(pod) is not None) is tracked


def left(name: str, mark: str = "") -> dict[str, Any]:
    """A claim whose allocation (id `0123`) was cleared, finalizer gone, while nobody watched;
    marked for allocation `mark` ("" for not at all)."""
    obj = claim(name)
    obj["metadata"]["annotations"] = {"gpudra.io/allocation-id": "0123"}
    if mark:
        obj["metadata"]["annotations"]["gpudra.io/consumers-left"] = mark
    return obj


@pytest.mark.parametrize(
    ("stored", "with_pod", "alone"),
    [
        pytest.param(left("a"), ["b"], [], id="release-unreported-held-back"),
        pytest.param(left("a", mark="0123"), ["a", "b"], [], id="marked-only-with-a-pod"),
        pytest.param(claim("a"), ["a", "b"], ["a"], id="plain-with-its-pod-or-alone"),
    ],
)
async def test_a_claim_cleared_unseen_goes_out_only_once_its_release_is_reported(
    env: Env, stored: dict[str, Any], with_pod: list[str], alone: list[str]
) -> None:
    """Its old decision is still recorded: offered before the intake reported its release, the
    allocator would only announce that decision again."""
    await env.claims(stored, claim("b"))
    await env.pod(pod("p", ["a", "b"]))
    assert sorted(await env.sent()) == with_pod
    await env.pod(pod("p", ["a", "b"]), deleted=True)
    env.events.clear()
    env.units.forget("uid-a")
    # A pod that names it but is never complete goes: the claim is nobody's, alone if allowed.
    await env.pod(pod("q", ["a", "never"]))
    await env.pod(pod("q", ["a", "never"]), deleted=True)
    assert sorted(await env.sent()) == alone


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        pytest.param(503, "ServiceUnavailable", id="unavailable"),
        pytest.param(429, "TooManyRequests", id="throttled"),
    ],
)
async def test_a_claim_held_for_the_pod_list_is_not_lost_to_a_failed_read(
    nats_url: str, tmp_path: Any, status: int, reason: str
) -> None:
    """At a start every pending claim is held until the pods are listed, then read again, all at
    once (a burst the API server may throttle). A read that fails then must not drop the claim:
    nothing else would offer it again (a pending claim no pod uses gets no further event)."""
    nc: Client = await connect(nats_url, name="events-test-sync-error", deadline=10)
    await ensure_streams(nc.jetstream())
    heard = await Heard.on(nc, subjects.all_of(SubjectKind.CLAIMS))
    try:
        async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as fake:
            client = await load_api_client(str(fake.write_kubeconfig(tmp_path / "kubeconfig")))
            store = ApiStore(client)
            try:
                units = PodUnits(store, Publisher(nc), Ownership(store))
                for name in ("lone-a", "lone-b"):
                    await fake.put(RESOURCE_CLAIMS, claim(name))
                    assert await units.offer(claim(name)) is True, "held until pods are listed"
                fake.inject_error(
                    status, reason=reason, method="GET", path_contains="resourceclaims/lone-a"
                )
                await units.pod_changed(WatchEvent(EventType.SYNCED, {}))
            finally:
                await store.close()
    finally:
        await heard.stop()
        await nc.drain()
    assert sorted(_names(heard)) == ["lone-a:", "lone-b:"]


async def test_a_pod_whose_claim_read_failed_is_offered_again(env: Env) -> None:
    """The pod's last claim appears, and reading the others fails (throttled): nothing goes out
    then, and no event would come to try again (they all exist, pending). `retry` (what `run`
    does every few seconds) publishes the pod's claims once the reads work."""
    await env.pod(pod("p", ["a", "b"]))
    await env.claims(claim("a"), claim("b"))
    env.fake.inject_error(429, reason="TooManyRequests", method="GET", path_contains="claims/a")
    assert await env.units.offer(claim("b")) is True
    assert await env.sent() == {}
    await env.units.retry()
    assert await env.sent() == {
        "a": ("default/p", ["a", "b"]),
        "b": ("default/p", ["a", "b"]),
    }
    await env.units.retry()  # settled: nothing more
    await env.heard.take()
    assert len(env.events) == 2


async def test_a_claim_its_pod_left_is_offered_again_after_a_failed_read(env: Env) -> None:
    await env.claims(claim("a"))
    await env.pod(pod("p", ["a", "never"]))
    assert await env.units.offer(claim("a")) is True
    env.fake.inject_error(503, reason="ServiceUnavailable", method="GET", path_contains="claims/a")
    await env.pod(pod("p", ["a", "never"]), deleted=True)
    assert await env.sent() == {}
    await env.units.retry()
    assert await env.sent() == {"a": ("", [])}, "no pod uses it any more: alone, as before"
    await env.units.retry()
    await env.heard.take()
    assert len(env.events) == 1


async def test_run_retries_on_its_own(env: Env) -> None:
    units = PodUnits(env.store, env.publisher, Ownership(env.store), retry_interval=0.05)
    await units.pod_changed(WatchEvent(EventType.SYNCED, {}))
    await env.claims(claim("a"))
    env.fake.inject_error(503, reason="ServiceUnavailable", method="GET", path_contains="claims/a")
    await units.pod_changed(WatchEvent(EventType.ADDED, pod("p", ["a"])))
    assert await env.sent() == {}
    task = asyncio.create_task(units.run())
    try:
        await env.heard.take_until(lambda: len(env.events) == 1)
    finally:
        await cancel_and_wait(task)
    assert env.events[0].pod_name == "default/p"
