"""MCP servers hosted once for every agent (issue 35): the `[mcp_servers.NAME]` tables of `bbridge.toml`.

`mcp_servers(configs)` starts each server once, as a child process of its own session (argv, never a shell; its
stderr kept in a bounded tail, never on our stdout), initializes it, lists its tools and yields them as external
tools named `NAME__tool` for the tool host, which puts them under the same policy and audit as the rest. One MCP
session per server multiplexes concurrent calls. A server that cannot start or initialize is refused with its
reason and its stderr's tail, and the others serve; one that dies later fails its calls with an error naming it.
Leaving the context stops every server (stdin closed, then SIGTERM and SIGKILL to its process group).

Spoken with the official MCP Python SDK (`mcp`, pinned): the protocol's reference client, on anyio, which runs
under trio. Its import costs about 0.7 s and 40 MB of RSS (pydantic and friends), paid once by the daemon, and only
when a server is configured: it is imported inside `mcp_servers`, never by loading the configuration.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

import msgspec
import trio

from bbridge.config_file import Refusal
from bbridge.seams.tool_host import HostedCall
from bbridge.toolhost.declarations import (
    NAME,
    Policy,
    Presentation,
    check_command,
    check_env,
    check_schema,
    check_seconds,
    named_tables,
)

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

SEPARATOR = "__"  # between the server's name and its tool's: `everything__echo`
STDERR_TAIL_BYTES = 2048  # what is kept of a server's stderr, for the reasons given when it fails
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")


class McpServerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One `[mcp_servers.NAME]` table: how to start the server and how its tools are called."""

    name: str
    source: str
    command: list[str]  # argv: the first element is the program, run without a shell
    env: dict[str, str] = {}  # extra variables, over the inherited ones
    inherit_env: list[str] = []  # the daemon's variables passed on, beside the SDK's HOME LOGNAME PATH SHELL TERM USER
    policy: Policy = "ask"
    timeout_s: float = 60.0  # per call
    startup_timeout_s: float = 30.0  # to start, initialize and list the tools
    cwd: str | None = None


_FIELDS = {f.name: f for f in msgspec.structs.fields(McpServerConfig) if f.name not in ("name", "source")}


def _check_variables(env: dict[str, str]) -> str | None:
    return check_env(list(env))


_CHECKS: dict[str, Any] = {
    "command": check_command,
    "env": _check_variables,
    "inherit_env": check_env,
    "timeout_s": check_seconds,
    "startup_timeout_s": check_seconds,
}


def mcp_server_configs(tables: Any, source: str) -> tuple[list[McpServerConfig], list[Refusal]]:
    """The servers of the `mcp_servers` table (`source`: the file), and one refusal per bad key of each broken one."""
    if not isinstance(tables, dict):
        return [], [Refusal("mcp_servers", None, f"expected a table, got {type(tables).__name__}")]
    good, refused = named_tables(tables, "mcp_servers", _bad_name, _FIELDS, _CHECKS)
    return [
        McpServerConfig(name=name, source=f"{source} [{section}]", **values) for name, section, values in good
    ], refused


def _bad_name(name: str) -> str | None:
    if NAME.fullmatch(name) and SEPARATOR not in name:
        return None
    return f"bad server name (expected 1 to 64 of A-Z a-z 0-9 _ -, no {SEPARATOR!r})"


def tool_name(server: str, tool: str) -> str | None:
    """`SERVER__tool`, characters outside bb's rule replaced by `_`; None when it is longer than bb allows."""
    name = f"{server}{SEPARATOR}{_NOT_NAME.sub('_', tool)}"
    return name if tool and NAME.fullmatch(name) else None


