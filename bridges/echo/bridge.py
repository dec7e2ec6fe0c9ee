"""The echo bridge's runtime methods: the kit's typed session handlers, routed to one `Session` per thread.

Each request is decoded once, by the kit (`Bridge.handle_sessions`), into its `protocol` params. Provider
sessions are minted here (`echo_<nonce>_<n>`) and their checkpoint histories kept for the process's life, so a
fork may start from any checkpoint this process handed out, even of a released session. The echo bridge has no
maintenance methods (`provider/*` are -32601) and no provider process.
"""

from __future__ import annotations

import uuid

from msgspec import UNSET

from bbridge.kit import Bridge
from bbridge.wire import protocol, rpc
from bridges.echo.session import Session

CAPABILITIES = protocol.Capabilities(sessionRestore=True, fork="checkpoint", steerMode="inject")
ECHO_MODEL = {
    "id": "echo",
    "model": "echo",
    "displayName": "Echo",
    "description": "Repeats the prompt",
    "supportedReasoningEfforts": [{"reasoningEffort": "low", "description": "Echo at once"}],
    "defaultReasoningEffort": "low",
    "isDefault": True,
}


class EchoBridge:
    """The request handlers of one echo bridge process, and its sessions."""

    def __init__(self) -> None:
        self.bridge = Bridge("echo", CAPABILITIES)
        self.nonce = uuid.uuid4().hex[:12]
        self.minted = 0
        self.sessions: dict[str, Session] = {}
        self.histories: dict[str, list[str]] = {}  # providerThreadId -> checkpoints, kept after release for forks
        self.bridge.handle_sessions(self)

    async def model_list(self, params: protocol.ModelListParams) -> dict[str, object]:
        return {"models": [ECHO_MODEL], "selectedOnlyModels": []}

    # -- sessions --------------------------------------------------------------

    async def thread_start(self, params: protocol.ThreadStartParams) -> dict[str, object]:
        self.minted += 1
        session = await self._open(params, f"echo_{self.nonce}_{self.minted}", [])
        if params.input is not UNSET and params.input:
            session.start_turn(params.input, None)
        return {"providerThreadId": session.provider_thread_id, "sessionRestorable": True}

    async def thread_resume(self, params: protocol.ThreadResumeParams) -> dict[str, object]:
        ptid = params.providerThreadId
        if not ptid.startswith("echo_"):
            raise rpc.RpcError(rpc.SESSION_NOT_RESTORABLE, f'Echo session "{ptid}" cannot be restored')
        await self._open(params, ptid, self.histories.setdefault(ptid, []))
        return {"providerThreadId": ptid, "sessionRestorable": True}

    async def thread_fork(self, params: protocol.ThreadForkParams) -> dict[str, object]:
        source = self.histories.get(params.sourceProviderThreadId, [])
        checkpoint = params.sourceProviderCheckpointId
        if checkpoint is UNSET:
            history = list(source)
        elif checkpoint in source:
            history = source[: source.index(checkpoint) + 1]
        else:
            message = f'Unknown checkpoint "{checkpoint}" in echo session "{params.sourceProviderThreadId}"'
            raise rpc.RpcError(rpc.BRIDGE_ERROR, message)
        self.minted += 1
        session = await self._open(params, f"echo_{self.nonce}_{self.minted}", history)
        return {"providerThreadId": session.provider_thread_id, "sessionRestorable": True}

    async def _open(self, params: protocol.ThreadStartParams, ptid: str, history: list[str]) -> Session:
        """Settle the thread's old session, then identity + reset for the new one (§4.2)."""
        old = self.sessions.get(params.threadId)
        if old is not None:
            await old.settle()
        self.histories[ptid] = history
        tools = params.dynamicTools or []
        session = self.sessions[params.threadId] = Session(
            self.bridge, params.threadId, ptid, params.cwd, history, tools
        )
        await self.bridge.open_session(params.threadId, ptid, session_restorable=True)
        return session

    async def thread_stop(self, params: protocol.ThreadStopParams) -> dict[str, object]:
        session = self.sessions.get(params.threadId)
        if session is None:
            return {}
        if params.intent == "interrupt":
            await session.settle()
        else:  # release: detach quietly, whatever the provider was doing
            session.release()
            del self.sessions[params.threadId]
            self.bridge.forget(params.threadId)
        checkpoint = session.checkpoint
        return {} if checkpoint is None else {"providerCheckpointId": checkpoint}

    async def thread_discard(self, params: protocol.ThreadRefParams) -> dict[str, object]:
        session = self.sessions.pop(params.threadId, None)
        if session is not None:
            session.discard()
        self.bridge.forget(params.threadId)
        return {}

    # -- turns -------------------------------------------------------------------

    def _session(self, thread_id: str) -> Session:
        session = self.sessions.get(thread_id)
        if session is None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f"Unknown thread: {thread_id}")
        return session

    async def turn_start(self, params: protocol.TurnStartParams) -> dict[str, object]:
        self._session(params.threadId).start_turn(params.input, params.clientRequestId)
        return {}

    async def turn_steer(self, params: protocol.TurnSteerParams) -> dict[str, object]:
        await self._session(params.threadId).steer(params)
        return {}
