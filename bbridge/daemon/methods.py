"""What the daemon does around each client method it forwards to a bridge: one `MethodRule` per method, in
`METHODS`, read by `Daemon._forward` (`runtime.py`) with a `RuleContext`: what a rule may use.

A forwarded request goes: the rule's `prepare` (before a bridge is chosen: a refusal here starts nothing) →
the provider (`providerId`, else the thread's record) and its ready bridge → the capability check → for a request
that names a thread, its provider thread id filled in and the rule's `turn_field` mapped back to the provider's
turn id, then the rule's `before` → the bridge. Its answer runs `after_result` in the bridge's reader, in order
with the bridge's notifications (a release is in place before a resume's first events; a construction's
identity is known before its first turn's); a failure runs `after_error`, which may answer in its place.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import structlog

from bbridge.daemon.bridge import BridgeProcess
from bbridge.daemon.declared_tools import DeclarationError, Declarations, Tool
from bbridge.daemon.delivery import ThreadParams, decode
from bbridge.daemon.fanout import ClientSink, Fanout
from bbridge.daemon.inputs import Inputs
from bbridge.daemon.offered_tools import OfferedTools, take_choice
from bbridge.daemon.threads import Cause, ThreadRegistry
from bbridge.daemon.tracker import Tracker
from bbridge.wire import errors, protocol, rpc
from bbridge.wire.client_api import ToolChoice

log = structlog.get_logger("bbridge.daemon.methods")

THREAD_CREATION_TIMEOUT_S = 120.0
DAEMON_MADE: Final = frozenset({errors.BRIDGE_EXITED, errors.BRIDGE_TIMEOUT})  # a forwarded request's own failures


@dataclass(frozen=True)
class RuleContext:
    """What a method rule may use: the thread records, the tool declarations and offers, the open work, the
    kept inputs, the clients' names, and two actions of other parts (a thread's pending requests resolved before
    its stop; a thread let go from its bridge)."""

    registry: ThreadRegistry
    declarations: Declarations
    offered: OfferedTools
    tracker: Tracker
    inputs: Inputs
    fanout: Fanout
    resolve_thread: Callable[[str, str], Awaitable[None]]  # `Relays.resolve_thread`
    release: Callable[[str, BridgeProcess, Cause], object]  # `Supervisor.release`


@dataclass
class Call:
    """One forwarded request, as its rule's hooks share it."""

    client: ClientSink
    method: str
    params: dict[str, Any]
    thread_id: str | None
    bridge: BridgeProcess | None = None  # chosen after `prepare`
    declared: dict[str, Tool] | None = None  # a construction's checked dynamicTools, the hosted ones added
    hosted: frozenset[str] = frozenset()  # a construction's hosted tools (among `declared`)
    choice: ToolChoice | None = None  # a construction's `options.tools`, taken out of its params
    open_before: list[str] = field(default_factory=list)  # an interrupt's open turns, before anything is resolved
    sent_at: float = field(default_factory=time.time)  # when the daemon received it (wall clock, for clients)


class MethodRule:
    """A forwarded method the daemon only routes (and fills the thread's `providerThreadId` in)."""

    keeps_provider_id = False  # the method's own params carry `providerId` (one bridge may serve several)
    constructs = False  # a construction: it names its own provider thread, and records the thread
    turn_field: str | None = None  # a bb turn id in the params, sent as the provider's
    min_timeout_s = 0.0  # the request's timeout is at least this

    async def prepare(self, ctx: RuleContext, call: Call) -> None:
        """Before a bridge is chosen."""

    async def before(self, ctx: RuleContext, call: Call) -> None:
        """A request naming a thread, its bridge chosen, just before it is sent."""

    def after_result(self, ctx: RuleContext, call: Call, raw: msgspec.Raw) -> None:
        """A request naming a thread, answered: in the bridge's reader, before its later notifications."""

    def after_error(self, ctx: RuleContext, call: Call, exc: rpc.RpcError) -> Any:
        """A failed request: an answer in the error's place, or None to pass the error on."""
        return None


class Maintenance(MethodRule):
    """`provider/*` maintenance: its params' `providerId` is the bridge's to read, never stripped."""

    keeps_provider_id = True


