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


def scope(turn_id: str | None) -> dict[str, str]:
    """Turn scope for a turn id, thread scope for None."""
    return {"kind": "thread"} if turn_id is None else {"kind": "turn", "turnId": turn_id}


def new_event(kind: str, turn_id: str | None) -> Event:
    """The common envelope: type, unstamped ids, scope (`scope` inlined: this runs for nearly every event)."""
    where = {"kind": "thread"} if turn_id is None else {"kind": "turn", "turnId": turn_id}
    return {"type": kind, "threadId": "", "providerThreadId": "", "scope": where}


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
