"""Claude Code SDK messages for the translator tests, a translator with an open turn, and its deltas as the wire
carries them (each batch encoded through the grammar check).
"""

from __future__ import annotations

import json
from typing import Any

from bbridge.core import grammar as g
from bridges.claude_code.translate import Translator, delta_params

THREAD = "thr_claude"
CREQ = "creq_abcdefghij"


def out(deltas: list[g.Delta]) -> list[dict[str, Any]]:
    """The deltas as the wire carries them (grammar-checked)."""
    encoded: list[dict[str, Any]] = json.loads(delta_params(THREAD, deltas))["deltas"]
    return encoded


def kinds(deltas: list[g.Delta]) -> list[str]:
    return [d["kind"] for d in out(deltas)]


def turn() -> Translator:
    """A translator with an accepted input and an open turn."""
    t = Translator(THREAD, "claude-opus-5[1m]")
    t.input_accepted(CREQ)
    t.message(assistant([{"type": "text", "text": "hi"}]))
    return t


def assistant(content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"type": "assistant", "message": {"role": "assistant", "content": content}, "uuid": "u-1", **extra}


def tool_use(call_id: str, name: str, tool_input: Any) -> dict[str, Any]:
    return assistant([{"type": "tool_use", "id": call_id, "name": name, "input": tool_input}])


def tool_result(call_id: str, content: Any = "ok", **block: Any) -> dict[str, Any]:
    result = {"type": "tool_result", "tool_use_id": call_id, "content": content, **block}
    return {"type": "user", "message": {"role": "user", "content": [result]}}


def result(**fields: Any) -> dict[str, Any]:
    return {"type": "result", "subtype": "success", "is_error": False, **fields}
