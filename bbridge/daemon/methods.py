"""What the daemon does around each client method it forwards to a bridge: one `MethodRule` per method, in
`METHODS`, read by `Daemon._forward` (`runtime.py`) with a `RuleContext`: what a rule may use.

A forwarded request's params are decoded once into `client_api.ForwardedParams` (`viewed`), what the daemon reads
of them; the client's dict is never changed: the daemon's own changes are kept on the `Call` (the provider thread
id, the provider's turn id, the hosted tools added, what agent configuration sets) and applied to a copy as it is
sent (`outgoing`). It goes: the rule's `prepare` (before a bridge is chosen: a refusal here starts nothing) →
the provider (`providerId`, else the thread's record) and its ready bridge → the capability check → for a request
that names a thread, its provider thread id filled in and the rule's `turn_field` mapped back to the provider's
turn id, then the rule's `before` → the bridge. Its answer runs `after_result` in the bridge's reader, in order
with the bridge's notifications (a release is in place before a resume's first events; a construction's
identity is known before its first turn's); a failure runs `after_error`, which may answer in its place.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import structlog
import trio
from msgspec import UNSET

from bbridge.daemon.agent_settings import AgentSettings
from bbridge.daemon.bridge import BridgeProcess
from bbridge.daemon.budgets import Budgets
from bbridge.daemon.declared_tools import DeclarationError, Declarations, Tool
from bbridge.daemon.delivery import ThreadParams, decode
from bbridge.daemon.fanout import ClientSink, Fanout
from bbridge.daemon.hidden import HiddenThreads
from bbridge.daemon.inputs import Inputs
from bbridge.daemon.offered_tools import OfferedTools
from bbridge.daemon.threads import Cause, Session, ThreadRegistry
from bbridge.daemon.tracker import Tracker
from bbridge.seams.telemetry import NO_SPAN, Carrier, Span
from bbridge.wire import errors, protocol, rpc
from bbridge.wire.agent_config import AgentConfiguration
from bbridge.wire.client_api import ForwardedParams, ToolChoice

log = structlog.get_logger("bbridge.daemon.methods")

THREAD_CREATION_TIMEOUT_S = 120.0
CONSTRUCTIONS: Final = frozenset({"thread/start", "thread/resume", "thread/fork"})
DAEMON_MADE: Final = frozenset({errors.BRIDGE_EXITED, errors.BRIDGE_TIMEOUT})  # a forwarded request's own failures
DAEMON_ONLY: Final = frozenset({"hidden", "_meta"})  # top-level members only the daemon reads: never sent to a bridge


@dataclass(frozen=True)
class RuleContext:
    """What a method rule may use: the thread records, the tool declarations and offers, the open work, the
    kept inputs, the clients' names, the agent configuration, the hidden marks, two actions of other parts (a
    thread's pending requests resolved before its stop; a thread let go from its bridge), and the budgets."""

    registry: ThreadRegistry
    declarations: Declarations
    offered: OfferedTools
    tracker: Tracker
    inputs: Inputs
    fanout: Fanout
    agents: AgentSettings
    hidden: HiddenThreads
    resolve_thread: Callable[[str, str], Awaitable[None]]  # `Relays.resolve_thread`
    release: Callable[[str, BridgeProcess, Cause], object]  # `Supervisor.release`
    budgets: Budgets | None = None  # checked before every turn input (`TurnInput.prepare`)


