"""The annotations gpudra itself puts on ResourceClaims, named once for every service and the CLI.

- `gpudra.io/unschedulable`: the allocator's reason a claim cannot be placed (resource.k8s.io/v1
  has no claim conditions), written by the claim-writer, shown by `kubectl describe` and
  `gpudra get`.
- `gpudra.io/traceparent` / `gpudra.io/tracestate`: the W3C trace context of the allocation's
  write, written with `status.allocation` by the claim-writer and read by the kubelet plugin's
  prepare, so the claim's trace continues on the node. `TRACE_ANNOTATIONS` maps each W3C header
  name to its annotation.
- `gpudra.io/allocation-id`: which allocation the claim carries, written by the claim-writer with
  it (gpudra's decision: the allocator's id of the decision; an adopted allocation: the id the
  claim-writer gave it). The claim-writer reads it to see releases nobody watched; the allocator
  matches it against its records to see an allocation made in the place of another.
"""

from __future__ import annotations

from types import MappingProxyType

UNSCHEDULABLE_ANNOTATION = "gpudra.io/unschedulable"
TRACEPARENT_ANNOTATION = "gpudra.io/traceparent"
TRACESTATE_ANNOTATION = "gpudra.io/tracestate"
ALLOCATION_ID_ANNOTATION = "gpudra.io/allocation-id"
TRACE_ANNOTATIONS = MappingProxyType(
    {"traceparent": TRACEPARENT_ANNOTATION, "tracestate": TRACESTATE_ANNOTATION}
)
