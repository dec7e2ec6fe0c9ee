"""What the daemon asks of tracing (issue 49), as a protocol: the tracer lives above the daemon (`bbridge.telemetry`,
OpenTelemetry's SDK), which only knows this shape. Without `[telemetry]` the daemon has `NO_TRACER`, whose hooks do
nothing and whose spans are `NO_SPAN`: nothing of OpenTelemetry is imported and nothing is paid but a call.

The daemon calls it at a few points, never per delta:

* a client's `turn/start`, just before it is sent (`turn_requested`): the thread's next turn is the child of the
  trace context the request carried in `_meta` (`{traceparent, tracestate?}`, W3C), with its model;
* the lifecycle events the compiled delivery notices (`noticed`, once per read with every event of it): `turn/started`
  and `turn/completed`, and the types the tracer asks for beside them (`observed`: a turn's token usage); the events
  the daemon makes itself (a dead bridge's settlement) too;
* a tool call (hosted, the client's, an MCP server's) and a wait on a person (an approval, a question), each a span
  under its thread's turn (`in_turn`); a hosted call carries its span to the tool host (`HostedCall.span`), which
  notes its decision and exit, and hands the span's trace context to the tool (`TRACEPARENT`, an MCP `_meta`);
* a bridge's start (`start`, a root span). A room starts spans of its own the same way (a Perspectives run, under
  the tool call that launched it) and passes their context on in the `_meta` of the turns it starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

Attribute = str | bool | int | float
Carrier = dict[str, str]  # W3C trace context as headers: `traceparent` and, when there is one, `tracestate`
TRACE_KEYS: Final = ("traceparent", "tracestate")


class Span(Protocol):
    """One span, open until `end`."""

    def set(self, key: str, value: Attribute) -> None:
        """An attribute (a later value of the key replaces an earlier one)."""
        ...

    def carrier(self) -> Carrier:
        """The span's W3C trace context, to hand to whatever it calls ({} untraced: `NO_SPAN`); a span the sampler
        dropped still carries its context, flagged not sampled, so what it calls drops its spans too."""
        ...

    def end(self, error: str | None = None) -> None:
        """Ends the span (an `error` marks it failed, with that description); a second end does nothing."""
        ...


class Tracer(Protocol):
    enabled: bool  # False: `NO_TRACER` (a caller may skip building what only a span would read)
    observed: frozenset[str]  # the event types it needs noticed beside the lifecycle ones (the delivery adds them)

    def turn_requested(self, thread_id: str, provider_id: str, model: str | None, context: Carrier | None) -> None:
        """A client's `turn/start` is about to be sent: the thread's next turn span is the child of `context` (the
        request's `_meta`; None: a root span) and requested `model`."""
        ...

    def noticed(self, provider_id: str, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Canonical events of the provider's threads, as `(thread id, event)`: turn spans start and end here."""
        ...

    def in_turn(
        self, name: str, thread_id: str | None, turn_id: str | None, attributes: Mapping[str, Attribute]
    ) -> Span:
        """A span under the thread's turn (`turn_id`, else the thread's latest open turn; a root span when it has
        none)."""
        ...

    def start(self, name: str, parent: Span | Carrier | None, attributes: Mapping[str, Attribute]) -> Span:
        """A span under `parent` (a span, a trace context, or None for a root span)."""
        ...

    def close(self) -> None:
        """The daemon stops: open spans end, the spans not yet exported are sent (bounded), the exporter stops."""
        ...


class _NoSpan:
    def set(self, key: str, value: Attribute) -> None:
        pass

    def carrier(self) -> Carrier:
        return {}

    def end(self, error: str | None = None) -> None:
        pass


class _NoTracer:
    enabled = False
    observed: frozenset[str] = frozenset()

    def turn_requested(self, thread_id: str, provider_id: str, model: str | None, context: Carrier | None) -> None:
        pass

    def noticed(self, provider_id: str, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        pass

    def in_turn(
        self, name: str, thread_id: str | None, turn_id: str | None, attributes: Mapping[str, Attribute]
    ) -> Span:
        return NO_SPAN

    def start(self, name: str, parent: Span | Carrier | None, attributes: Mapping[str, Attribute]) -> Span:
        return NO_SPAN

    def close(self) -> None:
        pass


NO_SPAN: Final[Span] = _NoSpan()
NO_TRACER: Final[Tracer] = _NoTracer()
