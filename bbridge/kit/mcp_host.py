"""The bridge's end of the `bb-bridge` MCP server: one per thread that declared dynamic tools.

An ACP agent launches the server named in `mcpServers` (`server_spec`: the stdio relay `mcp_relay.py` beside
this module), and the relay connects here; the pi bridge's generated extension connects the same way
(`bridges/pi/tools.py`). Here is a Unix socket (mode 0600) in a fresh 0700 temporary directory, so only this
user can reach it, and a per-thread random token the relay must present first (compared in constant time); a
wrong or missing token closes the connection unanswered. Nothing listens on TCP. Each accepted connection is
one MCP session spoken with the same `rpc.Connection` the rest of the bridge uses:

* `initialize` answers the client's protocol version when it is one we know (the subset below is the same in
  all of them), else the latest; capabilities `{tools: {listChanged: false}}`; `ping` answers `{}`;
  `notifications/initialized` is noted, `notifications/cancelled` cancels the call it names; any other request
  is `-32601`.
* `tools/list` lists the thread's declared tools (name, description, inputSchema — a schema that is not an
  object schema is offered as `{"type": "object"}`, as MCP requires; the runtime still validates arguments).
* `tools/call` of a declared tool goes to the runtime as `item/tool/call` (the session builds it) and the answer
  comes back as MCP content: `inputText` → `text`, a data-URL `inputImage` → `image`, any other image URL as
  text, `isError` = not `success`; a runtime error or an answer that is no tool result is an `isError` result
  naming the failure. An undeclared tool or arguments that are no object are `-32602` (MCP's protocol errors).

Why not the `mcp` SDK: it would add ~40 MB in 20 distributions (pydantic, anyio, starlette, uvicorn,
cryptography, …) and ~0.55 s / ~66 MB RSS of imports to each thread's server process, for five methods; the
stdlib relay starts in ~0.05 s at ~12 MB, and the bridge already has a JSON-RPC endpoint (docs/providers.md, ACP agents).

`close` (idempotent) stops listening, closes every connection (their relays then exit) and removes the socket
and its directory; the session calls it whenever it ends, and the serving task calls it when cancelled.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import structlog
import trio
from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.kit import mcp_relay
from bbridge.wire import interactions, protocol, rpc

log = structlog.get_logger("bbridge.kit")

JsonObject = dict[str, Any]

SERVER_NAME = "bb-bridge"
SERVER_INFO = {"name": SERVER_NAME, "version": "1.0.0"}
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
HELLO_TIMEOUT_S = 10.0
MAX_SOCKET_PATH = 100  # bytes: sun_path holds 108 on Linux, 104 on macOS, its NUL included
RELAY = str(Path(mcp_relay.__file__).resolve())
_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


@dataclass(frozen=True)
class Tool:
    """A tool the client declared on the thread's construction (protocol.md `DynamicTool`)."""

    name: str
    description: str
    input_schema: Any
    presentation: g.Presentation | None = None

    def listing(self) -> JsonObject:
        schema = self.input_schema
        if not (isinstance(schema, dict) and schema.get("type") == "object"):
            schema = {"type": "object"}
        return {"name": self.name, "description": self.description, "inputSchema": schema}


def declared_tools(dynamic_tools: Iterable[protocol.DynamicTool]) -> dict[str, Tool]:
    """The construction's tools by name (a later duplicate wins); nameless ones are not offered."""
    return {
        tool.name: Tool(
            tool.name,
            tool.description,
            tool.inputSchema,
            None if tool.presentation is UNSET else tool.presentation,
        )
        for tool in dynamic_tools
        if tool.name
    }


def tool_result(result: Any) -> JsonObject:
    """The runtime's `item/tool/call` result as an MCP `CallToolResult`."""
    try:
        answer = msgspec.convert(result, interactions.ToolCallResult)
    except msgspec.ValidationError as exc:
        return failure(f"The client answered the tool call with no valid tool result: {exc}")
    content: list[JsonObject] = []
    for item in answer.contentItems:
        if isinstance(item, interactions.InputText):
            content.append({"type": "text", "text": item.text})
        elif (data_url := _DATA_URL.fullmatch(item.imageUrl)) is not None:
            content.append({"type": "image", "data": data_url.group(2), "mimeType": data_url.group(1)})
        else:
            content.append({"type": "text", "text": item.imageUrl})
    return {"content": content, "isError": not answer.success}


def failure(message: str) -> JsonObject:
    return {"content": [{"type": "text", "text": message}], "isError": True}


ToolCaller = Callable[[str, Any], Awaitable[Any]]


