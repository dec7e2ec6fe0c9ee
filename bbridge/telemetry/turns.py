"""Each thread's turns as spans, from the events the daemon's delivery notices: what a tracer keeps between a
client's `turn/start` and the turn's `turn/completed`. It knows spans by the seam's protocol only (`Start` makes
them), so it imports nothing of OpenTelemetry.

A `turn/start` leaves the thread's next turn its parent and model (`requested`); `turn/started` opens the
`bbridge.turn` span with them (a root span when no client asked for the turn: a bridge's own); each
`thread/tokenUsage/updated` of the turn adds its `last` breakdown (one model request's, or the turn's: summed, the
turn's usage either way), each `provider/error` of it is kept as what failed it; `turn/completed` ends it with its
status and the usage under the GenAI conventions, a failed turn's span an error saying why. What
is kept is bounded: a turn that never starts leaves its request behind only until `MAX_KEPT` newer ones, and past
`MAX_KEPT` open turns the oldest span ends, marked untracked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from bbridge.seams.telemetry import Attribute, Carrier, Span

Start = Callable[[str, Span | Carrier | None, Mapping[str, Attribute]], Span]

MAX_KEPT: Final = 10_000  # turns requested and not started, and open turns, each
OBSERVED: Final = frozenset({"thread/tokenUsage/updated"})  # what the delivery notices for the turns' usage
_READ: Final = OBSERVED | {"turn/started", "turn/completed", "provider/error"}  # the rest noticed is the tracker's
# A turn's summed token breakdown under the GenAI conventions (the bridge's `inputTokens` as it reports them).
USAGE: Final = (
    ("inputTokens", "gen_ai.usage.input_tokens"),
    ("outputTokens", "gen_ai.usage.output_tokens"),
    ("cachedInputTokens", "gen_ai.usage.cache_read.input_tokens"),
    ("reasoningOutputTokens", "gen_ai.usage.reasoning.output_tokens"),
    ("totalTokens", "bbridge.usage.total_tokens"),
)


@dataclass(frozen=True)
class _Requested:
    provider_id: str
    model: str | None
    context: Carrier | None


@dataclass
class _Turn:
    span: Span
    usage: dict[str, int | float] = field(default_factory=dict)
    error: str | None = None  # its latest `provider/error`'s message


class Turns:
    """The turn spans of every thread, by thread and turn id."""

    def __init__(self, start: Start) -> None:
        self._start = start
        self._requested: dict[str, _Requested] = {}
        self._open: dict[tuple[str, str], _Turn] = {}  # oldest first
        self._threads: dict[str, list[str]] = {}  # each thread's open turns, the latest last

    def requested(self, thread_id: str, provider_id: str, model: str | None, context: Carrier | None) -> None:
        self._requested.pop(thread_id, None)
        self._requested[thread_id] = _Requested(provider_id, model, context)
        if len(self._requested) > MAX_KEPT:
            del self._requested[next(iter(self._requested))]

    def noticed(self, provider_id: str, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        for thread_id, event in events:
            kind = event["type"]
            if kind not in _READ:
                continue
            scope = event.get("scope") or {}
            turn_id = scope.get("turnId") if scope.get("kind") == "turn" else None
            if not isinstance(turn_id, str):
                continue
            if kind == "turn/started":
                self._started(provider_id, thread_id, turn_id)
            elif kind == "turn/completed":
                self._completed(thread_id, turn_id, event)
            elif kind == "provider/error":
                if (turn := self._open.get((thread_id, turn_id))) is not None:
                    turn.error = " ".join(str(event.get(key) or "") for key in ("message", "detail")).strip()
            else:
                self._used(thread_id, turn_id, event.get("tokenUsage"))

    def parent(self, thread_id: str | None, turn_id: str | None) -> Span | Carrier | None:
        """What a span of the thread's turn (a tool call, a wait on a person) is the child of: the turn's span,
        else the thread's latest open turn's, else the trace context of the turn it asked for, else none."""
        if thread_id is None:
            return None
        turn = self._open.get((thread_id, turn_id)) if turn_id is not None else None
        if turn is None and (opened := self._threads.get(thread_id)):
            turn = self._open.get((thread_id, opened[-1]))
        if turn is not None:
            return turn.span
        requested = self._requested.get(thread_id)
        return requested.context if requested is not None else None

    def close(self) -> None:
        """The daemon stops: every open turn's span ends, unfinished."""
        for turn in self._open.values():
            turn.span.set("bbridge.turn.status", "unfinished")
            turn.span.end("the daemon stopped before the turn ended")
        self._open.clear()
        self._threads.clear()

    # -- the events ------------------------------------------------------------------------------------------------

    def _started(self, provider_id: str, thread_id: str, turn_id: str) -> None:
        if (thread_id, turn_id) in self._open:
            return
        requested = self._requested.pop(thread_id, None)
        attributes: dict[str, Attribute] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider_id,
            "gen_ai.conversation.id": thread_id,
            "bbridge.thread_id": thread_id,
            "bbridge.turn_id": turn_id,
            "bbridge.provider_id": provider_id,
        }
        if requested is not None and requested.model is not None:
            attributes["gen_ai.request.model"] = requested.model
        span = self._start("bbridge.turn", requested.context if requested is not None else None, attributes)
        self._open[(thread_id, turn_id)] = _Turn(span)
        self._threads.setdefault(thread_id, []).append(turn_id)
        if len(self._open) > MAX_KEPT:
            (old_thread, old_turn), oldest = next(iter(self._open.items()))
            oldest.span.set("bbridge.turn.status", "untracked")
            oldest.span.end(f"more than {MAX_KEPT} turns were open at once; this one's end was not traced")
            self._forget(old_thread, old_turn)

    def _used(self, thread_id: str, turn_id: str, usage: Any) -> None:
        turn = self._open.get((thread_id, turn_id))
        last = usage.get("last") if isinstance(usage, Mapping) else None
        if turn is None or last is None:
            return
        for key, _ in USAGE:
            value = last.get(key) if isinstance(last, Mapping) else getattr(last, key, None)  # a Struct, as delivered
            if isinstance(value, int | float) and not isinstance(value, bool):
                turn.usage[key] = turn.usage.get(key, 0) + value

    def _completed(self, thread_id: str, turn_id: str, event: Mapping[str, Any]) -> None:
        turn = self._open.get((thread_id, turn_id))
        if turn is None:
            return
        self._forget(thread_id, turn_id)
        status = event.get("status")
        span = turn.span
        span.set("bbridge.turn.status", str(status))
        for key, name in USAGE:
            if key in turn.usage:
                value = turn.usage[key]
                span.set(name, int(value) if float(value).is_integer() else value)
        error = event.get("error")
        message = error.get("message") if isinstance(error, Mapping) else None
        if status == "failed":
            span.end(str(message or turn.error or "the turn failed"))
        else:
            span.end()

    def _forget(self, thread_id: str, turn_id: str) -> None:
        self._open.pop((thread_id, turn_id), None)
        opened = self._threads.get(thread_id)
        if opened is not None and turn_id in opened:
            opened.remove(turn_id)
            if not opened:
                del self._threads[thread_id]