class McpTool:
    """One tool of an MCP server as the tool host takes it (an external tool): offered as `name`, run by `invoke`."""

    presentation: Presentation | None = None

    def __init__(self, server: _Server, remote: str, name: str, description: str, schema: dict[str, Any]) -> None:
        self.name = name
        self.description = description
        self.schema = schema
        self.policy: Policy = server.config.policy
        self.source = f"{server.config.source} tool {remote!r}"
        self.remote = remote  # the tool's own name on its server
        self._server = server

    async def invoke(self, arguments: dict[str, Any], call: HostedCall | None = None) -> dict[str, Any]:
        """The call's ToolCallResult; a timeout, a dead server or a protocol error is a failed result naming it. The
        calling thread (`call`) is not the server's to know; its trace context is (the request's `_meta`)."""
        return await self._server.call(self.remote, arguments, call.span.carrier() if call is not None else {})


class McpServers(msgspec.Struct):
    """What `mcp_servers` yields: the tools of the servers that started, and what was refused (servers, tools)."""

    tools: list[McpTool]
    refused: list[Refusal]


@asynccontextmanager
async def mcp_servers(configs: Sequence[McpServerConfig]) -> AsyncIterator[McpServers]:
    """Start every server at once (each bounded by its `startup_timeout_s`); stop them all on leaving."""
    found = McpServers([], [])
    if not configs:
        yield found
        return
    servers = [_Server(config) for config in configs]
    async with trio.open_nursery() as nursery:
        for server in servers:
            nursery.start_soon(server.run)
        for server in servers:
            await server.ready.wait()
            found.tools.extend(server.tools)
            found.refused.extend(server.refused)
        try:
            yield found
        finally:
            nursery.cancel_scope.cancel()


class _Server:
    """One server process and its MCP session, from start to stop."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.section = f"mcp_servers.{config.name}"
        self.ready = trio.Event()  # set once started (tools listed) or refused
        self.tools: list[McpTool] = []
        self.refused: list[Refusal] = []
        self.session: ClientSession | None = None
        self._stderr = bytearray()
        self._stderr_closed = trio.Event()
        self.ended = "is not running"  # why calls fail once the session is gone

    async def run(self) -> None:
        """Start, initialize, list; then hold the session open until cancelled (the context's exit)."""
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        config = self.config
        inherited = {name: os.environ[name] for name in config.inherit_env if name in os.environ}
        program, *args = config.command
        parameters = StdioServerParameters(command=program, args=args, env=inherited | config.env, cwd=config.cwd)
        read_end, write_end = os.pipe()
        errlog = os.fdopen(write_end, "w")
        failure: str | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_stderr, read_end)
                with trio.CancelScope(deadline=trio.current_time() + config.startup_timeout_s) as startup:
                    try:
                        async with stdio_client(parameters, errlog=errlog) as (read, write):
                            errlog.close()  # the child has its copy: its exit ends our reading
                            async with ClientSession(read, write) as session:
                                await session.initialize()
                                await self._list(session)
                                startup.deadline = math.inf
                                self.session = session
                                self.ready.set()
                                await trio.sleep_forever()
                    except Exception as exc:
                        failure = _reason(exc)
                if startup.cancelled_caught:
                    failure = f"no answer within {config.startup_timeout_s:g} s (startup_timeout_s)"
                if failure is not None:
                    await self._fail(failure)
                nursery.cancel_scope.cancel()
        finally:
            errlog.close()
            self.session = None
            self.ready.set()

    async def _keep_stderr(self, fd: int) -> None:
        """The server's stderr, read to its end; only its last `STDERR_TAIL_BYTES` are kept."""
        try:
            async with trio.lowlevel.FdStream(fd) as stream:
                while chunk := await stream.receive_some():
                    self._stderr += chunk
                    del self._stderr[:-STDERR_TAIL_BYTES]
        finally:
            self._stderr_closed.set()

    async def _list(self, session: ClientSession) -> None:
        from mcp_types import PaginatedRequestParams

        cursor: str | None = None
        taken: set[str] = set()
        for _ in range(1000):  # pages: bounded against a server whose cursor never ends
            listed = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            for tool in listed.tools:
                self._add(tool.name, tool.description or tool.title or "", tool.input_schema, taken)
            cursor = listed.next_cursor
            if not cursor:
                return

    def _add(self, remote: str, description: str, schema: dict[str, Any], taken: set[str]) -> None:
        name = tool_name(self.config.name, remote)
        where = f"tool {remote!r}"
        problem = check_schema(schema)
        if name is None:
            self.refused.append(Refusal(self.section, where, "name cannot be mapped to at most 64 of A-Z a-z 0-9 _ -"))
        elif name in taken:
            self.refused.append(
                Refusal(self.section, where, f"maps to {name!r}, already taken by another of its tools")
            )
        elif problem is not None:
            self.refused.append(Refusal(self.section, where, f"inputSchema: {problem}"))
        else:
            taken.add(name)
            self.tools.append(McpTool(self, remote, name, description, schema))

    async def _fail(self, reason: str) -> None:
        """Refuse the server when it has not started, else end it; its stderr's tail (read to its end, briefly)
        beside the reason."""
        with trio.move_on_after(1):
            await self._stderr_closed.wait()
        if self.ready.is_set():
            self.ended = f"stopped: {reason}{self._tail()}"
        else:
            self.tools.clear()
            self.refused.append(Refusal(self.section, None, f"did not start: {reason}{self._tail()}"))

    def _tail(self) -> str:
        text = self._stderr.decode(errors="replace").strip()
        return f"; its stderr ends: {text[-500:]}" if text else ""

    async def call(self, remote: str, arguments: dict[str, Any], trace: dict[str, str] | None = None) -> dict[str, Any]:
        """`tools/call`; `trace`, the call's W3C trace context, goes in the request's `_meta` (`traceparent`,
        `tracestate`: SEP-414's keys)."""
        name = self.config.name
        session = self.session
        if session is None:
            return _failed(f"MCP server {name!r} {self.ended}; restart the daemon (bbridge tools check tests it)")
        with trio.move_on_after(self.config.timeout_s):
            try:
                result = await session.call_tool(remote, arguments, meta=cast(Any, trace) or None)
            except Exception as exc:
                return _failed(
                    f"MCP server {name!r} failed the call of {remote!r}: {_reason(exc)}{self._tail()}; if it has "
                    "exited, restart the daemon to restart it (bbridge tools check tests it)"
                )
            return tool_call_result(result.model_dump(mode="json", by_alias=True))
        return _failed(f"MCP server {name!r} did not answer {remote!r} within {self.config.timeout_s:g} s (timeout_s)")


