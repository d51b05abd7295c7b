"""Spans for prepare and unprepare, continuing the claim's trace where the claim carries one.

A claim's trace starts at intake; the services that handle it pass W3C trace context along on NATS.
The kubelet's call carries none, so the plugin continues the trace from the claim itself: the
annotations `gpudra.io/traceparent` (and `gpudra.io/tracestate`) hold the W3C values. Without them
(or with garbage) the span starts a new trace; tracing never fails a prepare.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Tracer

# Written by the claim-writer with the allocation; the names live once in gpudra_api.
from gpudra_api import TRACEPARENT_ANNOTATION as TRACEPARENT_ANNOTATION
from gpudra_api import TRACESTATE_ANNOTATION as TRACESTATE_ANNOTATION
from gpudra_bus import tracing

TRACER_NAME = "gpudra_kubelet_plugin"


def claim_carrier(claim: Mapping[str, Any] | None) -> dict[str, str]:
    """The W3C headers a claim's annotations carry (empty when none)."""
    metadata = (claim or {}).get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping):
        return {}
    carrier = {}
    for header, key in (
        ("traceparent", TRACEPARENT_ANNOTATION),
        ("tracestate", TRACESTATE_ANNOTATION),
    ):
        value = annotations.get(key)
        if isinstance(value, str) and value:
            carrier[header] = value
    return carrier


@contextmanager
def claim_span(
    operation: str,
    *,
    uid: str,
    namespace: str,
    name: str,
    node: str,
    claim: Mapping[str, Any] | None = None,
    tracer: Tracer | None = None,
) -> Iterator[Span]:
    """A SERVER span `<operation> claim`, child of the claim's trace context when it has one."""
    tracer = tracer or trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"{operation} claim",
        context=tracing.extract(claim_carrier(claim)),
        kind=SpanKind.SERVER,
        attributes={
            "gpudra.claim.uid": uid,
            "gpudra.claim.namespace": namespace,
            "gpudra.claim.name": name,
            "gpudra.node": node,
        },
    ) as span:
        yield span
