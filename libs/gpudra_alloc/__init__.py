"""gpudra_alloc: Kubernetes-exact DRA allocation (layer 3).

`Allocator` runs Kubernetes' structured-allocator search per node (first-fit); `solve` and
`run_lines` implement the allocation-problem contract (JSON Lines in and out, `claims` and
`steps` problems, `gang` steps) with an explanation for claims that do not fit; the `topology`
policy is answered by the placement layer (`gpudra_alloc.placement`, docs/PLACEMENT.md).
Imports `gpudra_api` and `gpudra_cel` only.
"""

from __future__ import annotations

from gpudra_alloc.allocator import Allocator, NodeOutcome
from gpudra_alloc.contract import run_lines, solve
from gpudra_alloc.errors import (
    AllocationError,
    AllocationInputError,
    CelRuntimeError,
    ProblemError,
)
from gpudra_alloc.explain import STAGES, explain
from gpudra_alloc.features import FEATURE_NAMES, Features
from gpudra_alloc.firstfit import first_fit
from gpudra_alloc.pools import Pool, gather_pools
from gpudra_alloc.selection import Selectors
from gpudra_alloc.state import AllocatedState, DeviceID
from gpudra_alloc.validate import validate_allocation

__all__ = [
    "FEATURE_NAMES",
    "STAGES",
    "AllocatedState",
    "AllocationError",
    "AllocationInputError",
    "Allocator",
    "CelRuntimeError",
    "DeviceID",
    "Features",
    "NodeOutcome",
    "Pool",
    "ProblemError",
    "Selectors",
    "explain",
    "first_fit",
    "gather_pools",
    "run_lines",
    "solve",
    "validate_allocation",
]
