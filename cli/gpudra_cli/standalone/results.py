"""What happened to each claim, as plain data: the rows of the demo's table, `gpudra get claims`
and `describe`, built from the stored claims and the ResourceSlices the inventory published.

Promises: pure functions of their inputs (no I/O); a device missing from the slices (its node went
away) still shows with its pool and name, only without attributes; a claim is `allocated`,
`unschedulable` (with the allocator's sentence from the `gpudra.io/unschedulable` annotation) or
`pending`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

# Not from the client module: that one imports the Kubernetes adapter, which commands reading
# only files (`gpudra drift`) should not pay for at start-up.
from gpudra_api import UNSCHEDULABLE_ANNOTATION as UNSCHEDULABLE

DeviceKey = tuple[str, str, str]  # driver, pool, device


def attribute(device: Mapping[str, Any], name: str) -> Any:
    """The plain value of a slice device's attribute (`{"string": "x"}` -> "x"), or None."""
    value = (device.get("attributes") or {}).get(name)
    if not isinstance(value, Mapping):
        return None
    return next(iter(value.values()), None)


def device_index(slices: Iterable[Mapping[str, Any]]) -> dict[DeviceKey, dict[str, Any]]:
    index: dict[DeviceKey, dict[str, Any]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name", "")
        for device in spec.get("devices") or []:
            entry = dict(device)
            entry["nodeName"] = spec.get("nodeName", "")
            index[(spec.get("driver", ""), pool, device.get("name", ""))] = entry
    return index


@dataclass
class Row:
    namespace: str
    name: str
    uid: str
    asks: str
    state: str  # allocated | unschedulable | pending
    node: str = ""
    devices: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    nvlink_domains: list[str] = field(default_factory=list)
    mig_profiles: list[str] = field(default_factory=list)
    products: list[str] = field(default_factory=list)
    reason: str = ""
    source: str = ""
    allocate_ms: float | None = None
    cdi_ids: list[str] = field(default_factory=list)
    prepare_error: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _one_request(req: Mapping[str, Any]) -> str:
    if "firstAvailable" in req:
        subs = [f"{s.get('name')}:{_exact(s)}" for s in req.get("firstAvailable") or []]
        return f"{req.get('name')}: first of " + " | ".join(subs)
    return f"{req.get('name')}: {_exact(req.get('exactly') or {})}"


def _exact(exact: Mapping[str, Any]) -> str:
    mode = exact.get("allocationMode", "ExactCount")
    count = "all" if mode == "All" else str(exact.get("count", 1))
    text = f"{count} x {exact.get('deviceClassName', '?')}"
    if exact.get("selectors"):
        text += " + CEL"
    return text


def asks(claim: Mapping[str, Any]) -> str:
    """What the claim asks for, in one short line."""
    devices = (claim.get("spec") or {}).get("devices") or {}
    parts = [_one_request(r) for r in devices.get("requests") or []]
    for c in devices.get("constraints") or []:
        if c.get("matchAttribute"):
            parts.append(f"same {str(c['matchAttribute']).split('/')[-1]}")
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    if "gpudra.io/gang" in annotations:
        parts.append(
            f"gang {annotations['gpudra.io/gang']}/{annotations.get('gpudra.io/gang-size')}"
        )
    return "; ".join(parts)


def allocation_results(claim: Mapping[str, Any]) -> list[dict[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def row_of(claim: Mapping[str, Any], index: Mapping[DeviceKey, Mapping[str, Any]]) -> Row:
    meta = claim.get("metadata") or {}
    results = allocation_results(claim)
    reason = str((meta.get("annotations") or {}).get(UNSCHEDULABLE, ""))
    state = "allocated" if results else ("unschedulable" if reason else "pending")
    row = Row(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        asks=asks(claim),
        state=state,
        reason=reason if not results else "",
    )
    nodes: list[str] = []
    for r in results:
        key = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        device = index.get(key, {})
        row.devices.append(f"{key[1]}/{key[2]}")
        row.requests.append(str(r.get("request", "")))
        node = str(device.get("nodeName") or key[1])
        if node not in nodes:
            nodes.append(node)
        for target, attr in (
            (row.nvlink_domains, "nvlinkDomain"),
            (row.mig_profiles, "profile"),
            (row.products, "productName"),
        ):
            value = attribute(device, attr)
            if value is not None and str(value) not in target:
                target.append(str(value))
    row.node = ",".join(nodes)
    return row


def rows(claims: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]]) -> list[Row]:
    index = device_index(slices)
    return [row_of(c, index) for c in claims]
