"""gpudra_api: the resource.k8s.io/v1 object model (layer 1).

Parses and validates DeviceClass, ResourceSlice, ResourceClaim and ResourceClaimTemplate JSON
into frozen dataclasses, with errors naming the object and field (`ValidationError`), and
serialises allocation results back to v1 JSON. Quantities, semantic versions and qualified names
follow Kubernetes' rules. Imports no other gpudra library.
"""

from __future__ import annotations

from gpudra_api.allocation import (
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceRequestAllocationResult,
)
from gpudra_api.annotations import (
    ALLOCATION_ID_ANNOTATION,
    TRACE_ANNOTATIONS,
    TRACEPARENT_ANNOTATION,
    TRACESTATE_ANNOTATION,
    UNSCHEDULABLE_ANNOTATION,
)
from gpudra_api.device import (
    CapacityRequestPolicy,
    CapacityRequestPolicyRange,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceCounterConsumption,
    DeviceTaint,
)
from gpudra_api.deviceclass import (
    DeviceClass,
    DeviceConfiguration,
    DeviceSelector,
    parse_device_class,
)
from gpudra_api.errors import ApiError, ValidationError
from gpudra_api.nodeselector import (
    Node,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
)
from gpudra_api.quantity import Quantity, QuantityParseError
from gpudra_api.resourceclaim import (
    DeviceClaimConfiguration,
    DeviceConstraint,
    DeviceRequest,
    DeviceToleration,
    ExactDeviceRequest,
    ResourceClaim,
    ResourceClaimTemplate,
    parse_resource_claim,
    parse_resource_claim_template,
)
from gpudra_api.resourceslice import ResourcePool, ResourceSlice, parse_resource_slice
from gpudra_api.semver import Semver, SemverParseError

__all__ = [
    "AllocationResult",
    "ApiError",
    "CapacityRequestPolicy",
    "CapacityRequestPolicyRange",
    "CounterSet",
    "Device",
    "DeviceAllocationConfiguration",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceClaimConfiguration",
    "DeviceClass",
    "DeviceConfiguration",
    "DeviceConstraint",
    "DeviceCounterConsumption",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSelector",
    "DeviceTaint",
    "DeviceToleration",
    "ExactDeviceRequest",
    "Node",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Quantity",
    "QuantityParseError",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourcePool",
    "ResourceSlice",
    "Semver",
    "SemverParseError",
    "TRACEPARENT_ANNOTATION",
    "TRACESTATE_ANNOTATION",
    "ALLOCATION_ID_ANNOTATION",
    "TRACE_ANNOTATIONS",
    "UNSCHEDULABLE_ANNOTATION",
    "ValidationError",
    "parse_device_class",
    "parse_resource_claim",
    "parse_resource_claim_template",
    "parse_resource_slice",
]
