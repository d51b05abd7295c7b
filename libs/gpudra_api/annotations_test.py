from __future__ import annotations

import pytest
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gpudra_api.annotations import (
    TRACE_ANNOTATIONS,
    TRACEPARENT_ANNOTATION,
    TRACESTATE_ANNOTATION,
    UNSCHEDULABLE_ANNOTATION,
)
from gpudra_api.names import qualified_name_errors


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(UNSCHEDULABLE_ANNOTATION, id="unschedulable"),
        pytest.param(TRACEPARENT_ANNOTATION, id="traceparent"),
        pytest.param(TRACESTATE_ANNOTATION, id="tracestate"),
    ],
)
def test_annotation_keys_are_valid_qualified_names(key: str) -> None:
    assert qualified_name_errors(key) == []
    assert key.startswith("gpudra.io/")


def test_trace_annotations_cover_the_w3c_propagator_headers() -> None:
    """What the claim-writer injects (W3C trace context) is exactly what the names cover."""
    assert set(TRACE_ANNOTATIONS) == TraceContextTextMapPropagator().fields
    assert TRACE_ANNOTATIONS["traceparent"] == TRACEPARENT_ANNOTATION
    assert TRACE_ANNOTATIONS["tracestate"] == TRACESTATE_ANNOTATION