def tool_call_result(result: dict[str, Any]) -> dict[str, Any]:
    """An MCP `CallToolResult` (as JSON) as the bridge protocol's ToolCallResult: text, images as data: URLs, the
    text of embedded resources; other content is described in a line of text."""
    items = [_item(content) for content in result.get("content") or []]
    if not items and result.get("structuredContent") is not None:
        items.append(_text(msgspec.json.encode(result["structuredContent"]).decode()))
    return {"success": not result.get("isError"), "contentItems": items}


def _item(content: dict[str, Any]) -> dict[str, Any]:
    kind = content.get("type")
    if kind == "text":
        return _text(str(content.get("text", "")))
    if kind == "image":
        return {"type": "inputImage", "imageUrl": f"data:{content.get('mimeType')};base64,{content.get('data')}"}
    if kind == "resource":
        resource = content.get("resource") or {}
        if "text" in resource:
            return _text(str(resource["text"]))
        mime = str(resource.get("mimeType") or "")
        if mime.startswith("image/") and "blob" in resource:
            return {"type": "inputImage", "imageUrl": f"data:{mime};base64,{resource['blob']}"}
        return _text(f"[resource {resource.get('uri')} ({mime or 'binary'}), not shown]")
    if kind == "resource_link":
        return _text(f"[resource link {content.get('name')}: {content.get('uri')}]")
    return _text(f"[{kind} content ({content.get('mimeType', 'no type')}), not shown]")


def _text(text: str) -> dict[str, Any]:
    return {"type": "inputText", "text": text}


def _failed(message: str) -> dict[str, Any]:
    return {"success": False, "contentItems": [_text(message)]}


def _reason(exc: BaseException) -> str:
    """An exception's message, a group's leaves joined (the SDK's task groups wrap what they raise)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(leaf) for leaf in exc.exceptions)
    return str(exc) or type(exc).__name__