class McpHost:
    """One thread's `bb-bridge` server: `await open()`, list `server_spec()`, run `serve()` in a task, `close()`.

    `call(tool, arguments)` relays a call to the runtime and returns its answer (raising `rpc.RpcError`).
    """

    def __init__(self, tools: Mapping[str, Tool], call: ToolCaller, *, thread_id: str | None = None) -> None:
        self.tools = dict(tools)
        self.call = call
        self.token = secrets.token_hex(32)
        self.directory: str | None = None
        self.path: str | None = None
        self.closed = False
        self._socket: trio.socket.SocketType | None = None
        self._scope = trio.CancelScope()
        self._log = log.bind(threadId=thread_id, mcpServer=SERVER_NAME)

    # -- lifecycle ------------------------------------------------------------

    async def open(self) -> None:
        """Create the directory (0700) and the listening socket in it (0600)."""
        self.directory = tempfile.mkdtemp(prefix="bb-acp-mcp-")
        path = os.path.join(self.directory, "mcp.sock")
        if len(path.encode()) > MAX_SOCKET_PATH:  # a long TMPDIR: a socket's path has room for ~100 bytes
            os.rmdir(self.directory)
            self.directory = tempfile.mkdtemp(prefix="bb-acp-mcp-", dir="/tmp")
            path = os.path.join(self.directory, "mcp.sock")
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket = sock
        try:
            await sock.bind(path)
            self.path = path
            os.chmod(path, 0o600)
            sock.listen(16)
        except BaseException:
            self.close()
            raise

    def server_spec(self) -> JsonObject:
        """The ACP `McpServer` (stdio form) that launches the relay toward this host."""
        assert self.path is not None
        return {
            "name": SERVER_NAME,
            "command": sys.executable,
            "args": ["-I", RELAY],
            "env": [
                {"name": mcp_relay.SOCKET_ENV, "value": self.path},
                {"name": mcp_relay.TOKEN_ENV, "value": self.token},
            ],
        }

    async def serve(self) -> None:
        """Accept relays until `close` (or cancellation); each connection is served in its own task."""
        try:
            with self._scope:
                assert self._socket is not None
                listener = trio.SocketListener(self._socket)
                async with trio.open_nursery() as nursery:
                    while True:
                        stream = await listener.accept()
                        nursery.start_soon(self._connection, stream)
        except (trio.ClosedResourceError, OSError) as exc:
            if not self.closed:
                self._log.warning("the bb-bridge MCP socket failed", error=str(exc))
        finally:
            self.close()

    def close(self) -> None:
        """Stop listening, end every connection, remove the socket and its directory (once)."""
        if self.closed:
            return
        self.closed = True
        self._scope.cancel()
        if self._socket is not None:
            self._socket.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- one relay ------------------------------------------------------------

    async def _connection(self, stream: trio.SocketStream) -> None:
        try:
            rest: bytes | None = None
            with trio.move_on_after(HELLO_TIMEOUT_S):
                rest = await self._hello(stream)
            if rest is None:
                self._log.warning("refused a bb-bridge MCP connection without this thread's token")
                return
            await stream.send_all(mcp_relay.ACK + b"\n")
            session = _Session(self)
            conn = rpc.Connection(
                stream,
                _Prefixed(stream, rest),
                name="bb-bridge-mcp",
                on_request=session.on_request,
                on_notifications=session.on_notifications,
                answer_junk=True,
                default_timeout=None,
            )
            await conn.run()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async def _hello(self, stream: trio.SocketStream) -> bytes | None:
        """The bytes after a valid hello line; None for a wrong token, a long line or an early close."""
        buffer = b""
        while b"\n" not in buffer:
            if len(buffer) > mcp_relay.MAX_HELLO_BYTES:
                return None
            data = await stream.receive_some(mcp_relay.MAX_HELLO_BYTES)
            if not data:
                return None
            buffer += data
        line, rest = buffer.split(b"\n", 1)
        expected = mcp_relay.HELLO + self.token.encode()
        return rest if hmac.compare_digest(line.rstrip(b"\r"), expected) else None

    # -- MCP ------------------------------------------------------------------

    async def handle(self, method: str, params: Any) -> Any:
        """One MCP request's result (raises `rpc.RpcError` for a protocol error)."""
        if method == "initialize":
            asked = params.get("protocolVersion") if isinstance(params, dict) else None
            return {
                "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": SERVER_INFO,
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [tool.listing() for tool in self.tools.values()]}
        if method == "tools/call":
            return await self._call(params)
        raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f"Method not found: {method}")

    async def _call(self, params: Any) -> JsonObject:
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(name, str) or name not in self.tools:
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"Unknown tool: {name}")
        arguments = params.get("arguments")
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict):
            raise rpc.RpcError(rpc.INVALID_PARAMS, f'Invalid arguments for tool "{name}": expected an object')
        try:
            result = await self.call(name, arguments)
        except rpc.RpcError as exc:
            self._log.warning("item/tool/call failed", tool=name, error=exc.message)
            return failure(exc.message or "Tool call failed")
        return tool_result(result)


class _Session:
    """One relay's MCP session: its in-flight calls, so `notifications/cancelled` can end one."""

    def __init__(self, host: McpHost) -> None:
        self.host = host
        self.inflight: dict[Any, trio.CancelScope] = {}

    async def on_request(self, request: rpc.Request) -> Any:
        params = msgspec.json.decode(request.params) if request.params is not None else None
        if request.method != "tools/call":
            return await self.host.handle(request.method, params)
        with trio.CancelScope() as scope:
            self.inflight[request.id] = scope
            try:
                return await self.host.handle(request.method, params)
            finally:
                self.inflight.pop(request.id, None)
        return failure("Tool call cancelled")

    async def on_notifications(self, batch: list[rpc.Notification]) -> None:
        for note in batch:
            if note.method != "notifications/cancelled" or note.params is None:
                continue
            with contextlib.suppress(msgspec.DecodeError):
                params = msgspec.json.decode(note.params)
                scope = self.inflight.get(params.get("requestId")) if isinstance(params, dict) else None
                if scope is not None:
                    scope.cancel()


class _Prefixed(trio.abc.ReceiveStream):
    """A receive stream that first yields bytes already read past the hello line."""

    def __init__(self, inner: trio.abc.ReceiveStream, head: bytes) -> None:
        self._inner = inner
        self._head = head

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._head:
            head, self._head = self._head, b""
            return head
        return await self._inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._inner.aclose()
