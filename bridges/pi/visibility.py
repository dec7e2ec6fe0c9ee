"""Which untranslated pi input is noise (pi-bridge.md §5): a kind (the `rawType` of fallbacks) and a coverage.

Only `unknown` input reaches the wire, as an `unhandled` delta; `normalized` input was translated and `noise`
is dropped on purpose.
"""

from __future__ import annotations

from typing import Any

NORMALIZED, NOISE, UNKNOWN = "normalized", "noise", "unknown"
_SDK = "sdk/message"
_NORMALIZED_EVENTS = (
    "agent_start", "agent_end", "compaction_start", "compaction_end",
    "tool_execution_start", "tool_execution_end", "tool_execution_update",
)  # fmt: skip
_NOISE_EVENTS = ("auto_retry_start", "auto_retry_end", "turn_start", "turn_end")
_ROLES = ("user", "assistant", "toolResult")
_NOISE_UPDATES = ("text_start", "text_end", "toolcall_start", "toolcall_delta", "toolcall_end")
_RUNTIME = ("thread/identity", "thread/contextWindowUsage/updated", "error")


def visibility(envelope: dict[str, Any]) -> tuple[str, str]:
    """(kind, coverage) of one input envelope `{jsonrpc, method, params}`."""
    method = envelope.get("method")
    if method != _SDK:
        return str(method), NORMALIZED if method in _RUNTIME else UNKNOWN
    params = envelope.get("params")
    message = params.get("message") if isinstance(params, dict) else None
    if not isinstance(message, dict):
        return "sdk/unknown", UNKNOWN
    kind = message.get("type")
    if kind in _NORMALIZED_EVENTS:
        return f"sdk/{kind}", NORMALIZED
    if kind in _NOISE_EVENTS:
        return f"sdk/{kind}", NOISE
    if kind in ("message_start", "message_end"):
        inner = message.get("message")
        role = inner.get("role") if isinstance(inner, dict) else None
        return (f"sdk/{kind}:{role}", NOISE) if role in _ROLES else (f"sdk/{kind}", UNKNOWN)
    if kind == "message_update":
        return _update(message)
    return "sdk/unknown", UNKNOWN


def _update(message: dict[str, Any]) -> tuple[str, str]:
    update = message.get("assistantMessageEvent")
    sub = update.get("type") if isinstance(update, dict) else None
    if not isinstance(update, dict) or not isinstance(sub, str):
        return "sdk/message_update", UNKNOWN
    kind = f"sdk/message_update:{sub}"
    if sub == "text_delta":
        return kind, NORMALIZED
    if sub == "thinking_start":
        inner = message.get("message")
        content = inner.get("content") if isinstance(inner, dict) else None
        thought = isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "thinking" and b.get("thinking") for b in content
        )
        return kind, NORMALIZED if thought else NOISE
    if sub == "thinking_delta":
        return kind, NORMALIZED if update.get("delta") else NOISE
    if sub == "thinking_end":
        return kind, NORMALIZED if update.get("content") else NOISE
    if sub in _NOISE_UPDATES:
        return kind, NOISE
    return "sdk/message_update", UNKNOWN
