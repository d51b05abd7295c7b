"""The machine types of the simulated fleet, with the figures their vendors publish.

Each `MachineType` says what one node of that type carries: GPU model and memory, how its GPUs
group into NVLink domains (absent on PCIe-only nodes), whether its GPUs can be cut into MIG
partitions, and whether it is a tray of a GB200 NVL72 fabric clique. Figures follow the public
spec sheets (and gpudra_nvml's simulator profiles); nothing here claims to be real hardware.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile: `size` memory slices, placed at one of `placements`."""

    name: str
    size: int
    placements: tuple[int, ...]
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    jpeg_engines: int
    ofa_engines: int


@dataclass(frozen=True)
class MachineType:
    key: str
    description: str
    product_name: str
    architecture: str
    compute_capability: str
    driver_version: str
    cuda_driver_version: str
    memory_mib: int
    multiprocessors: int
    gpus: int
    # GPUs per NVLink domain; 0 means PCIe only (no nvlinkDomain attribute)
    nvlink_group: int
    nvlink_prefix: str = "nvswitch"
    mig_profiles: tuple[MigProfile, ...] = ()
    mig_memory_slices: int = 8
    clique_tray: bool = False


# A100-SXM4-80GB MIG profiles (NVIDIA MIG user guide); 1g.20gb and 4g.40gb are left out to keep
# the device count per GPU small; 7g.80gb is the full GPU, which the pool publishes as `gpu-N`.
A100_MIG: tuple[MigProfile, ...] = (
    MigProfile("1g.10gb", 1, (0, 1, 2, 3, 4, 5, 6), 9728, 14, 1, 0, 0, 0),
    MigProfile("2g.20gb", 2, (0, 2, 4), 19968, 28, 2, 1, 0, 0),
    MigProfile("3g.40gb", 4, (0, 4), 40192, 42, 3, 2, 0, 0),
)

DGX_H100 = MachineType(
    key="dgx-h100",
    description="NVIDIA DGX H100: 8 x H100 80GB HBM3, one NVSwitch domain",
    product_name="NVIDIA H100 80GB HBM3",
    architecture="Hopper",
    compute_capability="9.0.0",
    driver_version="550.54.15",
    cuda_driver_version="12.4.0",
    memory_mib=81559,
    multiprocessors=132,
    gpus=8,
    nvlink_group=8,
)
HGX_B200 = MachineType(
    key="hgx-b200",
    description="NVIDIA HGX B200: 8 x B200 ~180 GB HBM3e, one NVLink 5 domain",
    product_name="NVIDIA B200",
    architecture="Blackwell",
    compute_capability="10.0.0",
    driver_version="570.124.6",
    cuda_driver_version="12.8.0",
    memory_mib=183359,
    multiprocessors=148,
    gpus=8,
    nvlink_group=8,
)
A100_MIG_NODE = MachineType(
    key="a100-mig",
    description="8 x A100-SXM4-80GB on NVSwitch, dynamic MIG (partitionable devices)",
    product_name="NVIDIA A100-SXM4-80GB",
    architecture="Ampere",
    compute_capability="8.0.0",
    driver_version="535.161.8",
    cuda_driver_version="12.2.0",
    memory_mib=81920,
    multiprocessors=108,
    gpus=8,
    nvlink_group=8,
    mig_profiles=A100_MIG,
)
L4_PCIE = MachineType(
    key="l4-pcie",
    description="4 x NVIDIA L4 24GB, PCIe only (no NVLink, no MIG)",
    product_name="NVIDIA L4",
    architecture="Ada Lovelace",
    compute_capability="8.9.0",
    driver_version="550.54.15",
    cuda_driver_version="12.4.0",
    memory_mib=23034,
    multiprocessors=58,
    gpus=4,
    nvlink_group=0,
)
GB200_TRAY = MachineType(
    key="gb200-tray",
    description="GB200 NVL72 compute tray: 4 x GB200 ~186 GB in one NVLink fabric clique",
    product_name="NVIDIA GB200",
    architecture="Blackwell",
    compute_capability="10.0.0",
    driver_version="570.133.20",
    cuda_driver_version="12.8.0",
    memory_mib=189471,
    multiprocessors=152,
    gpus=4,
    nvlink_group=4,
    nvlink_prefix="nvlink",
    clique_tray=True,
)

MACHINE_TYPES: dict[str, MachineType] = {
    m.key: m for m in (DGX_H100, HGX_B200, A100_MIG_NODE, L4_PCIE, GB200_TRAY)
}
