"""What the bridge hands the agent as a prompt: bb prompt inputs as ACP content blocks, and bb's `/compact`."""

from __future__ import annotations

import base64
import mimetypes
import os

from msgspec import UNSET

from bbridge.wire import protocol
from bridges.acp.messages import JsonObject


def prompt_blocks(inputs: list[protocol.PromptInput], instructions: str | None, *, images: bool) -> list[JsonObject]:
    """ACP content blocks for bb prompt inputs, the session instructions (when given) first."""
    blocks: list[JsonObject] = []
    if instructions:
        blocks.append({"type": "text", "text": f"<system_instructions>\n{instructions}\n</system_instructions>"})
    for item in inputs:
        if isinstance(item, protocol.TextInput):
            blocks.append({"type": "text", "text": item.text})
        elif isinstance(item, protocol.ImageInput):
            blocks.append({"type": "text", "text": f"[image attachment: {item.url}]"})
        elif isinstance(item, protocol.LocalImageInput):
            blocks.append(
                _image(item.path) if images else {"type": "text", "text": f"[image attachment on disk: {item.path}]"}
            )
        else:
            name = item.name if item.name is not UNSET else os.path.basename(item.path)
            blocks.append({"type": "resource_link", "uri": f"file://{item.path}", "name": name})
    return blocks


def _image(path: str) -> JsonObject:
    try:
        with open(path, "rb") as handle:
            data = base64.b64encode(handle.read()).decode()
    except OSError:
        return {"type": "text", "text": f"[unreadable image attachment: {path}]"}
    return {"type": "image", "data": data, "mimeType": mimetypes.guess_type(path)[0] or "image/png"}


def is_compact(inputs: list[protocol.PromptInput]) -> bool:
    """bb's manual compaction: a lone `/compact` text whose mentions, if any, are the builtin command."""
    if len(inputs) != 1 or not isinstance(inputs[0], protocol.TextInput) or inputs[0].text.strip() != "/compact":
        return False
    return all(
        isinstance(m.resource, protocol.CommandResource) and m.resource.name == "compact" for m in inputs[0].mentions
    )
