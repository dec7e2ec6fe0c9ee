"""What the bridge hands the agent, and what it does for it: prompt content and the client's file methods.

ACP agents may ask their client to read and write text files (`fs/read_text_file`, `fs/write_text_file`); the
bridge advertises both and keeps writes inside the workspace roots unless the thread runs with `full` permission.
"""

from __future__ import annotations

import base64
import mimetypes
import os
from dataclasses import dataclass
from typing import Any

import trio
from msgspec import UNSET

from bbridge.wire import protocol, rpc
from bridges.acp.wire import JsonObject, non_negative_int

INTERNAL_ERROR = -32603


@dataclass(frozen=True)
class Policy:
    """`full` allows every permission itself; the other modes ask the runtime and keep writes inside the roots."""

    ask: bool
    write_roots: tuple[str, ...]

    def may_write(self, path: str) -> bool:
        if not self.ask:
            return True
        target = os.path.realpath(path)
        roots = [os.path.realpath(root) for root in self.write_roots]
        return any(os.path.commonpath([target, root]) == root for root in roots)


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


async def read_text_file(params: Any) -> JsonObject:
    """`fs/read_text_file`: the file, or its `limit` lines from 1-based `line`."""
    if not isinstance(params, dict) or not isinstance(params.get("path"), str):
        raise rpc.RpcError(rpc.INVALID_PARAMS, "Invalid fs/read_text_file params")
    try:
        text = await trio.Path(params["path"]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise rpc.RpcError(INTERNAL_ERROR, str(exc)) from None
    line, limit = non_negative_int(params.get("line")), non_negative_int(params.get("limit"))
    if line is None and limit is None:
        return {"content": text}
    lines = text.split("\n")
    start = 0 if line is None else max(0, line - 1)
    return {"content": "\n".join(lines[start : None if limit is None else start + limit])}


async def write_text_file(params: Any, policy: Policy) -> tuple[str, str | None, str]:
    """`fs/write_text_file` under the policy: the path, its previous text (None for a new file) and the new text."""
    if (
        not isinstance(params, dict)
        or not isinstance(params.get("path"), str)
        or not isinstance(params.get("content"), str)
    ):
        raise rpc.RpcError(rpc.INVALID_PARAMS, "Invalid fs/write_text_file params")
    path, text = params["path"], params["content"]
    if not policy.may_write(path):
        message = f"File writes outside the workspace are denied by BB's accept-edits permission mode: {path}"
        raise rpc.RpcError(rpc.BRIDGE_ERROR, message)
    target = trio.Path(path)
    try:
        old: str | None = await target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        old = None
    try:
        await target.parent.mkdir(parents=True, exist_ok=True)
        await target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise rpc.RpcError(INTERNAL_ERROR, str(exc)) from None
    return path, old, text
