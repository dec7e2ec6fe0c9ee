"""A tiny stdio MCP server for the hosted MCP tools' error cases (tests/test_toolhost_mcp.py), stdlib only.

Tools: `echo {text}`, `sleep {seconds}` (answers after them), `gate` (answers once `open` is called, or after 10 s:
it needs two calls in flight at once), `open`, `fail` (an `isError` result), `resource` (an embedded text
resource), `die` (exits without answering), `dotted.name` (a name bb maps to `dotted_name`), `meta` (answers the
request's `_meta` as JSON text: the trace context a traced call carries) and one whose name is too long to map. Each call runs in a thread of its own; the server exits when its stdin closes. `--broken` writes a reason to stderr and exits before answering `initialize`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

LONG = "x" * 70
TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "sleep", "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}}},
    {"name": "gate", "inputSchema": {"type": "object"}},
    {"name": "open", "inputSchema": {"type": "object"}},
    {"name": "fail", "description": "always fails", "inputSchema": {"type": "object"}},
    {"name": "resource", "inputSchema": {"type": "object"}},
    {"name": "die", "inputSchema": {"type": "object"}},
    {"name": "dotted.name", "inputSchema": {"type": "object"}},
    {"name": "meta", "inputSchema": {"type": "object"}},
    {"name": LONG, "inputSchema": {"type": "object"}},
]
_lock = threading.Lock()
_opened = threading.Event()


def send(message: dict[str, Any]) -> None:
    with _lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def call(request_id: Any, name: str, arguments: dict[str, Any], meta: Any = None) -> None:
    content: list[dict[str, Any]] = []
    error = False
    if name == "echo":
        content = [{"type": "text", "text": str(arguments.get("text", ""))}]
    elif name == "sleep":
        time.sleep(float(arguments.get("seconds", 0)))
        content = [{"type": "text", "text": "slept"}]
    elif name == "gate":
        content = [{"type": "text", "text": "opened" if _opened.wait(10) else "still closed"}]
    elif name == "open":
        _opened.set()
        content = [{"type": "text", "text": "open"}]
    elif name == "fail":
        content, error = [{"type": "text", "text": "it went wrong"}], True
    elif name == "meta":
        content = [{"type": "text", "text": json.dumps(meta or {})}]
    elif name == "resource":
        content = [{"type": "resource", "resource": {"uri": "mem://note", "mimeType": "text/plain", "text": "noted"}}]
    elif name == "die":
        sys.stderr.write("dying as asked\n")
        sys.stderr.flush()
        os._exit(3)
    send({"jsonrpc": "2.0", "id": request_id, "result": {"content": content, "isError": error}})


def main() -> None:
    if "--broken" in sys.argv:
        sys.stderr.write("cannot open the database: no such file\n")
        sys.exit(2)
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "tiny", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            params = message["params"]
            arguments = params.get("arguments") or {}
            meta = params.get("_meta")
            threading.Thread(target=call, args=(request_id, params["name"], arguments, meta), daemon=True).start()
            continue
        elif method == "ping":
            result = {}
        else:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "method not found"}})
            continue
        send({"jsonrpc": "2.0", "id": request_id, "result": result})


if __name__ == "__main__":
    main()
