"""Per-request facts a search needs, checked before the search starts.

One `RequestData` per plain request and one per subrequest of a `firstAvailable` request. The
checks here are the ones Kubernetes makes before allocating (unknown class, disabled features in
use, "All" over an incomplete or invalid pool, too many devices per claim); they raise
`AllocationInputError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudra_alloc.errors import AllocationInputError
from gpudra_alloc.features import Features
from gpudra_alloc.pools import DeviceEntry
from gpudra_api import DeviceClass, DeviceRequest, ExactDeviceRequest, ResourceClaim
from gpudra_api.limits import ALLOCATION_RESULTS_MAX_SIZE


@dataclass
class RequestData:
    request: ExactDeviceRequest
    parent: DeviceRequest | None
    device_class: DeviceClass
    num_devices: int
    all_devices: list[tuple[DeviceEntry, int]] = field(default_factory=list)  # (entry, pool index)
    selected_subrequest: int = 0

    @property
    def name(self) -> str:
        if self.parent is not None:
            return f"{self.parent.name}/{self.request.name}"
        return self.request.name

    @property
    def base_name(self) -> str:
        return self.parent.name if self.parent is not None else self.request.name

    @property
    def sub_name(self) -> str:
        return self.request.name if self.parent is not None else ""

    @property
    def admin(self) -> bool:
        return bool(self.request.admin_access)


def claim_ref(claim: ResourceClaim) -> str:
    """How Kubernetes' messages name a claim (klog.KObj: `namespace/name`)."""
    return f"{claim.namespace}/{claim.name}" if claim.namespace else claim.name


def check_request_features(
    claim: ResourceClaim, request: DeviceRequest, features: Features
) -> None:
    if request.first_available and not features.prioritized_list:
        raise AllocationInputError(
            f"claim {claim_ref(claim)}, request {request.name}: has subrequests, "
            "but the DRAPrioritizedList feature is disabled"
        )
    if features.consumable_capacity:
        return
    if request.exactly is not None and request.exactly.capacity is not None:
        raise AllocationInputError(
            f"claim {claim_ref(claim)}, request {request.name}: has capacity requests, "
            "but the DRAConsumableCapacity feature is disabled"
        )
    for sub in request.first_available:
        if sub.capacity is not None:
            raise AllocationInputError(
                f"claim {claim_ref(claim)}, subrequest {sub.name}: has capacity requests, "
                "but the DRAConsumableCapacity feature is disabled"
            )


def check_claim_size(claim: ResourceClaim, min_devices: int) -> None:
    if min_devices > ALLOCATION_RESULTS_MAX_SIZE:
        raise AllocationInputError(
            f"claim {claim_ref(claim)}: number of requested devices {min_devices} exceeds the "
            f"claim limit of {ALLOCATION_RESULTS_MAX_SIZE}"
        )


def lookup_class(
    claim: ResourceClaim,
    request: ExactDeviceRequest,
    classes: dict[str, DeviceClass],
    features: Features,
) -> DeviceClass:
    if request.admin_access is not None and not features.admin_access:
        raise AllocationInputError(
            f"claim {claim_ref(claim)}, request {request.name}: admin access is requested, "
            "but the feature is disabled"
        )
    if not request.device_class_name:
        raise AllocationInputError(
            f"claim {claim_ref(claim)}, request {request.name}: missing device class name "
            "(unsupported request type?)"
        )
    device_class = classes.get(request.device_class_name)
    if device_class is None:
        raise AllocationInputError(
            f"claim {claim_ref(claim)}, request {request.name}: could not retrieve device class "
            f"{request.device_class_name}: not found"
        )
    return device_class
