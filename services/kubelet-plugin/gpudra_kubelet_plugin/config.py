"""Opaque device configuration: parse it, reject what is unknown, turn it into container edits.

The accepted shapes are NVIDIA's DRA driver's (`apiVersion: resource.nvidia.com/v1beta1`, kinds
`GpuConfig` for full GPUs and `MigDeviceConfig` for MIG devices), so manifests written for that
driver work unchanged:

    sharing:
      strategy: TimeSlicing | MPS
      timeSlicingConfig: {interval: Default | Short | Medium | Long}      # GpuConfig only
      mpsConfig: {defaultActiveThreadPercentage: 1-100,
                  defaultPinnedDeviceMemoryLimit: <quantity>}

Anything else (another apiVersion or kind, an unknown field, a kind that does not fit the device
type) is a `ConfigError` that says what was expected. Sharing is applied as environment for the
container: time-slice interval as `GPUDRA_TIME_SLICE_INTERVAL`, MPS as CUDA's
`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` / `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpudra_kubelet_plugin.devices import DeviceKind
from gpudra_kubelet_plugin.errors import ConfigError

API_VERSION = "resource.nvidia.com/v1beta1"
KIND_FOR_DEVICE: dict[str, DeviceKind] = {"GpuConfig": "gpu", "MigDeviceConfig": "mig"}
INTERVALS = ("Default", "Short", "Medium", "Long")
_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_FACTORS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


@dataclasses.dataclass(frozen=True)
class Sharing:
    """How one device is shared; `strategy` is "" when the device is used exclusively."""

    strategy: str = ""
    interval: str = ""
    active_thread_percentage: int | None = None
    pinned_memory_bytes: int | None = None

    def env(self, uuids: Sequence[str]) -> list[str]:
        """Container environment (`KEY=value`) that applies this sharing to `uuids`."""
        if self.strategy == "TimeSlicing":
            return [f"GPUDRA_TIME_SLICE_INTERVAL={self.interval or 'Default'}"]
        if self.strategy != "MPS":
            return []
        env = []
        if self.active_thread_percentage is not None:
            env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={self.active_thread_percentage}")
        if self.pinned_memory_bytes is not None:
            mib = self.pinned_memory_bytes // 2**20
            limits = ",".join(f"{uuid}={mib}M" for uuid in uuids)
            env.append(f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={limits}")
        return env


def resolve_sharing(parameters: Sequence[Any], kind: DeviceKind, device: str) -> Sharing:
    """The effective sharing for one device from its configs, lowest precedence first."""
    sharing = Sharing()
    for params in parameters:
        sharing = parse_config(params, kind, device)
    return sharing


def parse_config(params: Any, kind: DeviceKind, device: str) -> Sharing:
    """One opaque `parameters` object, checked against the device type it configures."""
    where = f"opaque config for device {device}"
    if not isinstance(params, Mapping):
        raise ConfigError(f"{where}: parameters must be an object, got {type(params).__name__}")
    _only(params, {"apiVersion", "kind", "sharing"}, where)
    if params.get("apiVersion") != API_VERSION:
        raise ConfigError(
            f"{where}: unknown apiVersion {params.get('apiVersion')!r}, expected {API_VERSION!r}"
        )
    config_kind = params.get("kind")
    if config_kind not in KIND_FOR_DEVICE:
        raise ConfigError(
            f"{where}: unknown kind {config_kind!r}, expected one of {sorted(KIND_FOR_DEVICE)}"
        )
    if KIND_FOR_DEVICE[config_kind] != kind:
        raise ConfigError(f"{where}: {config_kind} cannot configure a {kind} device")
    raw = params.get("sharing")
    if raw is None:
        return Sharing()
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: sharing must be an object")
    _only(raw, {"strategy", "timeSlicingConfig", "mpsConfig"}, f"{where}: sharing")
    strategy = raw.get("strategy")
    if strategy == "TimeSlicing":
        if "mpsConfig" in raw:
            raise ConfigError(f"{where}: mpsConfig given with strategy TimeSlicing")
        return Sharing("TimeSlicing", interval=_interval(raw.get("timeSlicingConfig"), kind, where))
    if strategy == "MPS":
        if "timeSlicingConfig" in raw:
            raise ConfigError(f"{where}: timeSlicingConfig given with strategy MPS")
        return _mps(raw.get("mpsConfig"), where)
    raise ConfigError(f"{where}: sharing.strategy must be TimeSlicing or MPS, got {strategy!r}")


def parse_quantity(value: Any, where: str) -> int:
    """A Kubernetes quantity limited to integer bytes with a binary or decimal suffix."""
    match = _QUANTITY.match(str(value)) if isinstance(value, str | int) else None
    if match is None:
        raise ConfigError(f"{where}: {value!r} is not a quantity like 10Gi or 512M")
    return int(match.group(1)) * _FACTORS[match.group(2)]


def _interval(raw: Any, kind: DeviceKind, where: str) -> str:
    if raw is None:
        return "Default"
    if kind == "mig":
        raise ConfigError(f"{where}: MIG devices take no timeSlicingConfig")
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: timeSlicingConfig must be an object")
    _only(raw, {"interval"}, f"{where}: timeSlicingConfig")
    interval = raw.get("interval", "Default")
    if interval not in INTERVALS:
        raise ConfigError(f"{where}: interval must be one of {list(INTERVALS)}, got {interval!r}")
    return str(interval)


def _mps(raw: Any, where: str) -> Sharing:
    if raw is None:
        return Sharing("MPS")
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: mpsConfig must be an object")
    _only(raw, {"defaultActiveThreadPercentage", "defaultPinnedDeviceMemoryLimit"}, f"{where}: mps")
    percentage = raw.get("defaultActiveThreadPercentage")
    if percentage is not None and (
        not isinstance(percentage, int)
        or isinstance(percentage, bool)
        or not 1 <= percentage <= 100
    ):
        raise ConfigError(f"{where}: defaultActiveThreadPercentage must be 1-100")
    limit = raw.get("defaultPinnedDeviceMemoryLimit")
    return Sharing(
        "MPS",
        active_thread_percentage=percentage,
        pinned_memory_bytes=None if limit is None else parse_quantity(limit, where),
    )


def _only(obj: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(allowed)}")