@dataclass
class Call:
    """One forwarded request, as its rule's hooks share it: the client's params as sent (never changed), what the
    daemon reads of them, and the daemon's own changes, applied as it is sent (`outgoing`)."""

    client: ClientSink
    method: str
    params: Mapping[str, Any]
    view: ForwardedParams
    provider_id: str = ""  # the params' `providerId`, else the thread's provider (before `prepare`)
    bridge: BridgeProcess | None = None  # chosen after `prepare`
    configuration: AgentConfiguration | None = None  # the agent configuration resolved for it
    declared: dict[str, Tool] | None = None  # a construction's checked dynamicTools, the hosted ones added
    hosted: frozenset[str] = frozenset()  # a construction's hosted tools (among `declared`)
    added_tools: list[Any] = field(default_factory=list)  # hosted tools appended to `dynamicTools`
    provider_thread_id: str | None = None  # filled in from the thread's record when the client left it out
    provider_turn_id: str | None = None  # the rule's `turn_field`, as the provider's turn id
    options: dict[str, Any] = field(default_factory=dict)  # members set over the client's `options`
    members: dict[str, Any] = field(default_factory=dict)  # top-level members set (`instructionMode`)
    open_before: list[str] = field(default_factory=list)  # an interrupt's open turns, before anything is resolved
    sent_at: float = field(default_factory=time.time)  # when the daemon received it (wall clock, for clients)
    span: Span = NO_SPAN  # a steer's span under its turn, with tracing

    @property
    def thread_id(self) -> str | None:
        return None if self.view.threadId is UNSET else self.view.threadId

    @property
    def choice(self) -> ToolChoice | None:
        """A construction's `options.tools`: the daemon's own key, which the bridge never sees."""
        options = self.view.options
        return None if options is UNSET or options.tools is UNSET else options.tools

    @property
    def cwd(self) -> str | None:
        return None if self.view.cwd is UNSET else self.view.cwd

    @property
    def client_options(self) -> dict[str, Any] | None:
        """The `options` as the client sent them, less the daemon's own `tools` (None: no options object)."""
        options = self.params.get("options")
        return {key: value for key, value in options.items() if key != "tools"} if isinstance(options, dict) else None

    def configure(self, agents: AgentSettings) -> None:
        """Resolve the agent configuration for this construction or turn and keep what it sets: the composed
        instructions (and `instructionMode` when a contribution replaced), its `BB_*` variables over the
        client's (configuration is the operator's word)."""
        options = self.view.options
        given = None if options is UNSET or options.instructions is UNSET else options.instructions
        model = None if options is UNSET or options.model is UNSET else options.model
        self.configuration = agents.resolve(self.thread_id, self.provider_id, self.cwd, model, given)
        if self.configuration is None or options is UNSET:
            return
        instructions = self.configuration.instructions
        if instructions.text != (given or ""):
            self.options["instructions"] = instructions.text
        if instructions.mode == "replace" and self.method in CONSTRUCTIONS:
            self.members["instructionMode"] = "replace"
        if self.configuration.envVars:
            own = {} if options.envVars is UNSET else options.envVars
            self.options["envVars"] = own | self.configuration.envVars


def viewed(method: str, params: Mapping[str, Any]) -> ForwardedParams:
    """What the daemon reads of a forwarded request's params, or the client's error naming what is wrong."""
    try:
        view = msgspec.convert(params, ForwardedParams)
    except msgspec.ValidationError as exc:
        if "$.options.tools" in str(exc):
            raise rpc.RpcError(
                rpc.INVALID_PARAMS,
                f"{method}: Invalid options.tools ({exc}): it is {{include?: [tool names], exclude?: [tool names], "
                "mcpServers?: [{name, command: [argv], env?: {NAME: value}}]}, choosing among the tools the daemon "
                "hosts and bringing the thread's own MCP servers",
            ) from None
        raise rpc.RpcError(rpc.INVALID_PARAMS, f"{method}: {exc}") from None
    if view.hidden is not UNSET and method not in CONSTRUCTIONS:
        raise rpc.RpcError(
            rpc.INVALID_PARAMS, f"{method}: hidden marks a thread at its construction (thread/start, resume or fork)"
        )
    return view


def outgoing(call: Call, keeps_provider_id: bool, turn_field: str | None) -> dict[str, Any]:
    """The params the bridge receives: the client's, less what only the daemon reads (`providerId` unless the
    method's own, `hidden`, `_meta`, `options.tools`), with the daemon's changes."""
    sent = {
        key: value
        for key, value in call.params.items()
        if (keeps_provider_id or key != "providerId") and key not in DAEMON_ONLY
    }
    if call.provider_thread_id is not None:
        sent["providerThreadId"] = call.provider_thread_id
    if turn_field is not None and call.provider_turn_id is not None:
        sent[turn_field] = call.provider_turn_id
    if call.added_tools:
        sent["dynamicTools"] = [*(sent.get("dynamicTools") or []), *call.added_tools]
    options = call.client_options
    if options is not None and (call.choice is not None or call.options):
        sent["options"] = options | call.options
    return sent | call.members


