"""The two reports the seeds care about more than any scheduler feature.

Utilisation: allocated versus actually computing. `Samples` keeps the node-agents'
`gpudra.utilization.<node>` samples (per node and GPU: the mean over the samples seen); a claim's
device is *computing* when its GPU's mean utilisation is at least `BUSY_PERCENT`. MIG devices are
judged by their GPU (NVML does not sample MIG devices separately). Claims and namespaces are
summed; a claim whose GPUs have no sample yet is shown as unknown, never as idle.

Drift: the inventory's `gpudra.drift` summary (driver and CUDA driver versions per node, majority
and outliers), with the CEL selector a claim (or DeviceClass) adds to exclude the outliers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from gpudra_bus import Codec, CodecError, subjects
from gpudra_bus.subjects import Kind
from gpudra_cli.standalone.results import DeviceKey, attribute
from gpudrapb.v1 import inventory_pb2 as pb

log = logging.getLogger(__name__)
BUSY_PERCENT = 5
UTILIZATION: Codec[pb.UtilizationSample] = Codec(pb.UtilizationSample)
DRIFT: Codec[Struct] = Codec(Struct)


@dataclass
class Samples:
    """Utilisation samples and the last drift summary, as they arrive on NATS."""

    sums: dict[tuple[str, str], list[float]] = field(
        default_factory=dict
    )  # (node, gpu) -> [sum, n]
    drift: dict[str, Any] | None = None
    malformed: int = 0
    _subs: list[Subscription] = field(default_factory=list)

    async def subscribe(self, nc: Nats) -> None:
        self._subs.append(await nc.subscribe(subjects.all_of(Kind.UTILIZATION), cb=self._on_util))
        self._subs.append(await nc.subscribe(subjects.DRIFT, cb=self._on_drift))

    async def unsubscribe(self) -> None:
        for sub in self._subs:
            await sub.unsubscribe()
        self._subs.clear()

    async def _on_util(self, msg: Msg) -> None:
        try:
            sample = UTILIZATION.decode(msg.data, msg.headers)
        except CodecError:
            self.malformed += 1
            return
        self.add(sample)

    async def _on_drift(self, msg: Msg) -> None:
        try:
            self.drift = json_format.MessageToDict(DRIFT.decode(msg.data, msg.headers))
        except CodecError:
            self.malformed += 1

    def add(self, sample: pb.UtilizationSample) -> None:
        for d in sample.devices:
            acc = self.sums.setdefault((sample.node, d.device_name), [0.0, 0.0])
            acc[0] += d.gpu_percent
            acc[1] += 1

    def mean(self, node: str, gpu: str) -> float | None:
        acc = self.sums.get((node, gpu))
        return acc[0] / acc[1] if acc and acc[1] else None


@dataclass
class ClaimUse:
    namespace: str
    name: str
    node: str
    allocated: int
    computing: int
    unknown: int
    mean_percent: float | None
    idle_devices: list[str]


@dataclass
class NamespaceUse:
    namespace: str
    claims: int
    allocated: int
    computing: int
    idle_claims: list[str]


@dataclass
class Utilisation:
    claims: list[ClaimUse]
    namespaces: list[NamespaceUse]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _gpu_of(key: DeviceKey, index: Mapping[DeviceKey, Mapping[str, Any]]) -> tuple[str, str]:
    """(node, GPU name) whose utilisation a device shows: itself, or a MIG device's parent."""
    device = index.get(key, {})
    node = str(device.get("nodeName") or key[1])
    if attribute(device, "type") == "mig" and attribute(device, "index") is not None:
        return node, f"gpu-{attribute(device, 'index')}"
    return node, key[2]


def utilisation(
    claims: Iterable[Mapping[str, Any]],
    index: Mapping[DeviceKey, Mapping[str, Any]],
    samples: Samples,
) -> Utilisation:
    uses: list[ClaimUse] = []
    for claim in claims:
        meta = claim.get("metadata") or {}
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        if not results:
            continue
        levels: list[float] = []
        idle: list[str] = []
        unknown = 0
        nodes: list[str] = []
        for r in results:
            key = (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            node, gpu = _gpu_of(key, index)
            if node not in nodes:
                nodes.append(node)
            level = samples.mean(node, gpu)
            if level is None:
                unknown += 1
                continue
            levels.append(level)
            if level < BUSY_PERCENT:
                idle.append(f"{key[1]}/{key[2]}")
        uses.append(
            ClaimUse(
                namespace=str(meta.get("namespace", "")),
                name=str(meta.get("name", "")),
                node=",".join(nodes),
                allocated=len(results),
                computing=len(levels) - len(idle),
                unknown=unknown,
                mean_percent=round(sum(levels) / len(levels), 1) if levels else None,
                idle_devices=idle,
            )
        )
    by_ns: dict[str, NamespaceUse] = {}
    for use in uses:
        ns = by_ns.setdefault(use.namespace, NamespaceUse(use.namespace, 0, 0, 0, []))
        ns.claims += 1
        ns.allocated += use.allocated
        ns.computing += use.computing
        if use.idle_devices and use.computing == 0:
            ns.idle_claims.append(use.name)
    return Utilisation(uses, sorted(by_ns.values(), key=lambda n: n.namespace))


@dataclass
class Drift:
    nodes: int
    driver_majority: str
    cuda_majority: str
    outliers: dict[str, dict[str, str]]  # node -> {"driver": v, "cudaDriver": v}
    versions: dict[str, dict[str, int]]
    exclude_selector: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def semver_of(version: str) -> str:
    """NVIDIA's `570.124.06` as gpudra publishes it (`570.124.6`): leading zeros dropped."""
    parts = [p.lstrip("0") or "0" for p in version.split(".")]
    return ".".join(parts)


def drift(summary: Mapping[str, Any] | None) -> Drift | None:
    if not summary:
        return None
    driver = summary.get("driver") or {}
    cuda = summary.get("cudaDriver") or {}
    outliers: dict[str, dict[str, str]] = {}
    for label, part in (("driver", driver), ("cudaDriver", cuda)):
        for node, version in (part.get("outliers") or {}).items():
            outliers.setdefault(node, {})[label] = str(version)
    majority = str(driver.get("majority", ""))
    selector = (
        f'device.attributes["gpu.nvidia.com"].driverVersion == semver("{semver_of(majority)}")'
        if majority and outliers
        else ""
    )
    return Drift(
        nodes=int(summary.get("nodes", 0)),
        driver_majority=majority,
        cuda_majority=str(cuda.get("majority", "")),
        outliers=dict(sorted(outliers.items())),
        versions={
            "driver": {k: int(v) for k, v in (driver.get("versions") or {}).items()},
            "cudaDriver": {k: int(v) for k, v in (cuda.get("versions") or {}).items()},
        },
        exclude_selector=selector,
    )
