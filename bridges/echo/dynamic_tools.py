"""`tool:<name>`: a call of the client's dynamic tool (`item/tool/call`), shown as a `tool` item (protocol.md §3.6.1).

The tool may be declared or not (the daemon decides); a refused request reads as a failed call.
"""

from __future__ import annotations

from typing import Any

from bbridge.core import grammar as g
from bbridge.kit import Bridge
from bbridge.wire import rpc


def tool_key(number: int) -> g.ItemKey:
    """The key of turn `number`'s tool item."""
    return g.ItemKey(providerItemId=f"tool-{number}")


def tool_shape(name: str, args: dict[str, Any], ok: bool | None = None, text: str = "") -> g.ToolShape:
    """The item: as called (`ok` None), or with the call's result (`ok`) or error text."""
    if ok is None:
        return g.ToolShape(tool=name, server="bb", args=args)
    if ok:
        return g.ToolShape(tool=name, server="bb", args=args, result=text)
    return g.ToolShape(tool=name, server="bb", args=args, error=text)


async def call(
    bridge: Bridge, thread_id: str, provider_thread_id: str, name: str, args: dict[str, Any], number: int
) -> tuple[bool, str]:
    """Call the tool for turn `number`; whether it succeeded, and the text of what came back."""
    request = {
        "providerThreadId": provider_thread_id,
        "threadId": thread_id,
        "turnId": None,
        "callId": f"call-{provider_thread_id}-{number}",
        "tool": name,
        "arguments": args,
    }
    try:
        answer = await bridge.request("item/tool/call", request)
    except rpc.RpcError as exc:
        answer = {"success": False, "contentItems": [{"type": "inputText", "text": exc.message}]}
    ok = isinstance(answer, dict) and answer.get("success") is True
    items = answer.get("contentItems") if isinstance(answer, dict) else None
    text = "\n".join(c["text"] for c in items or [] if isinstance(c, dict) and isinstance(c.get("text"), str))
    return ok, text