class MethodRule:
    """A forwarded method the daemon only routes (and fills the thread's `providerThreadId` in)."""

    keeps_provider_id = False  # the method's own params carry `providerId` (one bridge may serve several)
    constructs = False  # a construction: it names its own provider thread, and records the thread
    turn_field: str | None = None  # a bb turn id in the params, sent as the provider's (`turn_of`)
    min_timeout_s = 0.0  # the request's timeout is at least this

    def turn_of(self, view: ForwardedParams) -> str | None:
        """The bb turn id the params name in `turn_field`."""
        return None

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
    recorded (its provider, owner and bridge, and its `hidden` mark, told to every client) before it is sent; its
    tools, `cwd`, options and provider thread id kept from the answer (and, for idle reaping, its params and
    `sessionRestorable`: `idle.py`). A failed construction stops the servers it
    brought."""

    constructs = True

    def __init__(self, min_timeout_s: float = 0.0) -> None:
        self.min_timeout_s = min_timeout_s

    async def prepare(self, ctx: RuleContext, call: Call) -> None:
        try:
            if call.thread_id is None and call.choice is not None and call.choice.mcpServers:
                raise DeclarationError("options.tools.mcpServers needs the construction's threadId")
            tools = call.view.dynamicTools
            call.declared = await ctx.declarations.declare(None if tools is UNSET else tools)
            call.configure(ctx.agents)
            hosted = ctx.offered.for_construction(call.thread_id, call.client.name, call.choice, set(call.declared))
            hosted = selected(hosted, call.configuration)
            skill = [
                t for t in ctx.agents.skill_tool(call.provider_id, call.configuration) if t.name not in call.declared
            ]
            await self._add(ctx, call, hosted + skill)
        except DeclarationError as exc:
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"{call.method}: {exc}") from None

    async def before(self, ctx: RuleContext, call: Call) -> None:
        assert call.thread_id is not None and call.bridge is not None
        try:
            brought = await ctx.offered.brought(
                call.thread_id, call.client.name, call.choice, set(call.declared or {}) - call.hosted, call.cwd
            )
            await self._add(ctx, call, brought)
        except DeclarationError as exc:
            self._stop_brought(ctx, call)
            raise rpc.RpcError(rpc.INVALID_PARAMS, f"{call.method}: {exc}") from None
        await call.bridge.configure_skills(ctx.agents.skill_roots(call.provider_id))
        ctx.registry.construct(call.thread_id, call.bridge.provider_id, call.client)
        if call.view.hidden is not UNSET:
            ctx.hidden.mark(call.thread_id, call.bridge.provider_id, call.view.hidden)
        call.bridge.serves(call.thread_id)
        supplied = call.view.providerThreadId
        if call.method == "thread/resume" and supplied is not UNSET:
            ctx.registry.identify(call.thread_id, supplied)  # recorded before sending (protocol.md §3.3.6)

    @staticmethod
    async def _add(ctx: RuleContext, call: Call, tools: list[protocol.DynamicTool]) -> None:
        """Hosted tools appended to the construction's `dynamicTools`, checked as declared ones."""
        if not tools:
            return
        offered = msgspec.to_builtins(tools)
        call.declared = (call.declared or {}) | await ctx.declarations.declare(offered)
        call.added_tools += offered
        call.hosted |= {tool.name for tool in tools}

    @staticmethod
    def _stop_brought(ctx: RuleContext, call: Call) -> None:
        host, choice = ctx.offered.host, call.choice
        if host is not None and call.thread_id is not None and choice is not None and choice.mcpServers:
            host.forget(call.thread_id)

    def after_result(self, ctx: RuleContext, call: Call, raw: msgspec.Raw) -> None:
        assert call.thread_id is not None
        result = decode(raw, ThreadParams)
        provider_thread_id = None if result is None else result.providerThreadId
        session = Session(dict(call.params), None if result is None else result.sessionRestorable, trio.current_time())
        ctx.registry.constructed(call.thread_id, call.declared, provider_thread_id, call.hosted, call.cwd, session)
        ctx.registry.configured(call.thread_id, call.client_options)
        ctx.agents.constructed(call.thread_id, call.configuration)

    def after_error(self, ctx: RuleContext, call: Call, exc: rpc.RpcError) -> Any:
        self._stop_brought(ctx, call)
        return None


class TurnInput(MethodRule):
    """`turn/start` and `turn/steer`: the budgets checked (`budgets.py`: a refusal, or an approval waited for,
    before any bridge is asked) and the agent configuration resolved again (options ride every turn; the
    instructions apply at the next construction, protocol.md §4.4); an input the bridge accepted is kept as thread
    state (`inputs.py`: the canonical events keep no prompt text), and its options on the thread's record; a refused
    one keeps neither."""

    async def prepare(self, ctx: RuleContext, call: Call) -> None:
        if ctx.budgets is not None and ctx.budgets.budgets:
            options, signature = call.view.options, ctx.fanout.signature(call.client)
            model = None if options is UNSET or options.model is UNSET else options.model
            client = signature.get("name") or signature["connection"]
            await ctx.budgets.gate(ctx.budgets.request(call.method, call.thread_id, call.provider_id, model, client))
        call.configure(ctx.agents)

    def after_result(self, ctx: RuleContext, call: Call, raw: msgspec.Raw) -> None:
        assert call.thread_id is not None and call.bridge is not None
        client = ctx.fanout.signature(call.client)
        view = call.view
        elements = [] if view.input is UNSET else view.input
        request_id = None if view.clientRequestId is UNSET else view.clientRequestId
        ctx.inputs.add(call.thread_id, call.bridge.provider_id, elements, request_id, call.method, call.sent_at, client)
        ctx.registry.configured(call.thread_id, call.client_options)


