"""`pod_waiting_for` lists a namespace's pods: it must not hold them all whole at once.

Counted, not timed: a `Store` in front of the API store hangs a probe (weakly referenced here)
on each whole pod the list is handed, before the caller's transform (if any) runs; a probe lives
exactly as long as its whole pod.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gpudra_claim_writer.conftest import new_claim
from gpudra_claim_writer.consumers import pod_waiting_for
from gpudra_kube.api_backend import ApiStore
from gpudra_kube.resources import PODS, KubeObject, Resource
from gpudra_kube.store import ObjectList, Transform
from gpudra_testing.kubeapi import FakeKubeApi

PAGE = 2
PODS_LISTED = 7


class _Probe:
    """Rides in a whole pod; a plain dict cannot be referenced weakly, this can."""


class WholePods:
    """Delegates to `store`; its `list` counts the whole objects alive as each one is listed
    (`most_alive`, this one included)."""

    def __init__(self, store: ApiStore) -> None:
        self._store = store
        self._probes: list[weakref.ref[_Probe]] = []
        self.most_alive = 0
        self.listed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        transform: Transform | None = None,
    ) -> ObjectList:
        def probed(obj: KubeObject) -> KubeObject:
            probe = _Probe()
            obj["probe"] = probe
            self._probes.append(weakref.ref(probe))
            self.listed += 1
            self.most_alive = max(self.most_alive, sum(r() is not None for r in self._probes))
            return transform(obj) if transform is not None else obj

        return await self._store.list(resource, namespace, transform=probed)


@pytest_asyncio.fixture
async def paged(tmp_path: Path) -> AsyncIterator[tuple[FakeKubeApi, ApiStore]]:
    async with FakeKubeApi(validate_version="1.34", bookmark_interval=0.1) as fake:
        store = await ApiStore.from_kubeconfig(
            str(fake.write_kubeconfig(tmp_path / "kc")), page_size=PAGE
        )
        try:
            yield fake, store
        finally:
            await store.close()


def _pod(name: str, claim: str, phase: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "env": [{"name": "A", "value": "b"}]}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        },
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("last_phase", "may_run", "waiting"),
    [
        pytest.param("Pending", True, True, id="a-pod-may-run"),
        pytest.param("Succeeded", True, False, id="only-finished"),
        pytest.param("Succeeded", False, True, id="finished-counted"),
    ],
)
async def test_pod_waiting_for_holds_a_page_of_whole_pods(
    paged: tuple[FakeKubeApi, ApiStore], last_phase: str, may_run: bool, waiting: bool
) -> None:
    fake, store = paged
    # Pods of other claims first, the one naming "c" listed last (names sort): all are read.
    for i in range(PODS_LISTED - 1):
        await fake.put(PODS, _pod(f"a{i}", "other", "Running"))
    await fake.put(PODS, _pod("z", "c", last_phase))
    whole = WholePods(store)
    assert await pod_waiting_for(whole, new_claim("c"), may_run=may_run) is waiting
    assert whole.listed == PODS_LISTED
    assert whole.most_alive <= PAGE
