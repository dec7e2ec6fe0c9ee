"""One bb thread's Claude Code session: its turns, control and settlement over a `claude` child (spec §1.2,
§1.8–§1.9, §2, §5).

The child endpoint (`child.py`) reads the CLI's stdout in order; here control requests from the CLI are answered
concurrently (a permission can wait for a user), and every SDK message is translated into one `thread/delta`
notification. Once a session is closing, nothing the old child writes reaches the runtime.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import structlog
import trio

from bbridge.core import grammar as g
from bbridge.core import js
from bbridge.kit import Bridge
from bbridge.wire import rpc
from bridges.claude_code import approvals as perm
from bridges.claude_code import dynamic_tools, launch
from bridges.claude_code.child import INPUT_CLOSED, ClaudeChild, hook_event, initialize, user_line
from bridges.claude_code.dynamic_tools import DynamicTool
from bridges.claude_code.launch import Launch
from bridges.claude_code.translate import Translator, delta_params

log = structlog.get_logger("bridges.claude_code")

GRACEFUL_CLOSE_S = 4.0
AUTH_RESTARTS = {
    "authentication_failed": "Claude session restarted after authentication failed",
    "oauth_org_not_allowed": "Claude session restarted after OAuth organization authorization failed",
}
STREAM_ENDED = "Claude SDK stream ended before pending work completed"
SUBAGENT_TOOLS = frozenset({"Agent", "Task"})
NO_SUBAGENTS = "bb has disabled Claude Code native subagents; use bb delegation instead."
NO_WORKFLOWS = "bb has disabled the Claude Code Workflow tool."


class Counters:
    """Process-wide request counters: interaction and tool-call ids continue across threads (§1.1)."""

    def __init__(self) -> None:
        self.interactions = 0
        self.tool_calls = 0


@dataclass
class Settings:
    """What a session was built with (§3.4, §3.5); `live` members change in place on later turns."""

    cwd: str
    env: dict[str, str]
    launch: Launch
    instructions: str = ""
    instruction_mode: str = "append"
    tools: tuple[DynamicTool, ...] = ()
    escalation: perm.Escalation = None
    restore_mode: str = "bypassPermissions"
    subagents: bool = True
    construction: Any = None  # what a `thread/resume` must find unchanged to keep the child (§3.5)


@dataclass
class _Pending:
    """A CLI control request waiting on the runtime; `settled` is its answer when the session dies first (§5.7)."""

    request_id: str
    settled: Callable[[str, bool], Any]  # (message, interrupt) → the answer
    cancelled: str | None = None  # the denial a `control_cancel_request` gets (interactions only)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)


class Session:
    """A thread's CLI child, translator and permission state."""

    def __init__(
        self,
        bridge: Bridge,
        counters: Counters,
        thread_id: str,
        provider_thread_id: str,
        settings: Settings,
        grants: Sequence[perm.Grant] = (),
    ) -> None:
        self.bridge = bridge
        self.counters = counters
        self.thread_id = thread_id
        self.provider_thread_id = provider_thread_id
        self.settings = settings
        self.mode = settings.launch.permission_mode
        self.grants = list(grants)
        self.translator = Translator(thread_id, settings.launch.model, {t.name: t.presentation for t in settings.tools})
        self.closing = False
        self.stream_ended = False
        self.restart_reason: str | None = None
        self.closed = trio.Event()
        self.error: launch.LaunchError | None = None
        self._ready = trio.Event()
        self._child: ClaudeChild | None = None
        self._turn_lock = trio.Lock()
        self._pending: dict[str, _Pending] = {}
        self._last_error_result: str | None = None
        self._saw_result = False
        self._sent_user = False
        self._escalations: dict[str, perm.Escalation] = {}
        self._nursery: trio.Nursery | None = None

    # -- the child ---------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the child (in the bridge's nursery) and return once `initialize` is written; `LaunchError` if it fails."""
        self.bridge.spawn(self._run)
        await self._ready.wait()
        if self.error is not None:
            raise self.error

    async def _run(self) -> None:
        try:
            await self._serve()
        except launch.LaunchError as exc:
            self.error = exc
        finally:
            self._ready.set()
            self.closed.set()

    async def _serve(self) -> None:
        """Serve the child until its stdout ends."""
        settings = self.settings
        argv = launch.command(launch.executable(settings.env), launch.arguments(settings.launch))
        child = ClaudeChild(argv, env=settings.env, cwd=settings.cwd, thread_id=self.thread_id)
        await child.spawn()
        self._child = child
        body = initialize(
            mcp=bool(settings.tools), instructions=settings.instructions, instruction_mode=settings.instruction_mode
        )
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(child.pump_stderr)
                await child.post(body)
                self._ready.set()
                await child.read(self._sdk_message, self._on_control_request, self._cancel)
                await self._stream_end()
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                await child.stop()  # a bridge shutting down ends its children's input first

    async def _write(self, line: Any) -> None:
        """One line to the child; a session without a child fails the runtime request that wrote (§3.7)."""
        await self._live_child().write(line)

    def _live_child(self) -> ClaudeChild:
        if self._child is None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, INPUT_CLOSED)
        return self._child

    # -- SDK messages (§2.1) -------------------------------------------------------

    async def _sdk_message(self, message: dict[str, Any]) -> None:
        """Identity, the restart an auth failure arms, escalation tracking, then one delta batch (§4.1)."""
        if message.get("type") == "result":
            self._saw_result = True
            self._last_error_result = _error_result_text(message)
        elif not (message.get("type") == "system" and message.get("subtype") == "session_state_changed"):
            self._last_error_result = None
        async with self._turn_lock:
            if self.closing:
                return
            session_id = message.get("session_id")
            if isinstance(session_id, str) and js.trim(session_id) and session_id != self.provider_thread_id:
                self.provider_thread_id = session_id
                await self.bridge.notify("thread/identity", self.identity())
            if message.get("type") == "assistant" and message.get("error") in AUTH_RESTARTS:
                self.restart_reason = AUTH_RESTARTS[message["error"]]
            if message.get("type") == "assistant":
                self._track_tool_uses(message)
            await self.emit(self.translator.message(message))

    def identity(self) -> dict[str, Any]:
        return {"threadId": self.thread_id, "providerThreadId": self.provider_thread_id, "sessionRestorable": True}

    async def emit(self, deltas: list[g.Delta]) -> None:
        if deltas:
            await self.bridge.notify("thread/delta", msgspec.Raw(delta_params(self.thread_id, deltas)))

    async def _stream_end(self) -> None:
        """The child's stdout ended: pending work fails; an error end fails the open turn and is reported (§1.8)."""
        if self.closing:
            return
        self.stream_ended = True
        self._settle_pending(STREAM_ENDED)
        child = self._child
        code = None if child is None else await child.exit_code()
        if code in (0, None):
            return
        if self._last_error_result is not None:
            text = f"Claude Code returned an error result: {self._last_error_result}"
        elif code < 0:
            text = f"Claude Code process terminated by signal {signal.Signals(-code).name}"
        else:
            text = f"Claude Code process exited with code {code}"
        tail = js.trim(child.stderr_text) if child is not None else ""
        if tail and tail not in text:
            text += f"\n\nClaude Code stderr:\n{tail}"
        await self.emit(self.translator.stream_error(text))
        await self.bridge.notify(
            "error", {"threadId": self.thread_id, "providerThreadId": self.provider_thread_id, "message": text}
        )

    # -- the bridge's control requests (§2.4) -----------------------------------------

    async def control(self, body: dict[str, Any]) -> Any:
        """A control request to the child; its `success` response, or `RpcError` with the CLI's error text."""
        return await self._live_child().request(body)

    async def control_unawaited(self, body: dict[str, Any], failure: str) -> None:
        """Write a control request and return at once; an error answer, whenever it comes, is logged as `failure`.

        For requests the CLI may answer only after a later message of ours (leaving Plan mode before the allow)."""
        waiter = await self._live_child().send(body)

        async def watch() -> None:
            await waiter.done.wait()
            if waiter.error is not None:
                log.warning(f"{failure}: {waiter.error}", threadId=self.thread_id)

        if self._nursery is not None:
            self._nursery.start_soon(watch)

    # -- turns (§2.3, §3.7) --------------------------------------------------------------

    async def send_prompt(self, text: str, client_request_id: str, escalation: perm.Escalation) -> None:
        """The user line, then its acceptance (the input is accepted once it is handed to the child)."""
        prompt_id = str(uuid.uuid4())
        self._escalations[f"prompt:{prompt_id}"] = escalation
        async with self._turn_lock:  # the child's answer is translated after the acceptance, never before
            await self._write(user_line(text, self.provider_thread_id, prompt_id))
            self._sent_user = True
            await self.emit(self.translator.input_accepted(client_request_id))
        self.settings.escalation = escalation

    async def apply_live(self, wanted: Launch, subagents: bool) -> None:
        """Live settings change in place (§3.7 step 4): `set_model`, `apply_flag_settings`."""
        current = self.settings.launch
        if wanted.model != current.model:
            await self.control({"subtype": "set_model", **({"model": wanted.model} if wanted.model else {})})
            self.translator.model_changed(wanted.model)
        flags = (wanted.memory, wanted.reasoning_level, wanted.workflows)
        if flags != (current.memory, current.reasoning_level, current.workflows):
            settings: dict[str, Any] = {"autoMemoryEnabled": wanted.memory, "enableWorkflows": wanted.workflows}
            if wanted.reasoning_level is not None:
                settings["effortLevel"] = launch.effort(wanted.reasoning_level)
            settings["ultracode"] = wanted.reasoning_level == "ultracode"
            await self.control({"subtype": "apply_flag_settings", "settings": settings})
        self.settings.launch = launch.changed(
            current,
            model=wanted.model,
            reasoning_level=wanted.reasoning_level,
            memory=wanted.memory,
            workflows=wanted.workflows,
        )
        self.settings.subagents = subagents

    # -- closing (§1.9) ----------------------------------------------------------------

    async def settle(self) -> None:
        """A dying session's settlement batch: the open turn ends, unfinished tasks stop (§3.9).

        From here on nothing the child writes is translated, so no delta can follow the settlement."""
        async with self._turn_lock:
            self.closing = True
            await self.emit(self.translator.settlement())

    def mark_closing(self, message: str) -> None:
        self.closing = True
        self._settle_pending(message)

    async def close(self, message: str, *, graceful: bool) -> None:
        """End the session (§1.9). Graceful: let the child finish (stdin stays open until a first result), ≤ 4 s;
        then, or at once when abrupt: close stdin, SIGTERM after 2 s, SIGKILL 5 s later."""
        self.mark_closing(message)
        if graceful:
            if self._saw_result or not self._sent_user:
                await self._close_stdin()
            with trio.move_on_after(GRACEFUL_CLOSE_S):
                await self.closed.wait()
        await self._close_stdin()
        if self._child is not None:
            if graceful and not self.closed.is_set():
                # the timeout fallback is the abrupt close, and nothing waits for it (§1.9): a live CLI keeps
                # streaming after stdin EOF, so awaiting SIGTERM here held the stop answer for 6 s
                self.bridge.spawn(self._child.stop)
            else:
                await self._child.stop()

    async def _close_stdin(self) -> None:
        if self._child is not None:
            await self._child.close_stdin()

    def _settle_pending(self, message: str) -> None:
        for pending in list(self._pending.values()):
            pending.scope.cancel()
            self._pending.pop(pending.request_id, None)
            if self._nursery is not None and self._child is not None and self._child.input_open:
                self._nursery.start_soon(self._answer, pending.request_id, pending.settled(message, True))
        if self._child is not None:
            self._child.fail_requests(message)

    # -- control requests from the CLI (§2.5, §5) ------------------------------------------

    async def _answer(self, request_id: str, body: Any, error: str | None = None) -> None:
        if self._child is not None:
            await self._child.answer(request_id, body, error)

    def _on_control_request(self, message: dict[str, Any]) -> None:
        """Each CLI request is answered in its own task, so the reader goes on (a permission can wait for a user)."""
        if self._nursery is not None and message.get("request_id") not in self._pending:
            self._nursery.start_soon(self._control_request, message)

    async def _control_request(self, message: dict[str, Any]) -> None:
        request_id, request = str(message.get("request_id")), message.get("request")
        request = request if isinstance(request, dict) else {}
        subtype = request.get("subtype")
        if subtype == "can_use_tool":
            await trio.lowlevel.checkpoint()  # an assistant message read with the request is translated first
            await self._can_use_tool(request_id, request)
        elif subtype == "hook_callback":
            event = hook_event(request.get("callback_id"))
            if event is None:
                await self._answer(request_id, None, f"No hook callback found for ID: {request.get('callback_id')}")
            else:
                await self._answer(request_id, self._hook(event, request.get("input")))
        elif subtype == "mcp_message":
            await self._mcp(request_id, request)
        elif subtype == "elicitation":
            await self._answer(request_id, {"action": "decline"})
        elif subtype != "request_user_dialog":
            await self._answer(request_id, None, f"Unsupported control request subtype: {subtype}")

    def _cancel(self, request_id: Any) -> None:
        pending = self._pending.get(str(request_id))
        if pending is None or pending.cancelled is None or self._nursery is None:
            return
        del self._pending[pending.request_id]
        pending.scope.cancel()
        self._nursery.start_soon(self._answer, pending.request_id, pending.settled(pending.cancelled, False))

    def _escalation(self, tool_use_id: Any, agent_id: Any = None, prompt_id: Any = None) -> perm.Escalation:
        """The escalation of the work asking (§5.6): its call, its subagent, its prompt, else the session's."""
        for key in (f"tool:{tool_use_id}", f"agent:{agent_id}", f"prompt:{prompt_id}"):
            if key in self._escalations:
                return self._escalations[key]
        return self.settings.escalation

    def _track_tool_uses(self, message: dict[str, Any]) -> None:
        inner = message.get("message")
        content = inner.get("content") if isinstance(inner, dict) else None
        parent = message.get("parent_tool_use_id")
        inherited = self._escalations.get(f"tool:{parent}", self.settings.escalation) if parent else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                known = parent and f"tool:{parent}" in self._escalations
                self._escalations[f"tool:{block['id']}"] = inherited if known else self.settings.escalation

    def _hook(self, event: str, data: Any) -> dict[str, Any]:
        """Hooks track escalations; `PreToolUse` also enforces the disabled subagents and workflows."""
        data = data if isinstance(data, dict) else {}
        tool_use_id, agent_id, prompt_id = data.get("tool_use_id"), data.get("agent_id"), data.get("prompt_id")
        if event in ("PreToolUse", "PermissionRequest"):
            self._escalations[f"tool:{tool_use_id}"] = self._escalation(None, agent_id, prompt_id)
        elif event == "SubagentStart":
            self._escalations[f"agent:{agent_id}"] = self._escalation(None, None, prompt_id)
        elif event == "SubagentStop":
            self._escalations.pop(f"agent:{agent_id}", None)
        else:
            self._escalations.pop(f"tool:{tool_use_id}", None)
        if event == "PreToolUse":
            tool = data.get("tool_name")
            reason = NO_SUBAGENTS if tool in SUBAGENT_TOOLS and not self.settings.subagents else None
            if tool == "Workflow" and not self.settings.launch.workflows:
                reason = NO_WORKFLOWS
            if reason is not None:
                decision = {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": reason,
                }
                return {"continue": True, "hookSpecificOutput": decision}
        return {"continue": True}

    async def _can_use_tool(self, request_id: str, request: dict[str, Any]) -> None:
        tool_use_id = str(request.get("tool_use_id", ""))
        if self.closing:
            await self._answer(request_id, perm.deny(tool_use_id, perm.SESSION_NOT_FOUND))
            return
        escalation = self._escalation(tool_use_id, request.get("agent_id"))
        decided = perm.decide(request, mode=self.mode, escalation=escalation, grants=self.grants)
        if not isinstance(decided, perm.Forward):
            await self._answer(request_id, decided)
            return
        question = decided.payload["kind"] == "user_question"
        pending = _Pending(
            request_id,
            lambda text, interrupt: perm.deny(tool_use_id, text, interrupt=interrupt),
            perm.QUESTION_CANCELLED if question else perm.CANCELLED,
        )
        self._pending[request_id] = pending
        self.counters.interactions += 1
        params = {
            "threadId": self.thread_id,
            "providerThreadId": self.provider_thread_id or self.thread_id,
            "turnId": None,
            "providerNativeIds": True,
            "payload": decided.payload,
        }
        with pending.scope:
            try:
                ident = f"interaction-{self.counters.interactions}"
                resolution = await self._ask("interaction/request", params, ident)
            except rpc.RpcError as exc:
                body: Any = perm.deny(tool_use_id, exc.message or perm.REQUEST_FAILED)
            else:
                body = await self._resolve(decided, resolution)
            if self._pending.pop(request_id, None) is not None:
                await self._answer(request_id, body)

    async def _resolve(self, forward: perm.Forward, resolution: Any) -> Any:
        try:
            if forward.payload["kind"] == "user_question":
                return perm.answer_questions(forward, resolution)
            body, grant = perm.answer_approval(forward, resolution)
        except perm.InvalidResponse:
            return perm.deny(forward.tool_use_id, perm.INVALID_RESPONSE)
        if grant is not None:
            self.grants.append(grant)
        if forward.tool == "ExitPlanMode" and body["behavior"] == "allow":
            self.mode = self.settings.restore_mode
            # Fire-and-forget, written before the allow (§5.3): awaiting it would hang a CLI that answers it late.
            await self.control_unawaited(
                {"subtype": "set_permission_mode", "mode": self.mode}, "Failed to leave Plan mode"
            )
        return body

    async def _ask(self, method: str, params: dict[str, Any], ident: str | int) -> Any:
        """A request to the runtime, written and read with JavaScript's JSON (§8.1): SDK content rides in it."""
        raw = await self.bridge.conn.request_raw(
            method, msgspec.Raw(js.stringify(params).encode()), timeout=None, id=ident
        )
        return js.parse(bytes(raw))

    async def _mcp(self, request_id: str, request: dict[str, Any]) -> None:
        if request.get("server_name") != dynamic_tools.MCP_SERVER or not self.settings.tools:
            await self._answer(request_id, None, f"SDK MCP server not found: {request.get('server_name')}")
            return
        message: Any = request.get("message")
        reply = dynamic_tools.mcp_reply(message, self.settings.tools)
        if reply is not None:
            await self._answer(request_id, {"mcp_response": reply})
            return
        ident = message["id"]

        def failed(text: str, _interrupt: bool = False) -> dict[str, Any]:
            return {"mcp_response": dynamic_tools.mcp_result(ident, [{"type": "text", "text": text}], error=True)}

        if self.closing:
            await self._answer(request_id, failed(perm.SESSION_NOT_FOUND))
            return
        pending = _Pending(request_id, failed)
        self._pending[request_id] = pending
        with pending.scope:
            reply = await self._tool_call(message)
            if self._pending.pop(request_id, None) is not None:
                await self._answer(request_id, {"mcp_response": reply})

    async def _tool_call(self, message: dict[str, Any]) -> dict[str, Any]:
        """A dynamic tool runs in the runtime (`item/tool/call`, §2.6)."""
        params = message.get("params") or {}
        self.counters.tool_calls += 1
        n = self.counters.tool_calls
        call = {
            "threadId": self.thread_id,
            "providerThreadId": self.provider_thread_id or self.thread_id,
            "turnId": None,
            "callId": f"call-{n}",
            "tool": params.get("name"),
            "arguments": params.get("arguments", {}),
        }
        try:
            result = await self._ask("item/tool/call", call, n)
        except rpc.RpcError as exc:
            return dynamic_tools.mcp_result(
                message["id"], [{"type": "text", "text": exc.message or "Tool call failed"}], error=True
            )
        content, failed = dynamic_tools.tool_call_content(result)
        return dynamic_tools.mcp_result(message["id"], content, error=failed)


def _error_result_text(message: dict[str, Any]) -> str | None:
    """What a failed `result` said, for the stream-error text of a child that then exits (§1.8)."""
    if message.get("is_error") is not True:
        return None
    if message.get("subtype") == "success":
        return str(message.get("result", ""))
    errors = message.get("errors")
    return "; ".join(str(e) for e in errors) if isinstance(errors, list) else ""