class TurnStart(TurnInput):
    """`turn/start`: the turn-start watchdog is armed as it is sent, disarmed if it fails; the tracer told of the
    turn to come (its `_meta` trace context, its model); kept as `TurnInput`."""

    async def before(self, ctx: RuleContext, call: Call) -> None:
        assert call.thread_id is not None and call.bridge is not None
        call.bridge.turn_dispatched(call.thread_id)
        if ctx.fanout.tracer.enabled:
            ctx.fanout.tracer.turn_requested(call.thread_id, call.provider_id, *_traced(ctx, call))

    def after_error(self, ctx: RuleContext, call: Call, exc: rpc.RpcError) -> Any:
        if call.thread_id is not None and call.bridge is not None:
            call.bridge.dispatch_failed(call.thread_id)
        return None


class TurnSteer(TurnInput):
    """`turn/steer`: kept as `TurnInput`; with tracing, a `bbridge.turn.steer` span under the turn it steers, from
    when it is sent to the bridge's answer (an error marks it failed)."""

    turn_field = "expectedTurnId"

    def turn_of(self, view: ForwardedParams) -> str | None:
        return None if view.expectedTurnId is UNSET else view.expectedTurnId

    async def before(self, ctx: RuleContext, call: Call) -> None:
        tracer = ctx.fanout.tracer
        if tracer.enabled:
            attributes = {"bbridge.thread_id": call.thread_id or "", "bbridge.provider_id": call.provider_id}
            call.span = tracer.in_turn("bbridge.turn.steer", call.thread_id, self.turn_of(call.view), attributes)

    def after_result(self, ctx: RuleContext, call: Call, raw: msgspec.Raw) -> None:
        super().after_result(ctx, call, raw)
        call.span.end()

    def after_error(self, ctx: RuleContext, call: Call, exc: rpc.RpcError) -> Any:
        call.span.end(exc.message)
        return None


class ThreadStop(MethodRule):
    """`thread/stop`: nothing the thread waits on outlives its stop; a release answered lets the thread go
    (`ThreadRegistry.release`); an interrupt refused because its turn had meanwhile ended succeeds."""

    turn_field = "activeTurnId"

    def turn_of(self, view: ForwardedParams) -> str | None:
        return view.activeTurnId if isinstance(view.activeTurnId, str) else None

    async def prepare(self, ctx: RuleContext, call: Call) -> None:
        if call.thread_id is not None and call.view.intent == "interrupt":
            call.open_before = ctx.tracker.open_turns(call.thread_id)  # before requests are resolved

    async def before(self, ctx: RuleContext, call: Call) -> None:
        assert call.thread_id is not None
        await ctx.resolve_thread(call.thread_id, "the thread was stopped")

    def after_result(self, ctx: RuleContext, call: Call, raw: msgspec.Raw) -> None:
        if call.view.intent == "release":
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


def _traced(ctx: RuleContext, call: Call) -> tuple[str | None, Carrier | None]:
    """A turn's model (its `options.model`, else the thread's latest) and the trace context of its `_meta`."""
    options, meta = call.view.options, call.view.meta
    model = None if options is UNSET or options.model is UNSET else options.model
    if model is None and call.thread_id is not None and call.thread_id in ctx.registry.records:
        kept = ctx.registry.records[call.thread_id].options or {}
        model = kept.get("model") if isinstance(kept.get("model"), str) else None
    if meta is UNSET or meta is None or meta.traceparent is UNSET:
        return model, None
    return model, {"traceparent": meta.traceparent} | (
        {} if meta.tracestate is UNSET else {"tracestate": meta.tracestate}
    )


def selected(tools: list[protocol.DynamicTool], configuration: AgentConfiguration | None) -> list[protocol.DynamicTool]:
    """The hosted tools agent configuration lets through: its `include` (when it names any), never its `exclude`."""
    return tools if configuration is None else [tool for tool in tools if configuration.tools.allows(tool.name)]


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
