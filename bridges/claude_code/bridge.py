"""The runtime side of the Claude Code bridge: protocol-2 methods, one CLI session per thread (spec §3).

Capabilities: restorable sessions, checkpoint forks, approvals enforced by the provider (the bridge's own
policy, §5), steers injected into the running turn.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any

import msgspec
import trio
from msgspec import UNSET

from bbridge.kit import Bridge, Wording
from bbridge.wire import protocol, rpc
from bridges.claude_code import approvals as perm
from bridges.claude_code import fork, launch
from bridges.claude_code.dynamic_tools import DynamicTool
from bridges.claude_code.maintenance import Maintenance
from bridges.claude_code.models import ModelList
from bridges.claude_code.session import Counters, Session, Settings

CAPABILITIES = protocol.Capabilities(
    sessionRestore=True, fork="checkpoint", approvalEnforcedBy="provider", steerMode="inject"
)
REPLACED_WHILE_PENDING = "Thread session replaced while awaiting permission approval"
STOPPED_WHILE_PENDING = "Thread stopped while awaiting permission approval"
STREAM_REPLACED = "Thread session replaced after Claude SDK stream ended"
CONFIG_CHANGED = "Claude session restarted: construction-scoped settings changed"
NO_SESSION = "No active session"
# §3.0, §1.1: the reference's error texts and the prefix of every stderr line
WORDING = Wording("Unknown method: {method}", "Invalid params for {method}: {issues}", "params.", issues_as_data=False)
LOG_PREFIX = "claude-code bridge: "
_PROVIDER_OPTION_TYPES: dict[str, type] = {
    "workflowsEnabled": bool,
    "memoryEnabled": bool,
    "providerSubagentsEnabled": bool,
    "envUnset": list,
    "additionalWorkspaceWriteRoots": list,
}


def provider_options(options: protocol.ExecutionOptions) -> dict[str, Any]:
    """The `providerOptions` the bridge reads; a known member of the wrong type fails the request (§3.4)."""
    given = options.providerOptions if options.providerOptions is not UNSET else {}
    for name, kind in _PROVIDER_OPTION_TYPES.items():
        if name in given and not isinstance(given[name], kind):
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f"providerOptions.{name} must be a {kind.__name__}")
    for name in ("envUnset", "additionalWorkspaceWriteRoots"):
        if not all(isinstance(v, str) for v in given.get(name, [])):
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f"providerOptions.{name} must list strings")
    plan = given.get("claudeCodePermissionMode")
    if plan is not None and plan != "plan":
        raise rpc.RpcError(rpc.BRIDGE_ERROR, 'providerOptions.claudeCodePermissionMode must be "plan"')
    return given


def claude_mode(options: protocol.ExecutionOptions) -> str:
    """The canonical permission policy in Claude's vocabulary (§3.5)."""
    if isinstance(options, protocol.FullOptions):
        return "bypassPermissions"
    return "auto" if isinstance(options, protocol.AutoOptions) else "acceptEdits"


class SkillRoot(msgspec.Struct):
    path: str


class SkillsConfigureParams(msgspec.Struct):
    """`skills/configure`: skill roots every later construction loads as plugin directories (§3.12)."""

    roots: list[SkillRoot] = msgspec.field(default_factory=list)


def without_plan_mentions(item: protocol.TextInput) -> str:
    """A plan-mode prompt without its `/plan` command mentions (and one space after each); offsets are UTF-16."""
    units = item.text.encode("utf-16-le", "surrogatepass")
    cuts = sorted(
        (m.start, m.end)
        for m in item.mentions
        if isinstance(m.resource, protocol.CommandResource) and m.resource.name == "plan" and m.resource.trigger == "/"
    )
    for start, end in reversed(cuts):
        end += 1 if units[2 * end : 2 * end + 2] == " ".encode("utf-16-le") else 0
        units = units[: 2 * start] + units[2 * end :]
    return units.decode("utf-16-le", "surrogatepass")


def prompt_text(items: list[protocol.PromptInput], plan: bool = False) -> str:
    """The user line's text (§3.7): text items, attachments as pointers the CLI can read."""
    parts: list[str] = []
    for item in items:
        if isinstance(item, protocol.TextInput):
            text = without_plan_mentions(item) if plan else item.text
            if text:
                parts.append(text)
        elif isinstance(item, protocol.ImageInput):
            parts.append(f"[Attached image: {item.url}]")
        elif isinstance(item, protocol.LocalImageInput):
            parts.append(f"[Attached image. It is on disk at {item.path} — use the Read tool to view it.]")
        else:
            details = [
                d for d in (item.mimeType or None, None if item.sizeBytes is UNSET else f"{item.sizeBytes} bytes") if d
            ]
            name = f' "{item.name}"' if item.name else ""
            about = f" ({', '.join(details)})" if details else ""
            parts.append(f"[Attached file{name}{about}. It is on disk at {item.path} — use the Read tool to view it.]")
    return "\n".join(parts)


