"""The annotations gpudra itself puts on ResourceClaims, named once for every service and the CLI.

- `gpudra.io/unschedulable`: the allocator's reason a claim cannot be placed (resource.k8s.io/v1
  has no claim conditions), written by the claim-writer, shown by `kubectl describe` and
  `gpudra get`.
- `gpudra.io/traceparent` / `gpudra.io/tracestate`: the W3C trace context of the allocation's
  write, written with `status.allocation` by the claim-writer and read by the kubelet plugin's
  prepare, so the claim's trace continues on the node. `TRACE_ANNOTATIONS` maps each W3C header
  name to its annotation.
"""

from __future__ import annotations

from types import MappingProxyType

UNSCHEDULABLE_ANNOTATION = "gpudra.io/unschedulable"
TRACEPARENT_ANNOTATION = "gpudra.io/traceparent"
TRACESTATE_ANNOTATION = "gpudra.io/tracestate"
TRACE_ANNOTATIONS = MappingProxyType(
    {"traceparent": TRACEPARENT_ANNOTATION, "tracestate": TRACESTATE_ANNOTATION}
)
