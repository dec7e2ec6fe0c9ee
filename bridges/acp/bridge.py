"""The runtime side of the ACP bridge: the protocol-2 methods, one ACP session per thread.

Capabilities: no session restore at the handshake (each session reports
`sessionRestorable` from the agent's `loadSession`), `fork: "tip"` (ACP
`session/fork` clones whole sessions; checkpoint forks answer -32003),
runtime-enforced approvals, `steerMode: "queue"`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
import trio
from msgspec import UNSET

from bbridge.kit import Bridge
from bbridge.kit.mcp_host import declared_tools
from bbridge.wire import protocol, rpc
from bridges.acp.approvals import Policy
from bridges.acp.child import AgentProcess, Launch, agent_env, launch_from_options
from bridges.acp.messages import CLIENT_INFO, PROTOCOL_VERSION, JsonObject
from bridges.acp.session import DEFAULT_MODEL_ID, Kind, Session, TurnInput

log = structlog.get_logger("bridges.acp")

CAPABILITIES = protocol.Capabilities(fork="tip", approvalEnforcedBy="runtime", steerMode="queue")
MODEL_LIST_TIMEOUT_S = 30.0
AGENT_MANAGED = [
    {"reasoningEffort": "medium", "description": "Reasoning effort is managed by the connected ACP agent."}
]
DEFAULT_MODEL: JsonObject = {
    "id": DEFAULT_MODEL_ID,
    "model": DEFAULT_MODEL_ID,
    "displayName": "Agent default",
    "description": "Model selection is managed by the connected ACP agent.",
    "supportedReasoningEfforts": AGENT_MANAGED,
    "defaultReasoningEffort": "medium",
    "isDefault": True,
}


class AcpBridge:
    """Routes runtime requests to per-thread sessions; `default` is the agent from the command line, if any."""

    def __init__(
        self, default: Launch | None, passthrough: Sequence[str] = (), base_env: Mapping[str, str] | None = None
    ) -> None:
        self.default = default
        self.passthrough = tuple(passthrough)
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.sessions: dict[str, Session] = {}
        self.bridge = Bridge("acp", CAPABILITIES)
        self.bridge.handle_sessions(self)

    # -- sessions --------------------------------------------------------------

    def _launch(self, method: str, provider_options: Any) -> Launch:
        launch = launch_from_options(provider_options, self.default)
        if launch is None:
            raise rpc.RpcError(
                rpc.INVALID_PARAMS,
                f'Invalid params for "{method}": options.providerOptions.acpLaunchSpec is required '
                "(or start the bridge as `python -m bridges.acp -- AGENT_CMD ARGS...`)",
            )
        return launch

    async def _construct(
        self, method: str, params: protocol.ThreadStartParams, kind: Kind, source: str | None
    ) -> JsonObject:
        options = params.options
        provider_options = options.providerOptions if options.providerOptions is not UNSET else {}
        launch = self._launch(method, provider_options)
        existing = self.sessions.pop(params.threadId, None)
        if existing is not None:  # settle the old session's work before the new one's identity
            await existing.interrupt()
        cwd = launch.cwd or params.cwd
        extra_roots = provider_options.get("additionalWorkspaceWriteRoots")
        roots = (cwd, *(r for r in extra_roots if isinstance(r, str))) if isinstance(extra_roots, list) else (cwd,)
        shell = options.envVars if options.envVars is not UNSET else None
        agent = AgentProcess(
            launch, cwd=cwd, env=agent_env(self.base_env, self.passthrough, launch, shell), thread_id=params.threadId
        )
        instructions = options.instructions.strip() if options.instructions is not UNSET else ""
        session = Session(
            self.bridge,
            params.threadId,
            agent,
            policy=Policy(ask=not isinstance(options, protocol.FullOptions), write_roots=roots),
            instructions=instructions or None,
            gone=self._forget,
            tools=declared_tools(params.dynamicTools if params.dynamicTools is not UNSET else []),
        )
        await session.open(kind, cwd, source=source, model=options.model if options.model is not UNSET else None)
        self.sessions[params.threadId] = session
        if params.input is not UNSET and params.input:  # the runtime never sends it; a direct caller may
            session.start_turn(TurnInput(None, params.input))
        return {"providerThreadId": session.provider_thread_id, "sessionRestorable": session.supports_load}

    def _forget(self, session: Session) -> None:
        if self.sessions.get(session.thread_id) is session:
            del self.sessions[session.thread_id]
        self.bridge.forget(session.thread_id)

    async def thread_start(self, params: protocol.ThreadStartParams) -> JsonObject:
        return await self._construct("thread/start", params, "start", None)

    async def thread_resume(self, params: protocol.ThreadResumeParams) -> JsonObject:
        return await self._construct("thread/resume", params, "resume", params.providerThreadId)

    async def thread_fork(self, params: protocol.ThreadForkParams) -> JsonObject:
        if params.sourceProviderCheckpointId is not UNSET:
            raise rpc.RpcError(
                rpc.FORK_CHECKPOINT_UNSUPPORTED,
                "ACP session/fork cannot fork at a checkpoint; only tip forks are supported",
            )
        return await self._construct("thread/fork", params, "fork", params.sourceProviderThreadId)

    def _session(self, thread_id: str) -> Session:
        session = self.sessions.get(thread_id)
        if session is None or session.stopping:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, "No active ACP session")
        return session

    async def turn_start(self, params: protocol.TurnStartParams) -> JsonObject:
        session = self._session(params.threadId)
        if session.active is not None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, "A turn is already active")
        pending = TurnInput(params.clientRequestId, params.input, trio.Event())
        session.start_turn(pending)
        assert pending.answered is not None
        await pending.answered.wait()
        if pending.error is not None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, pending.error)
        return {"threadId": params.threadId}

    async def turn_steer(self, params: protocol.TurnSteerParams) -> JsonObject:
        await self._session(params.threadId).steer(params)
        return {"threadId": params.threadId}

    async def thread_stop(self, params: protocol.ThreadStopParams) -> JsonObject:
        session = self.sessions.pop(params.threadId, None)
        if session is not None:
            await (session.interrupt() if params.intent == "interrupt" else session.release())
            self.bridge.forget(params.threadId)
        return {}

    async def thread_discard(self, params: protocol.ThreadRefParams) -> JsonObject:
        """ACP agents keep no provider-side thread to delete."""
        return {}

    # -- models ----------------------------------------------------------------

    async def model_list(self, params: protocol.ModelListParams) -> JsonObject:
        """The agent's own models (a throwaway session's `models`), else the agent-managed default entry."""
        provider_options = params.providerOptions if params.providerOptions is not UNSET else {}
        launch = launch_from_options(provider_options, self.default)
        models: list[JsonObject] = []
        if launch is not None:
            cwd = launch.cwd or (params.cwd if params.cwd is not UNSET else os.getcwd())
            with trio.move_on_after(MODEL_LIST_TIMEOUT_S):
                models = await self._discover_models(launch, cwd)
        return {"models": models or [DEFAULT_MODEL], "selectedOnlyModels": []}

    async def _discover_models(self, launch: Launch, cwd: str) -> list[JsonObject]:
        agent = AgentProcess(
            launch, cwd=cwd, env=agent_env(self.base_env, self.passthrough, launch, None), thread_id=None
        )
        try:
            await agent.start(self.bridge.spawn)
            await agent.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientInfo": CLIENT_INFO,
                    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
                },
            )
            session = await agent.request("session/new", {"cwd": cwd, "mcpServers": []})
        except rpc.RpcError as exc:
            log.warning("ACP model discovery failed", agent=launch.label, error=exc.message)
            return []
        finally:
            with trio.CancelScope(shield=True):
                await agent.terminate()
        state = session.get("models") if isinstance(session, dict) else None
        available = state.get("availableModels") if isinstance(state, dict) else None
        current = state.get("currentModelId") if isinstance(state, dict) else None
        return [
            {
                "id": m["modelId"],
                "model": m["modelId"],
                "displayName": m.get("name") if isinstance(m.get("name"), str) else m["modelId"],
                "description": m.get("description") if isinstance(m.get("description"), str) else "",
                "supportedReasoningEfforts": AGENT_MANAGED,
                "defaultReasoningEffort": "medium",
                "isDefault": m["modelId"] == current,
            }
            for m in available or []
            if isinstance(m, dict) and isinstance(m.get("modelId"), str) and m["modelId"]
        ]
