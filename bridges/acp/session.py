"""One bb thread's ACP session: its agent, its prompt loop, its permissions and the agent's file requests.

Turns. `turn/start` opens the turn (`turn.open`) and sends `session/prompt`;
the input is accepted (`input.accepted`, then the command's answer) only once
the prompt carrying it is on the wire. ACP has no injection (`steerMode:
"queue"`): a steer is queued and the live prompt cancelled; when the agent
answers `cancelled`, the queued input is prompted in the same bb turn. The
turn ends with the stop reason of the last prompt.

Tools. A thread whose construction declared `dynamicTools` gets its own
`bb-bridge` MCP server (`bbridge.kit.mcp_host`), listed in the ACP session's `mcpServers`;
the agent's `tools/call` becomes the runtime request `item/tool/call` (a fresh
`callId`; `turnId` null, which the runtime resolves to the thread's active turn:
ACP turns carry no provider turn id) and the translator is told, so the ACP
`tool_call` shows as the declared tool. The server is closed whenever the
session ends (its socket removed; the relays the agent launched exit).

Stops. `interrupt` cancels the prompt (`session/cancel`) and waits, bounded,
for the agent to settle it, so the settling deltas precede the stop's answer
(settling for the agent when it does not); `release` detaches without
fabricating an interruption. Either way the agent process ends.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
import trio

from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.kit import Bridge
from bbridge.kit.mcp_host import McpHost, Tool
from bbridge.wire import interactions, protocol, rpc
from bridges.acp import approvals, files, prompt
from bridges.acp.approvals import Policy
from bridges.acp.child import AgentProcess
from bridges.acp.messages import (
    CLIENT_CAPABILITIES,
    CLIENT_INFO,
    PROTOCOL_VERSION,
    STOP_REASONS,
    JsonObject,
    non_negative_int,
    permission_request,
)
from bridges.acp.translate import Translator, TurnStatus, prompt_usage, turn_status

log = structlog.get_logger("bridges.acp")

START_TIMEOUT_S = 60.0
STOP_SETTLE_S = 4.0
EXIT_WAIT_S = 2.0
DEFAULT_MODEL_ID = "acp-default"
Kind = Literal["start", "resume", "fork"]


@dataclass(eq=False)
class TurnInput:
    """Input bb handed the bridge, waiting to reach the agent; `answered` releases the command that brought it."""

    client_request_id: str | None
    input: list[protocol.PromptInput]
    answered: trio.Event | None = None  # None for a steer, answered when queued
    error: str | None = None

    def answer(self, error: str | None = None) -> None:
        """Answer the command at most once: success, or the reason the input never reached the agent."""
        if self.answered is not None and not self.answered.is_set():
            self.error = error
            self.answered.set()


@dataclass(eq=False)
class PendingPermission:
    options: list[JsonObject]
    done: trio.Event = field(default_factory=trio.Event)
    decision: interactions.Decision | None = None

    def settle(self, decision: interactions.Decision | None) -> None:
        if not self.done.is_set():
            self.decision = decision
            self.done.set()


class Session:
    """The session of one bb thread; `gone` is called when the agent went away on its own."""

    def __init__(
        self,
        bridge: Bridge,
        thread_id: str,
        agent: AgentProcess,
        *,
        policy: Policy,
        instructions: str | None,
        gone: Callable[[Session], None],
        tools: Mapping[str, Tool] | None = None,
    ) -> None:
        self.bridge = bridge
        self.thread_id = thread_id
        self.agent = agent
        self.policy = policy
        self.instructions = instructions
        self.gone = gone
        self.tools = dict(tools or {})
        self.translator = Translator(thread_id, {name: tool.presentation for name, tool in self.tools.items()})
        self.mcp: McpHost | None = None  # the thread's bb-bridge MCP server, when it declared tools
        self.provider_thread_id = ""
        self.active: Literal["turn", "compaction"] | None = None
        self.queued: deque[TurnInput] = deque()
        self.prompt_pending = False
        self.cancel_requested = False
        self.stopping = False
        self.ready = False  # identity sent: updates flow
        self.held: list[JsonObject] = []  # updates that arrived before the identity
        self.loading: str | None = None  # the session id `session/load` is replaying
        self.load_usage: JsonObject | None = None
        self.settled = trio.Event()
        self.settled.set()
        self.permissions: set[PendingPermission] = set()
        self.supports_load = False
        self.supports_image = False
        self.context_size: int | None = None
        self._log = log.bind(threadId=thread_id)
        agent.on_notification = self._on_notification
        agent.on_request = self._on_request

    @property
    def label(self) -> str:
        return self.agent.launch.label

    # -- construction -------------------------------------------------------

    async def open(self, kind: Kind, cwd: str, *, source: str | None = None, model: str | None = None) -> None:
        """Spawn the agent, build the ACP session (`session/new`, `/load` or `/fork`), then identity + reset.

        A resume the agent cannot load (no `loadSession`) continues in a fresh `session/new`; the lost history
        is reported first as a `session/replaced` with `contextLost` (§4.3), which the runtime shows as a warning.
        """
        await self.agent.start(self.bridge.spawn, self._on_exit)
        try:
            if self.tools:
                self.mcp = McpHost(self.tools, self._tool_call, thread_id=self.thread_id)
                await self.mcp.open()
                self.bridge.spawn(self.mcp.serve)
            session_id = await self._construct(kind, cwd, source, model)
        except BaseException:
            self.stopping = True
            self.close_tools()
            with trio.CancelScope(shield=True):
                await self.agent.terminate()
            raise
        self.provider_thread_id = session_id
        if kind == "resume" and not self.supports_load:
            reason = (
                f'ACP agent "{self.label}" could not restore the previous session; '
                "continuing in a fresh session without in-agent history."
            )
            replaced = protocol.SessionReplacedParams(
                threadId=self.thread_id, providerThreadId=source, reason=reason, contextLost=True
            )
            await self.bridge.notify("session/replaced", replaced)
        await self.bridge.open_session(self.thread_id, session_id, session_restorable=self.supports_load)
        self.ready = True
        held, self.held = self.held, []
        if self.load_usage is not None:
            held.insert(0, self.load_usage)
        for update in held:
            await self._translate(update)

    async def _call(self, method: str, params: JsonObject) -> JsonObject:
        """A construction request; failures read as the agent's, naming it (an agent that died: its exit)."""
        try:
            result = await self.agent.request(method, params, timeout=START_TIMEOUT_S)
        except rpc.ConnectionClosed:
            with trio.move_on_after(EXIT_WAIT_S):
                await self.agent.done.wait()
            raise rpc.RpcError(rpc.BRIDGE_ERROR, self.agent.exit_message()) from None
        except rpc.RpcError as exc:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f'ACP agent "{self.label}" failed {method}: {exc.message}') from None
        return result if isinstance(result, dict) else {}

    @property
    def mcp_servers(self) -> list[JsonObject]:
        """The ACP session's `mcpServers`: the thread's `bb-bridge` server, when it declared tools."""
        return [] if self.mcp is None else [self.mcp.server_spec()]

    def close_tools(self) -> None:
        if self.mcp is not None:
            self.mcp.close()

    async def _tool_call(self, tool: str, arguments: Any) -> Any:
        """An MCP `tools/call` of a declared tool, relayed to the runtime as `item/tool/call` (§3.6.1)."""
        if self.stopping or not self.provider_thread_id:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, "The ACP session is not running; the tool was not called")
        self.translator.mcp_called(tool, arguments)
        call = interactions.ToolCallParams(
            providerThreadId=self.provider_thread_id,
            threadId=self.thread_id,
            turnId=None,
            callId=f"acp-mcp-{tool}-{secrets.token_hex(6)}",
            tool=tool,
            arguments=arguments,
        )
        return await self.bridge.request("item/tool/call", call)

    async def _construct(self, kind: Kind, cwd: str, source: str | None, model: str | None) -> str:
        init = await self._call(
            "initialize",
            {"protocolVersion": PROTOCOL_VERSION, "clientInfo": CLIENT_INFO, "clientCapabilities": CLIENT_CAPABILITIES},
        )
        if init.get("protocolVersion") != PROTOCOL_VERSION:
            raise rpc.RpcError(
                rpc.BRIDGE_ERROR,
                f'ACP agent "{self.label}" answered protocol version {js.stringify(init.get("protocolVersion"))}; '
                f"this bridge speaks ACP version {PROTOCOL_VERSION}",
            )
        caps = init.get("agentCapabilities") if isinstance(init.get("agentCapabilities"), dict) else {}
        assert isinstance(caps, dict)
        prompt_caps, session_caps = caps.get("promptCapabilities"), caps.get("sessionCapabilities")
        self.supports_load = caps.get("loadSession") is True
        self.supports_image = isinstance(prompt_caps, dict) and prompt_caps.get("image") is True
        supports_fork = isinstance(session_caps, dict) and session_caps.get("fork") is not None
        if kind == "fork" and not supports_fork:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f'ACP agent "{self.label}" does not advertise session/fork support.')
        if kind == "fork":
            result = await self._call("session/fork", {"sessionId": source, "cwd": cwd, "mcpServers": self.mcp_servers})
            session_id = result.get("sessionId")
            if session_id == source:
                raise rpc.RpcError(
                    rpc.BRIDGE_ERROR, f'ACP agent "{self.label}" returned the source session for session/fork.'
                )
        elif kind == "resume" and self.supports_load:
            self.loading = source
            try:
                result = await self._call(
                    "session/load", {"sessionId": source, "cwd": cwd, "mcpServers": self.mcp_servers}
                )
            except rpc.RpcError as exc:
                raise rpc.RpcError(rpc.SESSION_NOT_RESTORABLE, exc.message) from None
            finally:
                self.loading = None
            session_id = source
        else:  # a start, or a resume the agent cannot load (`open` reports the lost history)
            result = await self._call("session/new", {"cwd": cwd, "mcpServers": self.mcp_servers})
            session_id = result.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f'ACP agent "{self.label}" returned no sessionId for {kind}')
        await self._select_model(session_id, result, model)
        return session_id

    async def _select_model(self, session_id: str, state: JsonObject, model: str | None) -> None:
        """Pin the thread's model: the agent's `model` config option when it has one, else `session/set_model`."""
        if not model or model == DEFAULT_MODEL_ID:
            return
        options = state.get("configOptions") if isinstance(state.get("configOptions"), list) else []
        assert isinstance(options, list)
        option = next(
            (o for o in options if isinstance(o, dict) and (o.get("category") == "model" or o.get("id") == "model")),
            None,
        )
        request: tuple[str, JsonObject] | None = None
        if option is not None:
            values = [v.get("value") for v in option.get("options") or [] if isinstance(v, dict)]
            if option.get("currentValue") != model and model in values:
                request = (
                    "session/set_config_option",
                    {"sessionId": session_id, "configId": option.get("id"), "value": model},
                )
        elif isinstance(models := state.get("models"), dict):
            ids = [m.get("modelId") for m in models.get("availableModels") or [] if isinstance(m, dict)]
            if models.get("currentModelId") != model and model in ids:
                request = ("session/set_model", {"sessionId": session_id, "modelId": model})
        if request is not None:
            try:
                await self.agent.request(*request, timeout=START_TIMEOUT_S)
            except rpc.RpcError as exc:
                self._log.warning("model selection failed; the agent keeps its default", model=model, error=exc.message)

    # -- agent traffic -----------------------------------------------------

    async def _emit(self, deltas: list[g.Delta]) -> None:
        if deltas:
            await self.bridge.emit(self.thread_id, deltas)

    async def _translate(self, update: JsonObject) -> None:
        if update.get("sessionUpdate") == "usage_update":
            self.context_size = non_negative_int(update.get("size")) or self.context_size
        await self._emit(self.translator.update(update))

    async def _on_notification(self, method: str, params: Any) -> None:
        if method != "session/update":
            self._log.info("ignored an agent notification", method=method)
            return
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(update, dict) or not isinstance(params.get("sessionId"), str):
            self._log.warning("ignored a malformed session/update", params=js.stringify(params)[:400])
            return
        if self.stopping:
            return
        if self.loading is not None:  # history replayed by session/load is not new timeline
            if params["sessionId"] == self.loading and update.get("sessionUpdate") == "usage_update":
                self.load_usage = update
            return
        if self.provider_thread_id and params["sessionId"] != self.provider_thread_id:
            self._log.info("ignored an update for another session", sessionId=params["sessionId"])
            return
        if not self.ready:
            self.held.append(update)
            return
        await self._translate(update)

    async def _on_request(self, method: str, params: Any) -> Any:
        if method == "session/request_permission":
            return await self._permission(params)
        if method == "fs/read_text_file":
            return await files.read_text_file(params)
        if method == "fs/write_text_file":
            path, old, text = await files.write_text_file(params, self.policy)
            await self._emit(self.translator.file_written(path, old, text))
            return None
        raise rpc.RpcError(rpc.METHOD_NOT_FOUND, f'Unsupported ACP client method "{method}"')

    async def _on_exit(self, agent: AgentProcess) -> None:
        """The agent ended: unless the bridge ended it, the thread learns why (settling a live turn first)."""
        self.cancel_permissions()
        self.close_tools()
        if self.stopping or not self.ready:
            return
        self.stopping = True
        self.gone(self)
        await self._fail(agent.exit_message())

    async def _fail(self, message: str) -> None:
        """A settling `provider.error` for the live turn, then the thread-scoped `error` notification."""
        if self.active is not None:
            self.active = None
            await self._emit(self.translator.failed(message))
        await self.bridge.notify(
            "error", {"threadId": self.thread_id, "providerThreadId": self.provider_thread_id, "message": message}
        )

    # -- permissions -------------------------------------------------------

    async def _permission(self, params: Any) -> JsonObject:
        request = permission_request(params)
        if request is None:
            raise rpc.RpcError(rpc.INVALID_PARAMS, "Invalid session/request_permission params")
        options, tool_call = request
        if self.stopping or self.cancel_requested or self.active != "turn":
            return approvals.CANCELLED
        if not self.policy.ask:
            return approvals.outcome(options, "allow_once")
        call_id = tool_call.get("toolCallId") if tool_call else None
        started = self.translator.call(call_id) if isinstance(call_id, str) else None
        ask = interactions.InteractionRequestParams(
            providerThreadId=self.provider_thread_id,
            threadId=self.thread_id,
            turnId=None,
            payload=approvals.payload(tool_call, options, started),
        )
        pending = PendingPermission(options)
        self.permissions.add(pending)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._ask, ask, pending)
            await pending.done.wait()
            nursery.cancel_scope.cancel()
        self.permissions.discard(pending)
        return approvals.outcome(options, pending.decision)

    async def _ask(self, request: interactions.InteractionRequestParams, pending: PendingPermission) -> None:
        """The runtime's resolution; an error or an answer that is no approval decision cancels the permission."""
        try:
            result = await self.bridge.request("interaction/request", request)
        except rpc.RpcError as exc:
            self._log.warning("interaction/request failed; the permission is cancelled", error=exc.message)
            result = None
        decision = result.get("decision") if isinstance(result, dict) else None
        pending.settle(decision if decision in approvals.OPTION_KINDS else None)

    def cancel_permissions(self) -> None:
        for pending in self.permissions:
            pending.settle(None)
        self.permissions.clear()

    # -- turns --------------------------------------------------------------

    def start_turn(self, pending: TurnInput) -> None:
        """Register the live turn now (later requests see it) and run it in the background."""
        self.settled = trio.Event()
        if prompt.is_compact(pending.input):
            self.active = "compaction"
            self.bridge.spawn(self._compact, pending)
        else:
            self.active = "turn"
            self.bridge.spawn(self._run_turn, pending)

    async def _prompt(self, blocks: list[JsonObject], pending: TurnInput) -> Any:
        """Send `session/prompt`; accept the input once it is on the wire; the result, or the `RpcError`."""
        sent = trio.Event()
        outcome: list[Any] = []
        early: list[bool] = []

        async def call() -> None:
            try:
                params = {"sessionId": self.provider_thread_id, "prompt": blocks}
                outcome.append(await self.agent.request("session/prompt", params, sent=sent))
            except rpc.RpcError as exc:
                early.append(not sent.is_set())
                outcome.append(exc)
            finally:
                sent.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await sent.wait()
            if not early:
                await self._accept(pending)
                if self.queued:  # a steer that stacked behind a cancelled prompt needs its own cancel
                    await self._steer_cancel()
        return outcome[0]

    async def _accept(self, pending: TurnInput) -> None:
        if pending.client_request_id is not None:
            await self._emit([g.InputAccepted(clientRequestId=pending.client_request_id)])
        pending.answer()

    async def _run_turn(self, first: TurnInput) -> None:
        try:
            await self._emit(self.translator.turn_started())
            pending = first
            while True:
                if self.stopping:
                    pending.answer("ACP session is stopping")
                    await self._finish("cancelled")
                    return
                self.cancel_requested = False
                self.prompt_pending = True
                blocks = prompt.prompt_blocks(pending.input, self.instructions, images=self.supports_image)
                self.instructions = None  # the session instructions ride the first prompt only
                result = await self._prompt(blocks, pending)
                self.prompt_pending = False
                if isinstance(result, rpc.RpcError):
                    pending.answer("ACP turn failed before the prompt was sent")
                    await self._end_on_error(result)
                    return
                stop_reason = result.get("stopReason") if isinstance(result, dict) else None
                if stop_reason not in STOP_REASONS:
                    await self._fail(
                        f"ACP agent returned an unexpected session/prompt result: {js.stringify(result)[:400]}"
                    )
                    return
                if not self.stopping and self.queued:  # the steer that cancelled this prompt continues the turn
                    pending = self.queued.popleft()
                    continue
                await self._finish(str(stop_reason), self._usage(result))
                return
        finally:
            self.settled.set()

    async def _end_on_error(self, error: rpc.RpcError) -> None:
        """A prompt that failed: an agent that died is reported by its exit; any other failure fails the turn."""
        self.drop_queued("ACP turn failed before the steer was sent")
        self.cancel_requested = False
        if isinstance(error, rpc.ConnectionClosed):
            await self.agent.done.wait()
        elif not self.stopping:
            await self._fail(error.message)
        self.active = None

    def _usage(self, result: JsonObject) -> g.Usage | None:
        """The prompt's token usage added to the session's running total (ACP reports each prompt on its own)."""
        last = prompt_usage(result)
        if last is None:
            return None
        return self.bridge.usage(self.thread_id).turn(last, model_context_window=self.context_size)

    async def _finish(self, stop_reason: str, usage: g.Usage | None = None) -> None:
        if self.active is None:  # already settled (a stop that settled for an unresponsive agent)
            return
        self.active = None
        self.drop_queued("ACP turn ended before the steer was sent")
        self.prompt_pending = self.cancel_requested = False
        await self._emit(self.translator.turn_completed(stop_reason, usage))

    async def _compact(self, pending: TurnInput) -> None:
        """Manual compaction: the agent's own `/compact` as a maintenance prompt; only `end_turn` compacted."""
        try:
            await self._emit(self.translator.compaction_started())
            result = await self._prompt([{"type": "text", "text": "/compact"}], pending)
            error: str | None = None
            status: TurnStatus
            if isinstance(result, rpc.ConnectionClosed):
                pending.answer("ACP compaction failed before the prompt was sent")
                await self.agent.done.wait()
                return
            if isinstance(result, rpc.RpcError):
                pending.answer("ACP compaction failed before the prompt was sent")
                status, error = "failed", result.message
            else:
                reason = str(result.get("stopReason")) if isinstance(result, dict) else "unknown"
                status = turn_status(reason)
                error = f"Agent stopped compaction: {reason}" if status == "failed" else None
            if self.active is not None:
                self.active = None
                await self._emit(self.translator.compaction_completed(status, error))
        finally:
            self.settled.set()

    # -- steer and stop ------------------------------------------------------

    async def steer(self, params: protocol.TurnSteerParams) -> None:
        if self.active != "turn":
            raise rpc.RpcError(rpc.NO_ACTIVE_TURN, f"No active turn to steer (expected {params.expectedTurnId})")
        self.queued.append(TurnInput(params.clientRequestId, params.input))
        await self._steer_cancel()

    async def _steer_cancel(self) -> None:
        if self.stopping or self.cancel_requested or not self.prompt_pending or self.agent.exited:
            return
        self.cancel_requested = True
        self.cancel_permissions()
        await self.agent.notify("session/cancel", {"sessionId": self.provider_thread_id})

    def drop_queued(self, reason: str) -> None:
        while self.queued:
            self.queued.popleft().answer(reason)

    def _begin_stop(self, how: str) -> bool:
        """Start ending the session, once: queued steers and pending permissions are refused. False if already ending."""
        if self.stopping:
            return False
        self.stopping = True
        self.drop_queued(f"ACP session {how} before the steer was sent")
        self.cancel_permissions()
        self.close_tools()
        return True

    async def interrupt(self) -> None:
        """Cancel the live prompt and wait for the agent to settle it (settle for it after 4 s), then end it."""
        if not self._begin_stop("stopped"):
            return
        if self.active is not None and not self.agent.exited:
            await self.agent.notify("session/cancel", {"sessionId": self.provider_thread_id})
            with trio.move_on_after(STOP_SETTLE_S):
                await self.settled.wait()
        if self.active is not None:
            kind, self.active = self.active, None
            settle = (
                self.translator.turn_completed("cancelled")
                if kind == "turn"
                else self.translator.compaction_completed("interrupted")
            )
            await self._emit(settle)
        await self.agent.terminate()

    async def release(self) -> None:
        """Detach: the agent ends, nothing is fabricated."""
        if self._begin_stop("released"):
            await self.agent.terminate()
