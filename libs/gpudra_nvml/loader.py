"""Choose the NVML library: the real one, or a simulator profile — never silently.

`open_adapter(profile="")` starts the real `pynvml`. When its library is missing
(NVML_ERROR_LIBRARY_NOT_FOUND) or the driver is absent, it raises `NvmlUnavailableError` with a clear
message — unless `fallback_profile` names a simulator profile, in which case it starts that and says
so in the returned `source` (KIND_SIMULATOR), so nothing downstream mistakes it for hardware.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpudra_nvml.adapter import NvmlAdapter
from gpudra_nvml.errors import NvmlUnavailableError
from gpudra_nvml.fake import FakeNvml
from gpudra_nvml.faults import load_faults
from gpudra_nvml.profiles import load_profile
from gpudrapb.v1 import inventory_pb2 as pb

log = logging.getLogger(__name__)


@dataclass
class Opened:
    adapter: NvmlAdapter
    source: pb.InventorySource
    #: The simulator behind the adapter (for fault injection); None on real NVML.
    fake: FakeNvml | None = None


def open_simulator(
    profile: str, clock: Callable[[], float] = time.monotonic, faults_file: str = ""
) -> Opened:
    """A started adapter over the simulator profile `profile` (`ProfileError` if unknown), with
    the fault script in `faults_file` scheduled on top of the profile's own."""
    spec = load_profile(profile)
    roots = {g.bus_id.lower(): g.pcie_root for g in spec.gpus}
    numas = {g.bus_id.lower(): g.numa_node for g in spec.gpus}
    fake = FakeNvml(spec, clock=clock)
    if faults_file:
        fake.apply(load_faults(faults_file, len(spec.gpus)))
    adapter = NvmlAdapter(fake, pcie_root=lambda bus_id: roots.get(bus_id, ""), numa_node=numas.get)
    adapter.start()
    source = pb.InventorySource(kind=pb.InventorySource.KIND_SIMULATOR, profile=profile)
    return Opened(adapter, source, fake)


def open_adapter(
    profile: str = "",
    fallback_profile: str = "",
    clock: Callable[[], float] = time.monotonic,
    faults_file: str = "",
) -> Opened:
    """The simulator when `profile` is set; else real NVML, falling back only when told to.
    `faults_file` applies to a simulator only (a real GPU's faults are its own)."""
    if profile:
        return open_simulator(profile, clock, faults_file)
    import pynvml  # the nvidia-ml-py package; imported here so simulator-only users skip it

    adapter = NvmlAdapter(pynvml)
    try:
        adapter.start()
    except NvmlUnavailableError as exc:
        if not fallback_profile:
            raise NvmlUnavailableError(
                f"{exc}. To run without a GPU, use a simulator profile (listed by `gpudra profiles`)"
            ) from exc
        log.warning(
            "%s; running simulator profile %r instead: this node's inventory is SIMULATED",
            exc,
            fallback_profile,
        )
        return open_simulator(fallback_profile, clock, faults_file)
    return Opened(adapter, pb.InventorySource(kind=pb.InventorySource.KIND_NVML))
