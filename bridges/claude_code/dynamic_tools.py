"""The in-process `bb-bridge` MCP server that offers a thread's dynamic tools to the CLI (spec §2.6).

The CLI reaches it through `mcp_message` control requests; these pure functions answer the MCP side (initialize,
tools/list, ping, unknown tools) and shape the runtime's `item/tool/call` result as MCP content. The session runs
the calls themselves.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bbridge.core import grammar as g

Json = Any
MCP_SERVER = "bb-bridge"
MCP_VERSION = "1.0.0"
MCP_PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
TOOL_PREFIX = f"mcp__{MCP_SERVER}__"


@dataclass(frozen=True, slots=True)
class DynamicTool:
    name: str
    description: str
    input_schema: Json
    presentation: g.Presentation | None = None  # the client's, shown on the tool's items (past the reference)


def mcp_reply(message: Json, tools: Sequence[DynamicTool]) -> dict[str, Any] | None:
    """The server's reply to an MCP message, or None for `tools/call` of a known tool (the runtime answers it)."""
    if not isinstance(message, dict) or "id" not in message:
        return {"jsonrpc": "2.0", "result": {}, "id": 0}
    method, ident = message.get("method"), message["id"]
    if method == "initialize":
        params = message.get("params")
        asked = params.get("protocolVersion") if isinstance(params, dict) else None
        version = asked if asked in MCP_PROTOCOL_VERSIONS else MCP_PROTOCOL_VERSIONS[0]
        info = {"name": MCP_SERVER, "version": MCP_VERSION}
        return {
            "result": {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info},
            "jsonrpc": "2.0",
            "id": ident,
        }
    if method == "tools/list":
        listed = [{"name": t.name, "description": t.description, "inputSchema": _schema(t.input_schema)} for t in tools]
        return {"result": {"tools": listed}, "jsonrpc": "2.0", "id": ident}
    if method == "tools/call":
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if any(t.name == name for t in tools):
            return None
        return mcp_result(ident, [{"type": "text", "text": f"Unknown tool: {name}"}], error=True)
    if method == "ping":
        return {"result": {}, "jsonrpc": "2.0", "id": ident}
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"Method not found: {method}"}}


def _schema(schema: Json) -> Json:
    return schema if isinstance(schema, dict) and schema.get("type") == "object" else {"type": "object"}


def mcp_result(ident: Json, content: list[dict[str, Any]], *, error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": content}
    if error:
        result["isError"] = True
    return {"result": result, "jsonrpc": "2.0", "id": ident}


def tool_call_content(result: Json) -> tuple[list[dict[str, Any]], bool]:
    """The runtime's `item/tool/call` result as MCP content, and whether it failed."""
    if not isinstance(result, dict) or not isinstance(result.get("success"), bool):
        return [{"type": "text", "text": "Invalid tool call response"}], True
    items = result.get("contentItems")
    if not isinstance(items, list):
        return [{"type": "text", "text": "Invalid tool call response"}], True
    content: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "inputText" and isinstance(item.get("text"), str) and item["text"]:
            content.append({"type": "text", "text": item["text"]})
        elif item.get("type") == "inputImage" and isinstance(item.get("imageUrl"), str):
            data_url = re.fullmatch(r"data:([^;,]+);base64,(.*)", item["imageUrl"], re.DOTALL)
            if data_url:
                content.append({"type": "image", "data": data_url.group(2), "mimeType": data_url.group(1)})
            else:
                content.append({"type": "text", "text": item["imageUrl"]})
    success = result["success"]
    if not content:
        content = [{"type": "text", "text": "OK" if success else "Tool call failed"}]
    return content, not success
