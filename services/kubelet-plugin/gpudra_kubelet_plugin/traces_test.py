from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gpudra_kubelet_plugin.conftest import Node, make_claim
from gpudra_kubelet_plugin.errors import DeviceError
from gpudra_kubelet_plugin.state import ClaimRef, DeviceState
from gpudra_kubelet_plugin.traces import TRACEPARENT_ANNOTATION, claim_carrier

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider
    provider.shutdown()


def traced_state(node: Node, provider: TracerProvider) -> DeviceState:
    state = node.state()
    state._tracer = provider.get_tracer("test")
    return state


@pytest.mark.parametrize(
    ("annotations", "continues"),
    [
        pytest.param(
            {TRACEPARENT_ANNOTATION: f"00-{TRACE_ID}-{PARENT_ID}-01"}, True, id="continued"
        ),
        pytest.param({}, False, id="no-annotation"),
        pytest.param({TRACEPARENT_ANNOTATION: "garbage"}, False, id="garbage"),
    ],
)
async def test_prepare_continues_the_claims_trace(
    node: Node,
    exporter: tuple[InMemorySpanExporter, TracerProvider],
    annotations: dict[str, str],
    continues: bool,
) -> None:
    spans, provider = exporter
    claim = make_claim("c", "uid-t", [("gpu", "gpu-0")])
    claim["metadata"]["annotations"] = annotations
    node.claims.put(claim)
    state = traced_state(node, provider)
    await state.start()
    await state.prepare(ClaimRef("uid-t", "default", "c"))
    await state.unprepare(ClaimRef("uid-t", "default", "c"))
    prepare, unprepare = spans.get_finished_spans()
    assert (prepare.name, prepare.kind) == ("prepare claim", SpanKind.SERVER)
    assert prepare.attributes is not None
    assert prepare.attributes["gpudra.claim.uid"] == "uid-t"
    assert prepare.attributes["gpudra.devices"] == ("gpu-0",)
    assert (format(prepare.context.trace_id, "032x") == TRACE_ID) is continues
    assert (
        prepare.parent is not None and format(prepare.parent.span_id, "016x") == PARENT_ID
    ) is continues
    assert unprepare.name == "unprepare claim"


async def test_failed_prepare_span_is_an_error(
    node: Node, exporter: tuple[InMemorySpanExporter, TracerProvider]
) -> None:
    spans, provider = exporter
    node.claims.put(make_claim("c", "uid-f", [("gpu", "gpu-9")]))
    state = traced_state(node, provider)
    await state.start()
    with pytest.raises(DeviceError):
        await state.prepare(ClaimRef("uid-f", "default", "c"))
    (span,) = spans.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR


@pytest.mark.parametrize(
    ("claim", "carrier"),
    [
        pytest.param(None, {}, id="none"),
        pytest.param({"metadata": {"annotations": "x"}}, {}, id="bad-annotations"),
        pytest.param(
            {
                "metadata": {
                    "annotations": {TRACEPARENT_ANNOTATION: "tp", "gpudra.io/tracestate": "ts"}
                }
            },
            {"traceparent": "tp", "tracestate": "ts"},
            id="both",
        ),
    ],
)
def test_claim_carrier(claim: dict[str, Any] | None, carrier: dict[str, str]) -> None:
    assert claim_carrier(claim) == carrier
