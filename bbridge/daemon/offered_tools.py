"""The daemon's side of hosted tools (issue 35): which a thread gets, and its calls answered by the tool host.

The tool host (`tool_host.ToolHost`, implemented above the daemon) says which tools it serves. A construction
(`thread/start|resume|fork`) chooses among them with `options.tools = {include?, exclude?}`, which the daemon
takes out before the bridge sees it (`methods.outgoing`); the chosen tools, less any the client declares itself (its
own tool shadows a hosted one of the same name, each such shadowing reported once per daemon), are appended to
the construction's `dynamicTools` (`OfferedTools.for_construction`), so every bridge offers them as it offers a client's.
What a construction brings for its thread alone (`options.tools.mcpServers`) is handed to the host, opaque, once
the bridge is chosen (`OfferedTools.brought`): the tools it returns join the same list, shadowed the same way.

A bridge's `item/tool/call` for one of a thread's hosted tools, checked like any declared tool's, is answered
by the daemon (`Relays.hosted_call`, `relays.py`): no client is asked. The call runs in a cancel scope kept
on the thread's record (`threads.HostedRun`), which `thread/stop`, the thread's release and its bridge's exit
cancel; a cancelled call answers the bridge with a failed result saying why. The host's `ask` opens a pending
approval exactly like a bridge's: relayed, answerable by any client, resolved by the timeout policy as a deny.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

import msgspec
import structlog
from msgspec import UNSET

from bbridge.daemon.declared_tools import DeclarationError
from bbridge.seams.tool_host import ThreadToolsRefused
from bbridge.wire import client_api, protocol

if TYPE_CHECKING:
    from bbridge.seams.tool_host import ToolHost

log = structlog.get_logger("bbridge.daemon.offered_tools")

# A hosted tool with no presentation of its own is shown, when it asks, as a client tool is by the echo bridge.
DEFAULT_PRESENTATION: Final = {
    "label": {"pending": "Calling tool", "completed": "Called tool"},
    "icon": {"glyph": "Wrench"},
}


def _names(tools: list[protocol.DynamicTool]) -> str:
    return ", ".join(f'"{tool.name}"' for tool in tools) or "none"


def chosen(offered: list[protocol.DynamicTool], choice: client_api.ToolChoice | None) -> list[protocol.DynamicTool]:
    """The hosted tools a construction's choice keeps (all when it made none); a name no hosted tool has is
    refused, naming the hosted tools."""
    if choice is None:
        return list(offered)
    include = [] if choice.include is UNSET else choice.include
    exclude = [] if choice.exclude is UNSET else choice.exclude
    known = {tool.name for tool in offered}
    unknown = [name for name in (*include, *exclude) if name not in known]
    if unknown:
        listed = ", ".join(f'"{name}"' for name in dict.fromkeys(unknown))
        raise DeclarationError(
            f"options.tools names {listed}, which the daemon does not host (hosted: {_names(offered)}). Name only "
            "hosted tools there (`bbridge tools check` lists them); declare a tool of your own in dynamicTools"
        )
    kept = [tool for tool in offered if choice.include is UNSET or tool.name in include]
    return [tool for tool in kept if tool.name not in exclude]


class OfferedTools:
    """The tool host, if any, and the shadowings reported: what a construction adds, and what status shows."""

    def __init__(self, host: ToolHost | None) -> None:
        self.host = host
        self.shadowings: dict[str, dict[str, Any]] = {}  # tool name → its first shadowing by a client's tool

    def for_construction(
        self, thread_id: str | None, client: str, choice: client_api.ToolChoice | None, declared: set[str]
    ) -> list[protocol.DynamicTool]:
        """The hosted tools a construction adds to its `dynamicTools`: its choice among the offered ones, less
        those the client declares itself (each such shadowing reported once for the daemon's life)."""
        offered = self.host.offered() if self.host is not None else []
        return self._unshadowed(chosen(offered, choice), thread_id, client, declared)

    async def brought(
        self,
        thread_id: str,
        client: str,
        choice: client_api.ToolChoice | None,
        declared: set[str],
        cwd: str | None,
    ) -> list[protocol.DynamicTool]:
        """The tools of the MCP servers the construction brings for its thread (none: what an earlier one brought
        ends), less those the client declares itself; refused (DeclarationError) when the daemon hosts nothing
        or the host refuses them."""
        servers = [] if choice is None or choice.mcpServers is UNSET else msgspec.to_builtins(choice.mcpServers)
        if self.host is None:
            if servers:
                raise DeclarationError(
                    "options.tools.mcpServers: this daemon does not start a client's MCP servers (it would run any "
                    "command a client names); start it with `bbridge serve --allow-client-mcp-servers`, or "
                    "declare the tools in dynamicTools and answer their calls"
                )
            return []
        try:
            tools = await self.host.open_thread(thread_id, servers, cwd)
        except ThreadToolsRefused as exc:
            raise DeclarationError(f"options.tools.mcpServers: {exc}") from None
        return self._unshadowed(tools, thread_id, client, declared)

    def _unshadowed(
        self, tools: list[protocol.DynamicTool], thread_id: str | None, client: str, declared: set[str]
    ) -> list[protocol.DynamicTool]:
        for tool in tools:
            if tool.name in declared and tool.name not in self.shadowings:
                self.shadowings[tool.name] = {
                    "tool": tool.name,
                    "threadId": thread_id,
                    "client": client,
                    "at": time.time(),
                }
                log.warning(
                    "a client's own tool shadows a hosted tool of the same name (reported once per tool)",
                    tool=tool.name,
                    threadId=thread_id,
                    client=client,
                )
        return [tool for tool in tools if tool.name not in declared]

    def status(self) -> dict[str, Any]:
        """`daemon/status`'s `hostedTools`: the host's report, and the hosted tools client declarations shadowed."""
        report = self.host.report() if self.host is not None else {}
        return {**report, "shadowedByClients": list(self.shadowings.values())}

    def presentation(self, tool: str) -> Any:
        """The tool's presentation as its offer gives it (a default one when it gives none)."""
        offered = self.host.offered() if self.host is not None else []
        found = next((entry for entry in offered if entry.name == tool), None)
        if found is None or found.presentation is UNSET:
            return DEFAULT_PRESENTATION
        return msgspec.to_builtins(found.presentation)
