"""The client's file methods an ACP agent may call: `fs/read_text_file` and `fs/write_text_file`.

The bridge advertises both and keeps writes inside the workspace roots unless the thread runs with `full`
permission (`approvals.Policy`).
"""

from __future__ import annotations

from typing import Any

import trio

from bbridge.wire import rpc
from bridges.acp.approvals import Policy
from bridges.acp.messages import JsonObject, non_negative_int

INTERNAL_ERROR = -32603


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