class Construction(MethodRule):
    """`thread/start`, `thread/resume`, `thread/fork`: declared tools checked and the chosen hosted tools added
    (`options.tools` taken out: bridges do not know it) before the bridge is asked; once it is chosen, the tools of
    the MCP servers the construction brings for its thread (`options.tools.mcpServers`) added too, then the thread
    recorded (its provider, owner and bridge) before it is sent; its tools, `cwd` and provider thread id kept from
    the answer. A failed construction stops the servers it brought."""

    constructs = True

    def __init__(self, min_timeout_s: float = 0.0) -> None:
        self.min_timeout_s = min_timeout_s

    async def prepare(self, ctx: RuleContext, call: Call) -> None:
        try:
            call.choice = take_choice(call.params)
            if call.thread_id is None and call.choice is not None and call.choice.mcpServers:
                raise DeclarationError("options.tools.mcpServers needs the construction's threadId")
            call.declared = await ctx.declarations.declare(call.params.get("dynamicTools"))
            hosted = ctx.offered.for_construction(call.thread_id, call.client.name, call.choice, set(call.declared))
            await self._add(ctx, call, hosted)
        except DeclarationError as exc:
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"{call.method}: {exc}") from None

    async def before(self, ctx: RuleContext, call: Call) -> None:
        assert call.thread_id is not None and call.bridge is not None
        cwd = call.params.get("cwd")
        try:
            brought = await ctx.offered.brought(
                call.thread_id,
                call.client.name,
                call.choice,
                set(call.declared or {}) - call.hosted,
                cwd if isinstance(cwd, str) else None,
            )
            await self._add(ctx, call, brought)
        except DeclarationError as exc:
            self._stop_brought(ctx, call)
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"{call.method}: {exc}") from None
        ctx.registry.construct(call.thread_id, call.bridge.provider_id, call.client)
        call.bridge.serves(call.thread_id)
        supplied = call.params.get("providerThreadId")
        if call.method == "thread/resume" and isinstance(supplied, str) and supplied:
            ctx.registry.identify(call.thread_id, supplied)  # recorded before sending (protocol.md §3.3.6)

    @staticmethod
    async def _add(ctx: RuleContext, call: Call, tools: list[protocol.DynamicTool]) -> None:
        """Hosted tools appended to the construction's `dynamicTools`, checked as declared ones."""
        if not tools:
            return
        offered = msgspec.to_builtins(tools)
        call.declared = (call.declared or {}) | await ctx.declarations.declare(offered)
        call.params["dynamicTools"] = [*(call.params.get("dynamicTools") or []), *offered]
        call.hosted |= {tool.name for tool in tools}

    @staticmethod
    def _stop_brought(ctx: RuleContext, call: Call) -> None:
        host, choice = ctx.offered.host, call.choice
        if host is not None and call.thread_id is not None and choice is not None and choice.mcpServers:
            host.forget(call.thread_id)

    def after_result(self, ctx: RuleContext, call: Call, raw: msgspec.Raw) -> None:
        assert call.thread_id is not None
        result = decode(raw, ThreadParams)
        cwd = call.params.get("cwd")
        ctx.registry.constructed(
            call.thread_id,
            call.declared,
            None if result is None else result.providerThreadId,
            call.hosted,
            cwd if isinstance(cwd, str) else None,
        )

    def after_error(self, ctx: RuleContext, call: Call, exc: rpc.RpcError) -> Any:
        self._stop_brought(ctx, call)
        return None


class TurnInput(MethodRule):
    """`turn/start` and `turn/steer`: an input the bridge accepted is kept as thread state (`inputs.py`: the
    canonical events keep no prompt text); a refused one is not."""

    def after_result(self, ctx: RuleContext, call: Call, raw: msgspec.Raw) -> None:
        assert call.thread_id is not None and call.bridge is not None
        client = ctx.fanout.signature(call.client)
        ctx.inputs.add(call.thread_id, call.bridge.provider_id, call.params, call.method, call.sent_at, client)


class TurnStart(TurnInput):
    """`turn/start`: the turn-start watchdog is armed as it is sent, disarmed if it fails; kept as `TurnInput`."""

    async def before(self, ctx: RuleContext, call: Call) -> None:
        assert call.thread_id is not None and call.bridge is not None
        call.bridge.turn_dispatched(call.thread_id)

    def after_error(self, ctx: RuleContext, call: Call, exc: rpc.RpcError) -> Any:
        if call.thread_id is not None and call.bridge is not None:
            call.bridge.dispatch_failed(call.thread_id)
        return None


class TurnSteer(TurnInput):
    turn_field = "expectedTurnId"


class ThreadStop(MethodRule):
    """`thread/stop`: nothing the thread waits on outlives its stop; a release answered lets the thread go
    (`ThreadRegistry.release`); an interrupt refused because its turn had meanwhile ended succeeds."""

    turn_field = "activeTurnId"

    async def prepare(self, ctx: RuleContext, call: Call) -> None:
        if call.thread_id is not None and call.params.get("intent") == "interrupt":
            call.open_before = ctx.tracker.open_turns(call.thread_id)  # before requests are resolved

    async def before(self, ctx: RuleContext, call: Call) -> None:
        assert call.thread_id is not None
        await ctx.resolve_thread(call.thread_id, "the thread was stopped")

    def after_result(self, ctx: RuleContext, call: Call, raw: msgspec.Raw) -> None:
        if call.params.get("intent") == "release":
            assert call.thread_id is not None and call.bridge is not None
            ctx.release(call.thread_id, call.bridge, Cause.RELEASED)

    def after_error(self, ctx: RuleContext, call: Call, exc: rpc.RpcError) -> Any:
        """An interrupt the bridge refused (`no active turn`) after the turns open at the stop settled meanwhile
        (a declined approval ended the turn first): the thread is stopped, so is the client's stop."""
        bridge, thread_id = call.bridge, call.thread_id
        if not call.open_before or bridge is None or thread_id is None:
            return None
        if exc.code in DAEMON_MADE or bridge.state != "ready":
            return None  # the bridge did not answer (exit, timeout): the turns were settled by the daemon, not it
        if set(call.open_before) & set(ctx.tracker.open_turns(thread_id)):
            return None
        log.info(
            "an interrupt was refused after the turn had ended; the stop succeeds",
            providerId=bridge.provider_id,
            threadId=thread_id,
            turns=call.open_before,
            error=exc.message,
        )
        return {"turnAlreadyEnded": True}


FORWARDED: Final = frozenset(protocol.RUNTIME_REQUESTS) - {"initialize"}  # every bridge method but the handshake
_ROUTED: Final = MethodRule()
RULES: Final[dict[str, MethodRule]] = {
    "thread/start": Construction(THREAD_CREATION_TIMEOUT_S),
    "thread/resume": Construction(),
    "thread/fork": Construction(THREAD_CREATION_TIMEOUT_S),
    "turn/start": TurnStart(),
    "turn/steer": TurnSteer(),
    "thread/stop": ThreadStop(),
    "provider/health": Maintenance(),
    "provider/usage": Maintenance(),
    "provider/installation/status": Maintenance(),
    "provider/installation/run": Maintenance(),
}
METHODS: Final[dict[str, MethodRule]] = {method: RULES.get(method, _ROUTED) for method in sorted(FORWARDED)}
