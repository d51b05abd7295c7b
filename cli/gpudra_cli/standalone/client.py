"""The CLI's connection to a running standalone system: claims and slices through the standalone
`KvStore` (the same objects the services read and write), with errors translated into one-line
`CliError`s.

Promises: `Client.open` fails with `NotRunningError` when NATS cannot be reached within the
deadline; reads never modify anything; `annotate` is a compare-and-set loop that retries on
conflicts, so it never overwrites what a service wrote in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as Nats

from gpudra_api import TRACEPARENT_ANNOTATION, UNSCHEDULABLE_ANNOTATION
from gpudra_bus import BusError, connect
from gpudra_cli.errors import CliError
from gpudra_cli.standalone.errors import NotRunningError
from gpudra_kube.errors import AlreadyExistsError, ConflictError, KubeError, NotFoundError
from gpudra_kube.kv_backend import KvStore
from gpudra_kube.resources import PODS, RESOURCE_CLAIMS, RESOURCE_SLICES

UNSCHEDULABLE = UNSCHEDULABLE_ANNOTATION
TRACEPARENT = TRACEPARENT_ANNOTATION


@dataclass
class Client:
    nc: Nats
    store: KvStore

    @classmethod
    async def open(cls, url: str, name: str = "gpudra-cli", deadline: float = 5.0) -> Client:
        try:
            nc = await connect(url, name=name, deadline=deadline)
        except BusError as exc:
            raise NotRunningError(
                f"cannot reach gpudra's NATS at {url} ({exc}); is `gpudra up` running?"
            ) from exc
        return cls(nc, KvStore(nc))

    async def close(self) -> None:
        await self.nc.drain()

    async def claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        try:
            listed = await self.store.list(RESOURCE_CLAIMS, namespace)
        except KubeError as exc:
            raise CliError(f"cannot list claims: {exc}") from exc
        return sorted(
            listed.items, key=lambda c: (c["metadata"]["namespace"], c["metadata"]["name"])
        )

    async def claim(self, name: str, namespace: str) -> dict[str, Any]:
        try:
            return await self.store.get(RESOURCE_CLAIMS, name, namespace)
        except NotFoundError as exc:
            raise CliError(f"claim {namespace}/{name} not found") from exc
        except KubeError as exc:
            raise CliError(f"cannot read claim {namespace}/{name}: {exc}") from exc

    async def slices(self) -> list[dict[str, Any]]:
        try:
            listed = await self.store.list(RESOURCE_SLICES)
        except KubeError as exc:
            raise CliError(f"cannot list ResourceSlices: {exc}") from exc
        return sorted(listed.items, key=lambda s: s["metadata"]["name"])

    async def create_claim(self, claim: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """(the stored claim, created?): an existing claim is left as it is (claim specs are
        immutable in Kubernetes too)."""
        meta = claim["metadata"]
        try:
            return await self.store.create(RESOURCE_CLAIMS, claim), True
        except AlreadyExistsError:
            return await self.claim(meta["name"], meta["namespace"]), False
        except KubeError as exc:
            where = f"{meta['namespace']}/{meta['name']}"
            raise CliError(f"cannot create claim {where}: {exc}") from exc

    async def create_pod(self, pod: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """(the stored pod, created?): an existing pod is left as it is. Pods are records here
        (which claims belong together), nothing runs them; the status is written separately."""
        meta = pod["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        try:
            return await self.store.create(PODS, pod), True
        except AlreadyExistsError:
            try:
                return await self.store.get(PODS, meta["name"], meta["namespace"]), False
            except KubeError as exc:
                raise CliError(f"cannot read pod {where}: {exc}") from exc
        except KubeError as exc:
            raise CliError(f"cannot create pod {where}: {exc}") from exc

    async def set_pod_status(self, name: str, namespace: str, status: dict[str, Any]) -> None:
        """Merge `status` into the pod's status (compare-and-set, retried on conflicts)."""
        for _ in range(10):
            try:
                pod = await self.store.get(PODS, name, namespace)
                wanted = {**(pod.get("status") or {}), **status}
                if pod.get("status") == wanted:
                    return
                pod["status"] = wanted
                await self.store.replace_status(PODS, pod)
                return
            except ConflictError:
                continue
            except KubeError as exc:
                raise CliError(f"cannot write the status of pod {namespace}/{name}: {exc}") from exc
        raise CliError(f"pod {namespace}/{name} kept changing; status not written")

    async def delete_claim(self, name: str, namespace: str) -> None:
        try:
            await self.store.delete(RESOURCE_CLAIMS, name, namespace)
        except NotFoundError as exc:
            raise CliError(f"claim {namespace}/{name} not found") from exc
        except KubeError as exc:
            raise CliError(f"cannot delete claim {namespace}/{name}: {exc}") from exc

    async def annotate(self, name: str, namespace: str, key: str, value: str) -> dict[str, Any]:
        for _ in range(10):
            claim = await self.claim(name, namespace)
            annotations = claim["metadata"].setdefault("annotations", {})
            if annotations.get(key) == value:
                return claim
            annotations[key] = value
            try:
                return await self.store.replace(RESOURCE_CLAIMS, claim)
            except ConflictError:
                continue
            except KubeError as exc:
                raise CliError(f"cannot annotate claim {namespace}/{name}: {exc}") from exc
        raise CliError(f"claim {namespace}/{name} kept changing; annotation not written")