class ClaudeCodeBridge:
    """Routes runtime requests to per-thread sessions."""

    def __init__(self, base_env: Mapping[str, str] | None = None) -> None:
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.sessions: dict[str, Session] = {}
        self.counters = Counters()
        self.plugin_dirs: tuple[str, ...] = ()
        self.models = ModelList()
        self.bridge = Bridge("claude-code", CAPABILITIES, wording=WORDING, log_prefix=LOG_PREFIX)
        self.bridge.handle_sessions(self)
        self.bridge.method("skills/configure", SkillsConfigureParams)(self.skills_configure)
        self.maintenance = Maintenance(self.base_env)
        self.bridge.handle_maintenance(self.maintenance)

    # -- constructions (§3.6) ---------------------------------------------------------

    def _settings(
        self, params: protocol.ThreadStartParams, *, resume: str | None = None, session_id: str | None = None
    ) -> Settings:
        options = params.options
        given = provider_options(options)
        table_mode = claude_mode(options)
        mode = "plan" if given.get("claudeCodePermissionMode") == "plan" else table_mode
        workspace = options.permissionScope == "workspace"
        sandbox = workspace and mode in ("acceptEdits", "auto")
        roots = tuple(given.get("additionalWorkspaceWriteRoots", [])) if workspace else ()
        model = options.model if options.model is not UNSET else None
        tools = tuple(
            DynamicTool(t.name, t.description, t.inputSchema, t.presentation or None)
            for t in (params.dynamicTools if params.dynamicTools is not UNSET else [])
        )
        env_vars = options.envVars if options.envVars is not UNSET else {}
        unset = tuple(given.get("envUnset", []))
        disallowed = tuple(params.disallowedTools if params.disallowedTools is not UNSET else [])
        instructions = options.instructions if options.instructions is not UNSET else ""
        spec = launch.Launch(
            permission_mode=mode,
            model=model,
            reasoning_level=options.reasoningLevel if options.reasoningLevel is not UNSET else None,
            memory=given.get("memoryEnabled", True),
            workflows=given.get("workflowsEnabled", False),
            resume=resume,
            session_id=session_id,
            dynamic_tools=tuple(t.name for t in tools),
            disallowed_tools=disallowed,
            sandbox=sandbox,
            write_roots=roots,
            plugin_dirs=self.plugin_dirs,
        )
        construction = (
            env_vars, unset, tools, roots, instructions, params.cwd, disallowed, params.instructionMode,
            mode, options.permissionScope, self.plugin_dirs,
        )  # fmt: skip
        try:
            env = launch.environment(self.base_env, env_vars, unset, model)
        except launch.LaunchError as exc:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, str(exc)) from None
        return Settings(
            cwd=params.cwd,
            env=env,
            launch=spec,
            instructions=instructions,
            instruction_mode=params.instructionMode,
            tools=tools,
            escalation=options.permissionEscalation,
            restore_mode=table_mode,
            subagents=given.get("providerSubagentsEnabled", True),
            construction=construction,
        )

    async def _open(
        self, thread_id: str, provider_thread_id: str, settings: Settings, grants: list[perm.Grant]
    ) -> Session:
        session = Session(self.bridge, self.counters, thread_id, provider_thread_id, settings, grants)
        self.sessions[thread_id] = session
        try:
            await session.start()
        except launch.LaunchError as exc:
            self._forget(session)
            raise rpc.RpcError(rpc.BRIDGE_ERROR, str(exc)) from None
        await self.bridge.open_session(thread_id, provider_thread_id, session_restorable=True)
        return session

    def _forget(self, session: Session) -> None:
        if self.sessions.get(session.thread_id) is session:
            del self.sessions[session.thread_id]

    async def _close(self, session: Session, message: str, graceful: bool) -> None:
        await session.close(message, graceful=graceful)
        self._forget(session)

    async def thread_start(self, params: protocol.ThreadStartParams) -> dict[str, Any]:
        existing = self.sessions.get(params.threadId)
        if existing is not None:
            existing.mark_closing(REPLACED_WHILE_PENDING)
            self.bridge.spawn(self._close, existing, REPLACED_WHILE_PENDING, False)
        provider_thread_id = str(uuid.uuid4())
        settings = self._settings(params, session_id=provider_thread_id)
        await self._open(params.threadId, provider_thread_id, settings, [])
        return {"providerThreadId": provider_thread_id, "sessionRestorable": True}

    async def thread_resume(self, params: protocol.ThreadResumeParams) -> dict[str, Any]:
        settings = self._settings(params, resume=params.providerThreadId)
        existing = self.sessions.get(params.threadId)
        live = existing is not None and not existing.closing and not existing.stream_ended
        same = existing is not None and existing.provider_thread_id == params.providerThreadId
        if existing is not None and live and same and existing.settings.construction == settings.construction:
            await existing.apply_live(settings.launch, settings.subagents)
            existing.settings.escalation = settings.escalation
            return {"providerThreadId": params.providerThreadId, "sessionRestorable": True}
        if existing is not None:
            if not existing.closing:
                await existing.settle()
                await self.bridge.notify(
                    "session/replaced", _replaced(params.threadId, params.providerThreadId, CONFIG_CHANGED)
                )
                existing.mark_closing(REPLACED_WHILE_PENDING)
                self.bridge.spawn(self._close, existing, REPLACED_WHILE_PENDING, False)
            else:
                await existing.closed.wait()
        await self._open(params.threadId, params.providerThreadId, settings, [])
        return {"providerThreadId": params.providerThreadId, "sessionRestorable": True}

    async def thread_fork(self, params: protocol.ThreadForkParams) -> dict[str, Any]:
        """A transcript copy resumed under its new id (§1.7); a failed copy creates no session."""
        existing = self.sessions.get(params.threadId)
        if existing is not None:
            existing.mark_closing(REPLACED_WHILE_PENDING)
            self.bridge.spawn(self._close, existing, REPLACED_WHILE_PENDING, False)
        checkpoint = params.sourceProviderCheckpointId if params.sourceProviderCheckpointId is not UNSET else None
        try:
            new_id = await trio.to_thread.run_sync(
                fork.fork, self.base_env, params.cwd, params.sourceProviderThreadId, checkpoint
            )
        except (fork.ForkError, OSError) as exc:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, str(exc)) from None
        await self._open(params.threadId, new_id, self._settings(params, resume=new_id), [])
        return {"providerThreadId": new_id, "sessionRestorable": True}

    # -- turns (§3.7, §3.8, §3.10) ------------------------------------------------------

    async def _writable(self, thread_id: str, *, steer: bool) -> Session:
        session = self.sessions.get(thread_id)
        if session is None or session.closing:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, NO_SESSION)
        reason = STREAM_REPLACED if session.stream_ended else None if steer else session.restart_reason
        if reason is None:
            return session
        provider_thread_id = session.provider_thread_id
        session.mark_closing(reason)
        await session.settle()
        await self.bridge.notify("session/replaced", _replaced(thread_id, provider_thread_id, reason))
        self.bridge.spawn(self._close, session, reason, False)
        spec = launch.changed(session.settings.launch, resume=provider_thread_id, session_id=None)
        settings = Settings(**{**vars(session.settings), "launch": spec})
        return await self._open(thread_id, provider_thread_id, settings, session.grants)

    async def _turn(self, params: protocol.TurnStartParams, *, steer: bool) -> dict[str, Any]:
        options = params.options
        given = provider_options(options)
        text = prompt_text(params.input, plan=given.get("claudeCodePermissionMode") == "plan")
        if not text:
            raise rpc.RpcError(rpc.INVALID_PARAMS, "Missing input text")
        session = await self._writable(params.threadId, steer=steer)
        spec = session.settings.launch
        wanted = launch.changed(
            spec,
            model=options.model if options.model is not UNSET else spec.model,
            reasoning_level=options.reasoningLevel if options.reasoningLevel is not UNSET else spec.reasoning_level,
            memory=given.get("memoryEnabled", spec.memory),
            workflows=given.get("workflowsEnabled", spec.workflows),
        )
        await session.apply_live(wanted, given.get("providerSubagentsEnabled", session.settings.subagents))
        if given.get("claudeCodePermissionMode") == "plan" and session.mode != "plan":
            await session.control({"subtype": "set_permission_mode", "mode": "plan"})
            session.mode = "plan"
        await session.send_prompt(text, params.clientRequestId, options.permissionEscalation)
        return {"threadId": params.threadId}

    async def turn_start(self, params: protocol.TurnStartParams) -> dict[str, Any]:
        return await self._turn(params, steer=False)

    async def turn_steer(self, params: protocol.TurnSteerParams) -> dict[str, Any]:
        return await self._turn(params, steer=True)

    # -- ends (§3.9, §3.11, §3.12) ---------------------------------------------------------

    async def thread_stop(self, params: protocol.ThreadStopParams) -> dict[str, Any]:
        session = self.sessions.get(params.threadId)
        if session is not None:
            if params.intent == "interrupt" and not session.closing:
                await session.settle()
            await self._close(session, STOPPED_WHILE_PENDING, True)
        return {"ok": True}

    async def thread_discard(self, params: protocol.ThreadRefParams) -> dict[str, Any]:
        session = self.sessions.get(params.threadId)
        if session is not None:
            await self._close(session, STOPPED_WHILE_PENDING, True)
        return {"ok": True}

    async def skills_configure(self, params: SkillsConfigureParams) -> dict[str, Any]:
        self.plugin_dirs = tuple(root.path for root in params.roots)
        return {"ok": True}

    async def model_list(self, params: protocol.ModelListParams) -> dict[str, Any]:
        """The catalog with the models the CLI offers (§3.2), probed with the bridge's own environment."""
        try:
            return await self.models.get(self.base_env, os.getcwd())
        except launch.LaunchError as exc:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, str(exc)) from None


def _replaced(thread_id: str, provider_thread_id: str, reason: str) -> dict[str, Any]:
    return {"threadId": thread_id, "providerThreadId": provider_thread_id, "reason": reason, "contextLost": False}
