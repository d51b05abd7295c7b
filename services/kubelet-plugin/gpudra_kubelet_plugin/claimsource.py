"""Where the plugin reads the ResourceClaims the kubelet names.

`ClaimSource.get(namespace, name)` returns the claim's resource.k8s.io/v1 JSON as a mapping, or
raises `ClaimNotFoundError` / `ClaimSourceUnavailableError` (both retryable: the kubelet calls
again). Backends: `MemoryClaimSource` (tests, embedding), `NatsKvClaimSource` (standalone mode: KV
bucket `gpudra-claims`, key `gpudra_bus.subjects.claim_key`, `<namespace>.<name>`, value the claim JSON); the Kubernetes API backend
comes with `gpudra_kube`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from nats.errors import Error as NatsError
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue

from gpudra_bus import InvalidSubjectError, subjects
from gpudra_kube import RESOURCE_CLAIMS, KubeError, KubeRetryableError, NotFoundError, Store
from gpudra_kubelet_plugin.errors import (
    ClaimNotFoundError,
    ClaimReadError,
    ClaimSourceUnavailableError,
    InvalidClaimError,
)


class ClaimSource(Protocol):
    """Read access to ResourceClaims by namespace and name."""

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The claim's JSON object."""
        ...


class MemoryClaimSource:
    """Claims held in a dict; `put` and `delete` change what `get` returns."""

    def __init__(self, claims: Mapping[tuple[str, str], Mapping[str, Any]] | None = None) -> None:
        self._claims: dict[tuple[str, str], Mapping[str, Any]] = dict(claims or {})

    def put(self, claim: Mapping[str, Any]) -> None:
        metadata = claim["metadata"]
        self._claims[(metadata["namespace"], metadata["name"])] = claim

    def delete(self, namespace: str, name: str) -> None:
        self._claims.pop((namespace, name), None)

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        try:
            return self._claims[(namespace, name)]
        except KeyError:
            raise ClaimNotFoundError(f"claim {namespace}/{name} not found") from None


class NatsKvClaimSource:
    """Claims from the standalone mode's JetStream KV bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        try:
            key = subjects.claim_key(namespace, name)
        except InvalidSubjectError as exc:
            raise InvalidClaimError(f"claim {namespace}/{name}: {exc}") from exc
        try:
            entry = await self._kv.get(key)
        except (KeyNotFoundError, KeyDeletedError) as exc:
            raise ClaimNotFoundError(f"claim {namespace}/{name} not found (KV key {key})") from exc
        except (NatsError, TimeoutError) as exc:
            raise ClaimSourceUnavailableError(
                f"cannot read claim {namespace}/{name} from KV: {exc!r}"
            ) from exc
        try:
            claim = json.loads(entry.value or b"")
        except ValueError as exc:
            raise InvalidClaimError(f"KV key {key} does not hold JSON: {exc}") from exc
        if not isinstance(claim, dict):
            raise InvalidClaimError(f"KV key {key} does not hold a JSON object")
        return claim


class StoreClaimSource:
    """Claims through a `gpudra_kube.Store` (the API server in Kubernetes mode)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        try:
            return await self._store.get(RESOURCE_CLAIMS, name, namespace)
        except NotFoundError as exc:
            raise ClaimNotFoundError(f"claim {namespace}/{name} not found") from exc
        except KubeRetryableError as exc:
            raise ClaimSourceUnavailableError(
                f"cannot read claim {namespace}/{name}: {exc}"
            ) from exc
        except KubeError as exc:
            raise ClaimReadError(f"cannot read claim {namespace}/{name}: {exc}") from exc
