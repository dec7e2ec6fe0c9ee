"""The runtime side of the pi bridge (pi-bridge.md §2): the protocol-2 methods, one pi session per thread.

Capabilities ([M1]): session restore (every session is a file), checkpoint forks, runtime-enforced approvals
(pi runs with full permissions), `steerMode: "inject"` (a steer joins the running turn). Unknown methods and
invalid params use the reference's wording; a failing handler answers -32000 with its message ([D5]).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import structlog
from msgspec import UNSET

from bbridge import kit
from bbridge.core import js
from bbridge.kit import Bridge, Wording
from bbridge.kit.mcp_host import declared_tools
from bbridge.wire import maintenance, protocol, rpc
from bridges.pi import dynamic_tools, fork, launch, models
from bridges.pi.child import PiError, available_models
from bridges.pi.maintenance import Maintenance
from bridges.pi.session import Session, Spec
from bridges.pi.translate import Translator

log = structlog.get_logger("bridges.pi")

CAPABILITIES = protocol.Capabilities(
    sessionRestore=True, fork="checkpoint", approvalEnforcedBy="runtime", steerMode="inject"
)
WORDING = Wording('Unknown method "{method}"', 'Invalid params for "{method}": {issues}', issues_as_data=False)
LOG_PREFIX = "pi bridge: "
NO_SESSION = "No active pi session"
MISSING_TEXT = "Missing input text"
STEER_COMPACTING = "Cannot steer while context compaction is active"
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".webp": "image/webp", ".svg": "image/svg+xml"}  # fmt: skip


def extract_input(items: list[protocol.PromptInput]) -> tuple[str, list[dict[str, Any]]]:
    """[M13]: the texts joined with `\\n`, and local images read from disk (unreadable ones skipped)."""
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, protocol.TextInput):
            texts.append(item.text)
        elif isinstance(item, protocol.LocalImageInput):
            try:
                data = Path(item.path).read_bytes()
            except OSError:
                continue
            mime = IMAGE_TYPES.get(Path(item.path).suffix.lower(), "image/png")
            images.append({"type": "image", "data": base64.b64encode(data).decode(), "mimeType": mime})
    return "\n".join(texts), images


async def _relayed(
    dispatch: Callable[[str, list[dict[str, Any]], str], Awaitable[None]],
    params: protocol.TurnStartParams,
    refused: str | None = None,
) -> None:
    """Turn input to pi (`prompt` or `steer`): -32602 without text ([M13]), then `refused` or pi's refusal as
    -32000."""
    text, images = extract_input(params.input)
    if not text:
        raise rpc.RpcError(rpc.INVALID_PARAMS, MISSING_TEXT)
    if refused is not None:
        raise rpc.RpcError(rpc.BRIDGE_ERROR, refused)
    try:
        await dispatch(text, images, params.clientRequestId)
    except PiError as exc:
        raise rpc.RpcError(rpc.BRIDGE_ERROR, exc.message) from None


class PiBridge:
    """Routes runtime requests to per-thread sessions; one translator for the whole process ([P1])."""

    def __init__(self, base_env: Mapping[str, str] | None = None) -> None:
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.sessions: dict[str, Session] = {}
        self.translator = Translator()
        self.skills: tuple[str, ...] = ()
        self._calls = 0
        self.bridge = Bridge("pi", CAPABILITIES, wording=WORDING, log_prefix=LOG_PREFIX)
        self.bridge.handle_sessions(self)
        self.maintenance = Maintenance(self._available)  # health and usage only: installation is unknown ([D3])
        self.bridge.method("provider/health", protocol.MaintenanceParams)(self.maintenance.health)
        self.bridge.method("provider/usage", protocol.MaintenanceParams)(self.maintenance.usage)
        self.bridge.method("skills/configure", maintenance.SkillsConfigureParams)(self.skills_configure)

    # -- constructions ([M10], [M11]) -----------------------------------------------------------------------

    async def _program(self) -> launch.Program:
        try:
            return await launch.find_program(self.base_env)
        except launch.LaunchError as exc:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, str(exc)) from None

    def _spec(self, params: protocol.ThreadStartParams, provider_thread_id: str) -> Spec:
        options = params.options
        instructions = js.trim(options.instructions) if options.instructions is not UNSET else ""
        reasoning = options.reasoningLevel if options.reasoningLevel is not UNSET else None
        env_vars = options.envVars if options.envVars is not UNSET else None
        return Spec(
            thread_id=params.threadId,
            provider_thread_id=provider_thread_id,
            session_file=launch.session_file(self.base_env, provider_thread_id),
            cwd=params.cwd,
            model=options.model if options.model is not UNSET else None,
            thinking=launch.THINKING.get(reasoning) if reasoning is not None else None,
            instructions=instructions or None,
            replace_prompt=params.instructionMode == "replace",
            skills=self.skills,
            tools=declared_tools(params.dynamicTools if params.dynamicTools is not UNSET else []),
            shell=launch.shell_overrides(params.threadId, env_vars),
        )

    async def _construct(self, params: protocol.ThreadStartParams, provider_thread_id: str) -> dict[str, Any]:
        existing = self.sessions.pop(params.threadId, None)
        if existing is not None:
            await existing.close()
        program = await self._program()
        spec = self._spec(params, provider_thread_id)
        env = launch.child_env(self.base_env, spec.shell, kit.RUNTIME_ONLY_ENV)
        session = Session(self.bridge, self.translator, spec, program, env)
        session.on_call, session.on_gone = self._tool_call, self._gone
        self.sessions[params.threadId] = session
        try:
            await session.start()
        except PiError as exc:
            if self.sessions.get(params.threadId) is session:
                del self.sessions[params.threadId]
            raise rpc.RpcError(rpc.BRIDGE_ERROR, exc.message) from None
        await self.bridge.open_session(params.threadId, provider_thread_id, session_restorable=True)
        declared = {name: tool.presentation for name, tool in spec.tools.items() if tool.presentation is not None}
        self.translator.reset(params.threadId, declared)
        return {"providerThreadId": provider_thread_id, "sessionRestorable": True}

    async def thread_start(self, params: protocol.ThreadStartParams) -> dict[str, Any]:
        return await self._construct(params, params.threadId)

    async def thread_resume(self, params: protocol.ThreadResumeParams) -> dict[str, Any]:
        return await self._construct(params, params.providerThreadId)

    async def thread_fork(self, params: protocol.ThreadForkParams) -> dict[str, Any]:
        source = launch.session_file(self.base_env, params.sourceProviderThreadId)
        target = launch.session_file(self.base_env, params.threadId)
        checkpoint = params.sourceProviderCheckpointId if params.sourceProviderCheckpointId is not UNSET else None
        try:
            fork.fork_file(source, target, params.sourceProviderThreadId, params.cwd, checkpoint)
        except fork.ForkError as exc:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, str(exc)) from None
        return await self._construct(params, params.threadId)

    # -- turns ([M12], [M14]) -------------------------------------------------------------------------------

    def _session(self, thread_id: str) -> Session:
        session = self.sessions.get(thread_id)
        if session is None or session.closing:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, NO_SESSION)
        return session

    async def turn_start(self, params: protocol.TurnStartParams) -> dict[str, Any]:
        session = self._session(params.threadId)
        if kit.is_standalone_compact(msgspec.to_builtins(params.input)):
            await session.start_compaction(params.clientRequestId)
            return {"threadId": params.threadId}
        await _relayed(session.prompt, params)
        return {"threadId": params.threadId}

    async def turn_steer(self, params: protocol.TurnSteerParams) -> dict[str, Any]:
        session = self._session(params.threadId)
        await _relayed(session.steer, params, refused=STEER_COMPACTING if session.compacting else None)
        return {"threadId": params.threadId}

    # -- stop, discard ([M15], [M16]) ----------------------------------------------------------------------

    async def thread_stop(self, params: protocol.ThreadStopParams) -> dict[str, Any]:
        session = self.sessions.get(params.threadId)
        if session is not None and not session.closing and params.intent == "interrupt":
            await session.end()
        checkpoint = await self._close(params.threadId)
        return {"ok": True, "providerCheckpointId": checkpoint}

    async def thread_discard(self, params: protocol.ThreadRefParams) -> dict[str, Any]:
        await self._close(params.threadId)
        launch.session_file(self.base_env, params.providerThreadId).unlink(missing_ok=True)
        return {"ok": True}

    async def _close(self, thread_id: str) -> str | None:
        session = self.sessions.get(thread_id)
        if session is None:
            return None
        checkpoint = await session.close()
        if self.sessions.get(thread_id) is session:
            del self.sessions[thread_id]
        self.bridge.forget(thread_id)
        return checkpoint

    def _gone(self, session: Session) -> None:
        if self.sessions.get(session.thread_id) is session:
            del self.sessions[session.thread_id]

    # -- client tools ([X2], [X3]) -------------------------------------------------------------------------

    async def _tool_call(self, session: Session, tool: str, arguments: Any) -> Any:
        if self.sessions.get(session.thread_id) is not session or session.closing:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, dynamic_tools.NOT_FOUND)
        self._calls += 1
        call = {
            "threadId": session.thread_id,
            "providerThreadId": session.provider_thread_id,
            "turnId": None,
            "callId": f"call-{self._calls}",
            "tool": tool,
            "arguments": arguments,
        }
        result = await self.bridge.request("item/tool/call", call)
        return dynamic_tools.valid_result(result)

    # -- models and skills ([M2]–[M5], [M17]) ---------------------------------------------------------------

    async def _available(self, cwd: str) -> list[Any]:
        """pi's available models for `cwd` ([M4], [M6]); `RpcError` when pi cannot list them."""
        program = await self._program()
        env = launch.child_env(self.base_env, {}, kit.RUNTIME_ONLY_ENV)
        try:
            return await available_models(launch.listing_argv(program), env=env, cwd=cwd, spawn=self.bridge.spawn)
        except PiError as exc:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, exc.message) from None

    async def model_list(self, params: protocol.ModelListParams) -> dict[str, Any]:
        cwd = os.path.abspath(params.cwd if params.cwd is not UNSET else os.getcwd())
        result, skipped = models.model_list(await self._available(cwd))
        for provider in skipped:
            log.warning(f'skipped an incomplete model from provider "{provider}"')
        return result

    async def skills_configure(self, params: maintenance.SkillsConfigureParams) -> dict[str, Any]:
        self.skills = tuple(root.path for root in params.roots)
        return {"ok": True}
