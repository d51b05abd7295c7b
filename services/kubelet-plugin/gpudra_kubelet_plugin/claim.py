"""What preparation needs from a ResourceClaim (resource.k8s.io/v1 JSON): identity, this node's
results for this driver, and the opaque configs that apply to each result.

Only the fields preparation reads are checked; anything malformed among them is an
`InvalidClaimError` naming the field. Results are this driver's and this node's pool's (gpudra
publishes one pool per node, named after the node). Configs are ordered as Kubernetes defines
precedence: class configs before claim configs, list order within each; later entries win.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpudra_kubelet_plugin.errors import InvalidClaimError


@dataclasses.dataclass(frozen=True)
class Result:
    """One allocated device (`status.allocation.devices.results[]`)."""

    request: str
    pool: str
    device: str
    share_id: str | None = None
    admin_access: bool = False


@dataclasses.dataclass(frozen=True)
class OpaqueConfig:
    """One opaque config for this driver (`status.allocation.devices.config[]`)."""

    source: str
    requests: tuple[str, ...]
    parameters: Any

    def applies_to(self, request: str) -> bool:
        # A result of a prioritized-list request is named "<request>/<subrequest>"; a config may
        # name either the parent request or the subrequest.
        if not self.requests:
            return True
        return request in self.requests or request.split("/", 1)[0] in self.requests


@dataclasses.dataclass(frozen=True)
class Allocation:
    """The part of one claim this plugin prepares on this node."""

    uid: str
    namespace: str
    name: str
    results: tuple[Result, ...]
    configs: tuple[OpaqueConfig, ...]

    def configs_for(self, result: Result) -> list[OpaqueConfig]:
        """Configs that apply to `result`, lowest precedence first."""
        return [c for c in self.configs if c.applies_to(result.request)]


def claim_uid(claim: Mapping[str, Any]) -> str:
    """`metadata.uid` of a claim; `InvalidClaimError` when missing."""
    metadata = claim.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
    if not isinstance(uid, str) or not uid:
        raise InvalidClaimError("claim has no metadata.uid")
    return uid


def parse_allocation(claim: Mapping[str, Any], driver: str, pool: str) -> Allocation:
    """This driver's and pool's share of an allocated claim."""
    uid = claim_uid(claim)
    metadata = claim["metadata"]
    where = f"claim {metadata.get('namespace', '')}/{metadata.get('name', '')}"
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    if not isinstance(allocation, Mapping):
        raise InvalidClaimError(f"{where} is not allocated (no status.allocation)")
    devices = _mapping(allocation, "devices", where)
    results = []
    for index, raw in enumerate(_list(devices, "results", where)):
        field = f"{where}: status.allocation.devices.results[{index}]"
        if not isinstance(raw, Mapping):
            raise InvalidClaimError(f"{field} is not an object")
        if raw.get("driver") != driver or raw.get("pool") != pool:
            continue
        share_id = raw.get("shareID")
        results.append(
            Result(
                request=_string(raw, "request", field),
                pool=pool,
                device=_string(raw, "device", field),
                share_id=share_id if isinstance(share_id, str) and share_id else None,
                admin_access=raw.get("adminAccess") is True,
            )
        )
    configs = []
    for index, raw in enumerate(_list(devices, "config", where)):
        field = f"{where}: status.allocation.devices.config[{index}]"
        if not isinstance(raw, Mapping):
            raise InvalidClaimError(f"{field} is not an object")
        opaque = raw.get("opaque")
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver:
            continue
        source = raw.get("source")
        if source not in ("FromClass", "FromClaim"):
            raise InvalidClaimError(f"{field}.source must be FromClass or FromClaim")
        requests = raw.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise InvalidClaimError(f"{field}.requests must be a list of strings")
        configs.append(OpaqueConfig(source, tuple(requests), opaque.get("parameters")))
    configs.sort(key=lambda c: c.source != "FromClass")  # stable: list order kept per source
    return Allocation(
        uid=uid,
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        results=tuple(results),
        configs=tuple(configs),
    )


def _mapping(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if not isinstance(value, Mapping):
        raise InvalidClaimError(f"{where}: {key} must be an object")
    return value


def _list(obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key) or []
    if not isinstance(value, list):
        raise InvalidClaimError(f"{where}: {key} must be a list")
    return value


def _string(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidClaimError(f"{where}.{key} must be a non-empty string")
    return value
