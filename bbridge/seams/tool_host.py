"""What the daemon asks of the tools it hosts (issue 35), as a protocol: the tool host lives above the daemon
(`bbridge.toolhost`), which only knows this shape.

The daemon adds `offered()` to each construction's `dynamicTools` (after the client's own, which shadow a hosted
tool of the same name, and filtered by `options.tools`), checks a call's arguments as it does any declared
tool's, then hands the call to `call`. A person's approval (`policy = "ask"`) goes through `HostedCall.ask`, a
pending `interaction/request` like a bridge's; the daemon cancels a running call at the thread's stop, release
or its bridge's exit (the host then stops whatever it runs before returning).

A construction may bring tools for its thread alone (`options.tools.mcpServers`): the daemon hands that list to
`open_thread`, opaque, before the bridge is asked, and adds the tools it returns to the construction's
`dynamicTools` like the offered ones; `forget` (the thread let go) ends them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from bbridge.seams.telemetry import NO_SPAN, Span
from bbridge.wire import protocol

Decision = Literal["allow_once", "allow_for_session", "deny"]


class ThreadToolsRefused(Exception):
    """`open_thread` refused what the construction brought (not allowed, malformed): the client's request fails
    with -32602 and this message, which says what to do."""


@dataclass(frozen=True)
class Approval:
    """A person's (or the timeout policy's) answer to an `ask`; `by` names who made it."""

    decision: Decision
    by: str


@dataclass(frozen=True)
class HostedCall:
    """One `item/tool/call` for a hosted tool, its arguments already checked against the tool's schema."""

    thread_id: str
    provider_id: str
    turn_id: str | None
    call_id: str
    tool: str
    arguments: dict[str, Any]
    cwd: str | None  # the thread's working directory (its latest construction's `cwd`)
    # Opens a pending approval (payload `approval`, subject `tool_use`) with `details` beside the payload, and
    # waits for its resolution; the timeout policy's answer is a deny.
    ask: Callable[[dict[str, Any]], Awaitable[Approval]]
    # The calling thread's latest construction's or turn's `options` as its client sent them, less the daemon's
    # `tools` (its model, reasoning level, permission policy: what a tool running agents of its own inherits); None
    # when none was sent.
    options: dict[str, Any] | None = None
    hidden: bool = False  # the calling thread is hidden (a room's own: `thread/start {hidden}`)
    # The call's `bbridge.tool_call` span (`seams/telemetry.py`; `NO_SPAN` untraced): the host notes its decision, who
    # made it and how the run ended, and hands the tool its trace context (`TRACEPARENT`, an MCP request's `_meta`)
    span: Span = NO_SPAN


class ToolHost(Protocol):
    def offered(self) -> list[protocol.DynamicTool]:
        """Every hosted tool as an agent sees it, in composition order (first wins)."""
        ...

    async def open_thread(self, thread_id: str, brought: list[Any], cwd: str | None) -> list[protocol.DynamicTool]:
        """The tools of what a construction brought for its thread (`options.tools.mcpServers`, as the client sent
        them), replacing what an earlier construction of the thread brought; raises `ThreadToolsRefused`. A server
        that does not start is reported by the host, and the others serve."""
        ...

    async def call(self, call: HostedCall) -> dict[str, Any]:
        """The call's `ToolCallResult` (protocol.md §3.6.1); cancelled, nothing it started outlives it."""
        ...

    def forget(self, thread_id: str) -> None:
        """The thread was let go: its session grants (`allow_for_session`) end, and what it brought is stopped."""
        ...

    def report(self) -> dict[str, Any]:
        """For `daemon/status`'s `hostedTools`: the tools served, refused (with reasons) and shadowed."""
        ...
