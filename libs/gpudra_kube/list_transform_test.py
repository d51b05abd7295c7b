"""A (re)list with a `transform` holds one page of whole objects at a time, on both backends.

What is alive is counted, not timed: the transform hangs a probe (weakly referenced here) on each
whole object it is handed, so a probe lives exactly as long as its whole object does.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from gpudra_kube.api_backend import ApiStore
from gpudra_kube.errors import GoneError
from gpudra_kube.informer import informer, metadata_only
from gpudra_kube.resources import RESOURCE_CLAIMS, KubeObject
from gpudra_kube.store import EventType, Store, WatchEvent
from gpudra_testing.claims import claim
from gpudra_testing.kubeapi import FakeKubeApi

PAGE = 3  # the API store's page size here
OBJECTS = 10  # four pages, the last one short


class _Probe:
    """Rides in a whole object; a plain dict cannot be referenced weakly, this can."""


class WholeObjects:
    """A `transform` (`slim`) that keeps each object's identity only and counts the whole
    objects still alive each time it is handed one (`most_alive`: the most, this one included)."""

    def __init__(self) -> None:
        self._probes: list[weakref.ref[_Probe]] = []
        self.most_alive = 0
        self.seen = 0

    def alive(self) -> int:
        return sum(ref() is not None for ref in self._probes)

    def slim(self, obj: KubeObject) -> KubeObject:
        probe = _Probe()
        obj["probe"] = probe  # a transform may change the object it is handed (client-go too)
        self._probes.append(weakref.ref(probe))
        self.seen += 1
        self.most_alive = max(self.most_alive, self.alive())
        return metadata_only(obj)


@pytest_asyncio.fixture
async def paged_api_store(kubeconfig: Path) -> AsyncIterator[ApiStore]:
    api = await ApiStore.from_kubeconfig(str(kubeconfig), page_size=PAGE)
    try:
        yield api
    finally:
        await api.close()


# What a list may hold at once: a page of the API server's; the KV store decodes one at a time.
BOUND = {"paged_api_store": PAGE, "kv_store": 1}


@pytest.fixture(params=sorted(BOUND))
def backend(request: pytest.FixtureRequest) -> tuple[Store, int]:
    store: Store = request.getfixturevalue(request.param)
    return store, BOUND[request.param]


async def _fill(store: Store, count: int = OBJECTS) -> list[str]:
    names = [f"c{i:02d}" for i in range(count)]
    for name in names:
        await store.create(RESOURCE_CLAIMS, claim(name))
    return names


async def _until_synced(events: AsyncIterator[WatchEvent]) -> list[WatchEvent]:
    seen = [await anext(events)]
    while seen[-1].type is not EventType.SYNCED:
        seen.append(await anext(events))
    return seen


async def test_a_relist_holds_one_page_of_whole_objects(backend: tuple[Store, int]) -> None:
    """client-go's reflector transforms a list page by page: the peak of a relist of N pods is
    a page of whole pods, not N (5,000 whole pods are 300 MiB)."""
    store, bound = backend
    names = await _fill(store)
    whole = WholeObjects()
    events = informer(store, RESOURCE_CLAIMS, "default", transform=whole.slim)
    try:
        seen = await _until_synced(events)
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    assert [(e.type, e.object.get("metadata", {}).get("name")) for e in seen] == [
        *((EventType.ADDED, name) for name in names),
        (EventType.SYNCED, None),
    ]
    assert all("probe" not in e.object and "spec" not in e.object for e in seen)
    assert whole.seen == OBJECTS
    assert whole.most_alive <= bound


async def test_list_with_a_transform_returns_the_transformed_objects(store: Store) -> None:
    """Both backends (conftest's `store`): the same objects, transformed, at the same version."""
    await _fill(store, 4)
    await store.create(RESOURCE_CLAIMS, claim("elsewhere", "other"))
    whole = await store.list(RESOURCE_CLAIMS, "default")
    slim = await store.list(RESOURCE_CLAIMS, "default", transform=metadata_only)
    assert slim.items == [metadata_only(o) for o in whole.items]
    assert slim.resource_version == whole.resource_version
    everywhere = await store.list(RESOURCE_CLAIMS, transform=metadata_only)
    assert len(everywhere.items) == 5


async def test_an_expired_continue_token_restarts_the_transformed_relist(
    paged_api_store: ApiStore, kube_api: FakeKubeApi
) -> None:
    """A 410 between two pages ends that list (what it took so far is dropped); the informer
    lists again from the first page and reports every object once."""
    names = await _fill(paged_api_store)
    kube_api.inject_error(410, reason="Expired", path_contains="continue=")
    with pytest.raises(GoneError):
        await paged_api_store.list(RESOURCE_CLAIMS, "default", transform=metadata_only)
    kube_api.inject_error(410, reason="Expired", path_contains="continue=")
    whole = WholeObjects()
    events = informer(
        paged_api_store, RESOURCE_CLAIMS, "default", transform=whole.slim, backoff_initial=0.01
    )
    try:
        seen = await _until_synced(events)
    finally:
        with contextlib.suppress(StopAsyncIteration):
            await events.aclose()  # type: ignore[attr-defined]
    assert [e.object.get("metadata", {}).get("name") for e in seen] == [*names, None]
    assert whole.seen == OBJECTS + PAGE  # the first page twice: once before the 410
    assert whole.most_alive <= PAGE
    version = seen[-1].resource_version
    assert version == str(kube_api.resource_version)
