"""Deltas on the wire with the reference's member order (spec Appendix B).

The grammar Structs fix the order of every member the codex bridge writes but three: the reference writes a
`turn.boundary`'s turn id first, an `unhandled`'s turn id before its `parentRef`, and a tool item's
`server` before its `tool`. Batches are validated
by the daemon's own decoder before they are written, as the kit does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from bbridge.core import grammar as g
from bbridge.kit import DeltaError

_ORDER = {
    "turn.boundary": ("kind", "providerTurnId", "status", "error", "providerCheckpointId"),
    "unhandled": ("kind", "raw", "rawType", "vouchedTurn", "providerTurnId", "parentRef"),
}
_TOOL_ORDER = ("type", "server", "tool")


def _ordered(data: dict[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    return {name: data[name] for name in order if name in data} | {k: v for k, v in data.items() if k not in order}


def delta_json(delta: g.Delta) -> dict[str, Any]:
    """One delta as the reference's JSON object (members in its order)."""
    data: dict[str, Any] = msgspec.to_builtins(delta)
    item = data.get("item")
    if isinstance(item, dict) and item.get("type") == "tool":
        data["item"] = _ordered(item, _TOOL_ORDER)
    order = _ORDER.get(data["kind"])
    return data if order is None else _ordered(data, order)


def delta_params(thread_id: str, deltas: Sequence[g.Delta]) -> bytes:
    """`thread/delta` params; raises `DeltaError` (before anything is written) when the grammar rejects a delta."""
    data = msgspec.json.encode({"threadId": thread_id, "deltas": [delta_json(delta) for delta in deltas]})
    try:
        g.decode_params(data)
    except g.GrammarError as exc:
        raise DeltaError(f"invalid thread/delta for thread {thread_id!r}: {exc}") from None
    return data
