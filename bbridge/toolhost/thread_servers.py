"""MCP servers a construction brings for its thread alone (issue 36: an editor's ACP `session/new` `mcpServers`,
passed as `options.tools.mcpServers`).

Starting a command a client names is running code for any client, so it is refused unless the daemon allows it
(`bbridge serve --allow-client-mcp-servers`; `bbridge acp`'s own daemon does). Each thread's servers run as one
`mcp_servers` context in the host's nursery (`serving`), in the thread's `cwd`, with the client's `env` over the
few variables the SDK passes on; their tools are offered to that thread only, as `NAME__tool` (the name mapped
to bb's rule), with policy `allow` (the client vouches for its own servers, as for the tools it declares and
answers itself; `[[tool_rules]]` still apply). A daemon-wide tool of the same name shadows one (reported once per
name). A server that does not start is logged and listed in `daemon/status` (`hostedTools.threads`); the
construction goes on without its tools. A later construction of the thread replaces its servers; its release
(`forget`) and the host's exit stop them, nothing left running.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import structlog
import trio

from bbridge.config_file import Refusal
from bbridge.seams.tool_host import ThreadToolsRefused
from bbridge.toolhost.declarations import check_env
from bbridge.toolhost.mcp import McpServerConfig, McpServers, McpTool, mcp_servers

log = structlog.get_logger("bbridge.toolhost")

NOT_ALLOWED: Final = (
    "this daemon does not start a client's MCP servers (that runs any command a client names); start it with "
    "`bbridge serve --allow-client-mcp-servers` (`bbridge acp` does for its own daemon), or declare the tools in "
    "dynamicTools and answer their calls"
)
_NOT_NAME = re.compile(r"[^A-Za-z0-9-]+")  # a run of these becomes one `_`, so a mapped name never holds `__`
NAME_CHARS: Final = 32


@dataclass
class _Brought:
    """One thread's servers: the scope holding them open, the tools they serve and what was refused."""

    servers: list[str]
    scope: trio.CancelScope | None = None
    tools: dict[str, McpTool] = field(default_factory=dict)
    refused: list[Refusal] = field(default_factory=list)
    shadowed: list[str] = field(default_factory=list)


def server_name(name: str) -> str | None:
    """An MCP server's name as bb's tool names can hold it (`My server` → `My_server`); None when nothing is left."""
    mapped = _NOT_NAME.sub("_", name).strip("_")[:NAME_CHARS]
    return mapped or None


def configs_of(thread_id: str, brought: list[Any], cwd: str | None) -> list[McpServerConfig]:
    """The servers a construction brings, as the client API shapes them (`client_api.ThreadMcpServer`, already
    checked by the daemon); a name that maps to nothing or to another's, or a bad variable name, is refused."""
    configs: list[McpServerConfig] = []
    for index, entry in enumerate(brought):
        name = server_name(str(entry.get("name", "")))
        where = f"mcpServers[{index}] ({entry.get('name')!r})"
        if name is None:
            raise ThreadToolsRefused(f"{where}: a name needs a letter or digit (its tools are named NAME__tool)")
        if name in (config.name for config in configs):
            raise ThreadToolsRefused(f"{where}: maps to {name!r} like another server's name; give them distinct names")
        env = entry.get("env") or {}
        problem = check_env(list(env))
        if problem is not None:
            raise ThreadToolsRefused(f"{where}: env: {problem}")
        configs.append(
            McpServerConfig(
                name=name,
                source=f"thread {thread_id} {where}",
                command=list(entry["command"]),
                env=dict(env),
                policy="allow",
                cwd=cwd,
            )
        )
    return configs


class ThreadServers:
    """Every thread's own MCP servers, in one nursery (`serving`)."""

    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self._threads: dict[str, _Brought] = {}
        self._nursery: trio.Nursery | None = None
        self._shadowings: set[str] = set()  # names a daemon-wide tool shadowed (logged once each)

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """While inside, threads' servers can start; leaving stops every one (waiting for their processes)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield
            finally:
                self._nursery = None
                self._threads.clear()
                nursery.cancel_scope.cancel()

    async def open(self, thread_id: str, brought: list[Any], cwd: str | None, hosted: Collection[str]) -> list[McpTool]:
        """Start what the construction brings (replacing the thread's earlier servers), and return their tools
        that no daemon-wide tool (`hosted`) shadows."""
        if brought and not self.allowed:
            raise ThreadToolsRefused(NOT_ALLOWED)
        configs = configs_of(thread_id, brought, cwd)
        self.close(thread_id)
        if not configs:
            return []
        if self._nursery is None:
            raise ThreadToolsRefused("the tool host is not serving (the daemon is stopping); retry on a running one")
        record = _Brought([config.name for config in configs])
        record.scope, served = await self._nursery.start(self._hold, configs)
        self._threads[thread_id] = record
        record.refused = served.refused
        for refusal in served.refused:
            log.warning(
                "a thread's MCP server refused",
                threadId=thread_id,
                section=refusal.section,
                key=refusal.key,
                error=refusal.error,
            )
        for tool in served.tools:
            if tool.name not in hosted:
                record.tools[tool.name] = tool
                continue
            record.shadowed.append(tool.name)
            if tool.name not in self._shadowings:
                self._shadowings.add(tool.name)
                log.warning(
                    "a daemon-wide tool shadows a thread's MCP tool of the same name (reported once per tool)",
                    tool=tool.name,
                    threadId=thread_id,
                    source=tool.source,
                )
        return list(record.tools.values())

    @staticmethod
    async def _hold(
        configs: list[McpServerConfig],
        task_status: trio.TaskStatus[tuple[trio.CancelScope, McpServers]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """The thread's servers, held open until its scope is cancelled; a fault of the SDK itself refuses them
        all rather than ending the host."""
        started = False
        with trio.CancelScope() as scope:
            try:
                async with mcp_servers(configs) as served:
                    task_status.started((scope, served))
                    started = True
                    await trio.sleep_forever()
            except Exception as exc:
                log.warning("a thread's MCP servers failed", error=repr(exc), servers=[c.name for c in configs])
                if not started:
                    refused = [Refusal(f"mcp_servers.{c.name}", None, f"did not start: {exc!r}") for c in configs]
                    task_status.started((scope, McpServers([], refused)))

    def tool(self, thread_id: str, name: str) -> McpTool | None:
        record = self._threads.get(thread_id)
        return None if record is None else record.tools.get(name)

    def close(self, thread_id: str) -> None:
        """Stop the thread's servers (their processes end in the nursery, soon after)."""
        record = self._threads.pop(thread_id, None)
        if record is not None and record.scope is not None:
            record.scope.cancel()

    def report(self) -> list[dict[str, Any]]:
        """For `daemon/status`: each thread's servers, the tools they serve, those shadowed and what was refused."""
        return [
            {
                "threadId": thread_id,
                "servers": record.servers,
                "tools": list(record.tools),
                "shadowed": record.shadowed,
                "refused": [{"section": r.section, "key": r.key, "error": r.error} for r in record.refused],
            }
            for thread_id, record in self._threads.items()
        ]
