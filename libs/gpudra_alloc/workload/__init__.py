"""gpudra_alloc.workload: a seeded churn workload over a simulated heterogeneous GPU fleet.

`build_fleet` gives nodes and resource.k8s.io/v1 ResourceSlices (DGX H100, HGX B200, A100 with
dynamic MIG, PCIe-only L4, GB200 NVL72 trays in one clique); `churn_problem` gives a day of
arrivals and departures as one allocation-problem document with `steps`. Deterministic per seed.
"""

from __future__ import annotations

from gpudra_alloc.workload.churn import DEFAULT_MIX, GANGS, ChurnConfig, GangShape, churn_problem
from gpudra_alloc.workload.claims import SHAPES, Shape, claim_spec, device_classes, resource_claim
from gpudra_alloc.workload.errors import WorkloadError
from gpudra_alloc.workload.fleet import DEFAULT_FLEET, Fleet, FleetObjects, build_fleet
from gpudra_alloc.workload.machines import MACHINE_TYPES, MachineType, MigProfile

__all__ = [
    "DEFAULT_FLEET",
    "DEFAULT_MIX",
    "GANGS",
    "MACHINE_TYPES",
    "SHAPES",
    "ChurnConfig",
    "Fleet",
    "FleetObjects",
    "GangShape",
    "MachineType",
    "MigProfile",
    "Shape",
    "WorkloadError",
    "build_fleet",
    "churn_problem",
    "claim_spec",
    "device_classes",
    "resource_claim",
]
