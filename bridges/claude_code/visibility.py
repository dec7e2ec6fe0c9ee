"""Which SDK messages may vanish without a trace (spec §4.12).

A message that translates to nothing is classified: known noise and messages whose content the translator
already rendered stay silent; anything unknown becomes an `unhandled` delta so no provider output is lost.
"""

from __future__ import annotations

from typing import Any, Literal

Coverage = Literal["noise", "normalized", "unknown"]

_CONTENT_TYPES = frozenset({"fallback", "text", "thinking", "tool_result", "tool_use"})
_NORMALIZED_ASSISTANT = frozenset({"fallback", "text", "thinking", "tool_use"})
_NORMALIZED_SYSTEM = frozenset(
    {
        "compact_boundary",
        "status",
        "model_fallback",
        "model_refusal_fallback",
        "model_refusal_no_fallback",
        "permission_denied",
        "task_started",
        "task_progress",
        "task_updated",
        "task_notification",
    }
)
_NOISE_SYSTEM = frozenset(
    {
        "init",
        "commands_changed",
        "elicitation_complete",
        "files_persisted",
        "hook_progress",
        "hook_response",
        "hook_started",
        "local_command_output",
        "memory_recall",
        "mirror_error",
        "notification",
        "plugin_install",
        "session_state_changed",
        "thinking_tokens",
    }
)
_NOISE_STREAM = frozenset({"message_start", "content_block_stop", "message_delta", "message_stop", "ping"})
_FIXED: dict[str, Coverage] = {
    "command_lifecycle": "noise",
    "conversation_reset": "normalized",
    "result": "normalized",
    "rate_limit_event": "noise",
    "tool_progress": "noise",
    "tool_use_summary": "noise",
}


def _content_types(message: dict[str, Any]) -> list[str]:
    inner = message.get("message")
    content = inner.get("content") if isinstance(inner, dict) else None
    if not isinstance(content, list):
        return []
    seen: list[str] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if isinstance(kind, str) and kind and kind not in seen:
            seen.append(kind)
    return sorted(kind if kind in _CONTENT_TYPES else "unknown" for kind in seen)


def _content_kind(prefix: str, message: dict[str, Any]) -> tuple[str, list[str]]:
    types = _content_types(message)
    return (f"{prefix}:{'+'.join(types)}" if types else prefix), types


def classify(message: dict[str, Any]) -> tuple[str, Coverage]:
    """The message's visibility kind (its `rawType`) and coverage."""
    kind = message.get("type")
    if kind == "assistant":
        name, types = _content_kind("sdk/assistant", message)
        return name, "normalized" if types and all(t in _NORMALIZED_ASSISTANT for t in types) else "unknown"
    if kind == "user":
        name, types = _content_kind("sdk/user", message)
        return name, "noise" if types == ["text"] else "normalized" if types == ["tool_result"] else "unknown"
    if kind == "system":
        subtype = message.get("subtype")
        if subtype in _NORMALIZED_SYSTEM:
            return f"sdk/system:{subtype}", "normalized"
        if subtype in _NOISE_SYSTEM:
            return f"sdk/system:{subtype}", "noise"
        return "sdk/system", "unknown"
    if kind == "stream_event":
        return _stream_event(message.get("event"))
    if isinstance(kind, str) and kind in _FIXED:
        return f"sdk/{kind}", _FIXED[kind]
    return f"sdk/{kind if isinstance(kind, str) else 'unknown'}", "unknown"


def _stream_event(event: Any) -> tuple[str, Coverage]:
    kind = event.get("type") if isinstance(event, dict) else None
    if not isinstance(event, dict) or not isinstance(kind, str):
        return "sdk/stream_event", "unknown"
    if kind in _NOISE_STREAM:
        return f"sdk/stream_event:{kind}", "noise"
    if kind == "content_block_start":
        block = event.get("content_block")
        block_type = block.get("type") if isinstance(block, dict) else None
        if block_type == "thinking":
            thinking = block.get("thinking") if isinstance(block, dict) else None
            coverage: Coverage = "normalized" if isinstance(thinking, str) and thinking else "noise"
            return "sdk/stream_event:content_block_start:thinking", coverage
        if block_type in ("text", "tool_use"):
            return f"sdk/stream_event:content_block_start:{block_type}", "noise"
        return "sdk/stream_event:content_block_start", "unknown"
    if kind == "content_block_delta":
        delta = event.get("delta")
        delta_type = delta.get("type") if isinstance(delta, dict) else None
        name = f"sdk/stream_event:content_block_delta:{delta_type}"
        if delta_type == "text_delta":
            return name, "normalized"
        if delta_type == "thinking_delta":
            thinking = delta.get("thinking") if isinstance(delta, dict) else None
            return name, "normalized" if isinstance(thinking, str) and thinking else "noise"
        if delta_type in ("input_json_delta", "signature_delta"):
            return name, "noise"
        return "sdk/stream_event:content_block_delta", "unknown"
    return "sdk/stream_event", "unknown"
