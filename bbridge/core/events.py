"""Canonical ThreadEvent vocabulary and its byte-exact encoding (assembler.md §3, §16).

Events are insertion-ordered dicts in the reference's key order. Values the
wire handed over verbatim may be msgspec Structs; `encode_event` writes the
whole event as compact JSON identical to the reference's `JSON.stringify`.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

Event = dict[str, Any]

# The 30 event types the assembler can emit.
EVENT_TYPES: Final = (
    "turn/started", "turn/completed", "turn/input/accepted", "item/started", "item/completed",
    "item/agentMessage/delta", "item/reasoning/summaryTextDelta", "item/reasoning/textDelta",
    "item/plan/delta", "item/commandExecution/outputDelta", "item/fileChange/outputDelta",
    "item/toolCall/progress", "item/backgroundTask/progress", "item/backgroundTask/completed",
    "item/delegation/progress", "item/delegation/completed", "thread/tokenUsage/updated",
    "thread/contextWindowUsage/updated", "thread/compacted", "thread/context/cleared",
    "turn/diff/updated", "provider/error", "provider/warning", "provider/modelFallback",
    "provider/unhandled", "provider/rateLimits/updated", "thread/extensionState/updated",
    "thread/started", "thread/identity", "thread/name/updated",
)  # fmt: skip

# Streamed-text events: the only ones text coalescing may merge.
TEXT_EVENT_TYPES: Final = frozenset(
    {
        "item/agentMessage/delta",
        "item/reasoning/textDelta",
        "item/reasoning/summaryTextDelta",
        "item/plan/delta",
        "item/commandExecution/outputDelta",
        "item/fileChange/outputDelta",
    }
)


# Scopes are shared: one dict per turn (and one for the thread) serves every event of it, so no reader may change
# an event's scope in place (none does; replacing it is fine). Making each anew was a third of building an event.
_THREAD_SCOPE: Final = {"kind": "thread"}
_TURN_SCOPES: Final[dict[str, dict[str, str]]] = {}
MAX_TURN_SCOPES: Final = 1024  # the newest turns' scopes kept (all of them dropped at once when full)


def scope(turn_id: str | None) -> dict[str, str]:
    """Turn scope for a turn id, thread scope for None (shared: see above)."""
    if turn_id is None:
        return _THREAD_SCOPE
    where = _TURN_SCOPES.get(turn_id)
    if where is None:
        if len(_TURN_SCOPES) >= MAX_TURN_SCOPES:
            _TURN_SCOPES.clear()
        where = _TURN_SCOPES[turn_id] = {"kind": "turn", "turnId": turn_id}
    return where


_ENVELOPE: Final[Event] = {"type": "", "threadId": "", "providerThreadId": "", "scope": _THREAD_SCOPE}


def new_event(kind: str, turn_id: str | None) -> Event:
    """The common envelope: type, unstamped ids, scope (a copy of `_ENVELOPE`: copying a dict's table costs less
    than inserting its keys one by one)."""
    event = _ENVELOPE.copy()
    event["type"] = kind
    if turn_id is not None:
        event["scope"] = scope(turn_id)
    return event


_DELTA_ENVELOPE: Final[Event] = {**_ENVELOPE, "itemId": "", "delta": ""}


def delta_event(kind: str, turn_id: str, item_id: str, delta: str) -> Event:
    """A streamed-text event of a turn: `new_event` with its item and text, copied from a template that holds
    their keys too (adding them to `new_event`'s copy would grow its table)."""
    event = _DELTA_ENVELOPE.copy()
    event["type"] = kind
    event["scope"] = scope(turn_id)
    event["itemId"] = item_id
    event["delta"] = delta
    return event


def stamp(event: Event, thread_id: str, provider_thread_id: str | None) -> Event:
    """Replace the unstamped ids in place (key positions kept), as the runtime does."""
    event["threadId"] = thread_id
    if provider_thread_id is not None and "providerThreadId" in event and event["type"] != "thread/identity":
        event["providerThreadId"] = provider_thread_id
    return event


_encoder: Final = msgspec.json.Encoder()


def encode_event(event: Event) -> bytes:
    """Compact JSON, byte-identical to the reference for the values the wire can carry."""
    return _encoder.encode(event)


def encode_lines(events: list[Event]) -> bytes:
    """NDJSON: one encoded event per line, each newline-terminated."""
    if not events:
        return b""
    return b"\n".join(_encoder.encode(e) for e in events) + b"\n"
