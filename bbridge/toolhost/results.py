"""A hosted tool's answer as the bridge protocol's `ToolCallResult` (protocol.md §3.6.1).

`{success, contentItems: [{type: "inputText", text} | {type: "inputImage", imageUrl}]}`. A tool may answer in
MCP's shape (`{content: [...], isError}`), as an MCP server's tool does: `from_mcp` converts it (text items as
text, image items as `data:` URLs, anything else as its JSON text), so a command tool and an MCP tool reach the
model alike.
"""

from __future__ import annotations

from typing import Any

import msgspec

ToolCallResult = dict[str, Any]


def text_result(text: str, *, success: bool = True) -> ToolCallResult:
    return {"success": success, "contentItems": [{"type": "inputText", "text": text}]}


def failure(message: str) -> ToolCallResult:
    """A failed call the model can read: `message` says what failed and, where it can, what to do."""
    return text_result(message, success=False)


def from_mcp(value: Any) -> ToolCallResult | None:
    """An MCP `CallToolResult` (`content` a list, `isError` a boolean) as a `ToolCallResult`; None when `value`
    is not one."""
    if not isinstance(value, dict):
        return None
    content, is_error = value.get("content"), value.get("isError", False)
    if not isinstance(content, list) or not isinstance(is_error, bool):
        return None
    return {"success": not is_error, "contentItems": [_item(block) for block in content]}


def _item(block: Any) -> dict[str, str]:
    if isinstance(block, dict):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            return {"type": "inputText", "text": block["text"]}
        data, mime = block.get("data"), block.get("mimeType")
        if kind == "image" and isinstance(data, str) and data and isinstance(mime, str) and mime:
            return {"type": "inputImage", "imageUrl": f"data:{mime};base64,{data}"}
    return {"type": "inputText", "text": msgspec.json.encode(block).decode()}


def is_empty(result: ToolCallResult) -> bool:
    """No content, or only blank text: what `retry.on_empty` retries."""
    return all(item["type"] == "inputText" and not item["text"].strip() for item in result["contentItems"])
