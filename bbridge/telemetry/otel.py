"""The tracer of `[telemetry]`: OpenTelemetry's official SDK, spans batched off the event path and exported over
OTLP/HTTP (protobuf) to `<otlp_endpoint>/v1/traces`.

Imported only when the file has `[telemetry]` (`bbridge.telemetry.tracer`): this module is where OpenTelemetry
enters the process. Its provider is the daemon's own, never the global one (`opentelemetry.trace` keeps whatever a
library set there). An ended span goes into the `BatchSpanProcessor`'s bounded queue (an append: nothing on the
daemon's trio thread waits on the network); the processor's thread encodes and posts batches, retrying within the
exporter's timeout, and drops spans when its queue is full rather than grow. Sampling is parent-based: a client's
trace context decides for its turns (its sampled flag), `sample_ratio` for the traces the daemon starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from bbridge.seams.telemetry import Attribute, Carrier, Span
from bbridge.telemetry.settings import TelemetryConfig
from bbridge.telemetry.turns import OBSERVED, Turns

EXPORT_TIMEOUT_S: Final = 5.0  # one export, retries included: what a daemon's exit waits at most for a dead collector
_PROPAGATOR: Final = TraceContextTextMapPropagator()


class OtelSpan:
    """An SDK span as the seam's `Span`: ended once (the SDK warns at a second end)."""

    __slots__ = ("_ended", "_span")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self._ended = False

    def set(self, key: str, value: Attribute) -> None:
        self._span.set_attribute(key, value)

    def carrier(self) -> Carrier:
        carrier: Carrier = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(self._span))
        return carrier

    def end(self, error: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if error is not None:
            self._span.set_status(Status(StatusCode.ERROR, error))
        self._span.end()

    @property
    def span(self) -> trace.Span:
        return self._span


class OtelTracer:
    """Implements `bbridge.seams.telemetry.Tracer` with the SDK; `exporter` replaces the OTLP one (the bench's
    in-process sink, a test's)."""

    enabled = True
    observed = OBSERVED

    def __init__(self, config: TelemetryConfig, exporter: SpanExporter | None = None, version: str = "") -> None:
        self.config = config
        attributes: dict[str, Any] = {"service.name": config.service_name}
        if version:
            attributes["service.version"] = version
        self._provider = TracerProvider(
            resource=Resource.create(attributes),
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
            shutdown_on_exit=False,  # `close` does it, bounded
        )
        if exporter is None:
            exporter = OTLPSpanExporter(
                endpoint=config.traces_url, headers=dict(config.headers), timeout=EXPORT_TIMEOUT_S
            )
        self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer("bbridge", version or None)
        self.turns = Turns(self.start)

    def turn_requested(self, thread_id: str, provider_id: str, model: str | None, context: Carrier | None) -> None:
        self.turns.requested(thread_id, provider_id, model, context)

    def noticed(self, provider_id: str, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        self.turns.noticed(provider_id, events)

    def in_turn(
        self, name: str, thread_id: str | None, turn_id: str | None, attributes: Mapping[str, Attribute]
    ) -> Span:
        return self.start(name, self.turns.parent(thread_id, turn_id), attributes)

    def start(self, name: str, parent: Span | Carrier | None, attributes: Mapping[str, Attribute]) -> Span:
        if isinstance(parent, OtelSpan):
            context = trace.set_span_in_context(parent.span)
        elif isinstance(parent, dict):
            context = _PROPAGATOR.extract(parent, context=Context())  # an invalid traceparent: a root span
        else:
            context = Context()  # no parent (or `NO_SPAN`: untraced above): a root span, whatever is current
        return OtelSpan(self._tracer.start_span(name, context=context, attributes=attributes))

    def flush(self, timeout_s: float = EXPORT_TIMEOUT_S) -> bool:
        """Every ended span exported now (a test's, the bench's); False when that took longer than `timeout_s`."""
        return self._provider.force_flush(int(timeout_s * 1000))

    def close(self) -> None:
        self.turns.close()
        self._provider.shutdown()
