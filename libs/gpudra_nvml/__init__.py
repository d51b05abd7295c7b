"""gpudra_nvml: GPU discovery through NVML, and a simulator with the same function surface.

One adapter (`NvmlAdapter`) turns a `pynvml`-shaped library into gpudra's inventory devices; on a
GPU node that library is `pynvml`, elsewhere it is `FakeNvml` serving a profile from the package's
data files. Nothing the simulator returns is real hardware: the inventory source says which it is.
"""

from __future__ import annotations

from gpudra_nvml.adapter import Discovery, NvmlAdapter, sysfs_numa_node, sysfs_pcie_root
from gpudra_nvml.errors import (
    DeviceLostError,
    NvmlCallError,
    NvmlError,
    NvmlPermanentError,
    NvmlRetryableError,
    NvmlUnavailableError,
    ProfileError,
)
from gpudra_nvml.fake import FakeNvml
from gpudra_nvml.faults import FaultSpec, load_faults, parse_faults
from gpudra_nvml.health import APPLICATION_XIDS, HealthMonitor, Transition
from gpudra_nvml.inventory import SCHEMA_VERSION, snapshot
from gpudra_nvml.loader import Opened, open_adapter, open_simulator
from gpudra_nvml.profiles import Profile, load_profile, profile_names

__all__ = [
    "APPLICATION_XIDS",
    "DeviceLostError",
    "Discovery",
    "FakeNvml",
    "FaultSpec",
    "HealthMonitor",
    "NvmlAdapter",
    "NvmlCallError",
    "NvmlError",
    "NvmlPermanentError",
    "NvmlRetryableError",
    "NvmlUnavailableError",
    "Opened",
    "Profile",
    "ProfileError",
    "SCHEMA_VERSION",
    "Transition",
    "load_faults",
    "load_profile",
    "open_adapter",
    "open_simulator",
    "parse_faults",
    "profile_names",
    "snapshot",
    "sysfs_numa_node",
    "sysfs_pcie_root",
]
