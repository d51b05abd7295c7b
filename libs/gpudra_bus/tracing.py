"""W3C trace context in NATS headers, and spans with OpenTelemetry messaging attributes.

Promises:
- `inject` writes the current (or given) span context into a header dict with the globally
  configured OpenTelemetry propagator (W3C `traceparent`/`tracestate` and baggage by default);
  `extract` reads it back into a `Context`. Headers without (or with garbage) trace context give an
  empty context, never an error, so an untraced producer cannot break a consumer.
- `publish_span` / `process_span` open PRODUCER / CONSUMER spans named `"<operation> <subject
  kind>"` (low cardinality, as the semantic conventions ask) with `messaging.system=nats`,
  `messaging.destination.name`, `messaging.operation.type` and the body size; `process_span`
  parents its span on the context the message carries, which is what stitches one claim's trace
  across services.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Tracer

from gpudra_bus import subjects
from gpudra_bus.errors import InvalidSubjectError

TRACER_NAME = "gpudra_bus"

# Semantic-convention attribute names (messaging); written out so that the stable API surface of
# opentelemetry-semantic-conventions' incubating module is not a dependency.
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_DESTINATION_NAME = "messaging.destination.name"
MESSAGING_DESTINATION_TEMPLATE = "messaging.destination.template"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_BODY_SIZE = "messaging.message.body.size"
MESSAGING_CONSUMER_GROUP = "messaging.consumer.group.name"


def inject(
    headers: MutableMapping[str, str] | None = None, context: Context | None = None
) -> dict[str, str]:
    """A copy of `headers` plus the trace context of `context` (default: the current one)."""
    out: dict[str, str] = dict(headers or {})
    propagate.inject(out, context=context)
    return out


def extract(headers: Mapping[str, str] | None) -> Context:
    """The trace context carried by `headers` (an empty context when there is none)."""
    carrier = {k.lower(): v for k, v in (headers or {}).items() if isinstance(v, str)}
    return propagate.extract(carrier)


def _template(subject: str) -> str:
    try:
        kind = subjects.kind_of(subject)
    except InvalidSubjectError:
        return subject
    return subjects.all_of(kind)


def _attributes(subject: str, operation: str, size: int | None) -> dict[str, str | int]:
    attrs: dict[str, str | int] = {
        MESSAGING_SYSTEM: "nats",
        MESSAGING_DESTINATION_NAME: subject,
        MESSAGING_DESTINATION_TEMPLATE: _template(subject),
        MESSAGING_OPERATION_TYPE: operation,
        MESSAGING_OPERATION_NAME: operation,
    }
    if size is not None:
        attrs[MESSAGING_BODY_SIZE] = size
    return attrs


def _tracer(tracer: Tracer | None) -> Tracer:
    return tracer if tracer is not None else trace.get_tracer(TRACER_NAME)


@contextmanager
def publish_span(
    subject: str, *, size: int | None = None, tracer: Tracer | None = None
) -> Iterator[Span]:
    """A PRODUCER span for publishing to `subject`; inject inside it to parent the consumer."""
    with _tracer(tracer).start_as_current_span(
        f"publish {_template(subject)}",
        kind=SpanKind.PRODUCER,
        attributes=_attributes(subject, "publish", size),
    ) as span:
        yield span


@contextmanager
def process_span(
    subject: str,
    headers: Mapping[str, str] | None,
    *,
    size: int | None = None,
    consumer: str = "",
    tracer: Tracer | None = None,
) -> Iterator[Span]:
    """A CONSUMER span for processing a message, child of the context in its headers."""
    attrs = _attributes(subject, "process", size)
    if consumer:
        attrs[MESSAGING_CONSUMER_GROUP] = consumer
    with _tracer(tracer).start_as_current_span(
        f"process {_template(subject)}",
        context=extract(headers),
        kind=SpanKind.CONSUMER,
        attributes=attrs,
    ) as span:
        yield span
