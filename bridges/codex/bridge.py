"""The runtime side of the Codex bridge: protocol-2 methods over `codex app-server` children (spec §1.2, §2).

Sessions are keyed by bb thread; each construction gets its own session child. `model/list` keeps one cached
child, thread-ref operations on a thread with no live child use a one-shot maintenance child. Every method is
routed through the kit's typed handlers (`handle_sessions`, `handle_maintenance`, `method`), so each request
is decoded once, by the kit, into its protocol type; `codex_params` builds codex's requests from that.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import msgspec
import trio

from bbridge import kit
from bbridge.core import grammar as g
from bbridge.kit import Bridge, Wording
from bbridge.wire import maintenance, protocol, rpc

from . import codex_params, launch, models
from .child import ChildError, CodexChild, ExitHandler, NotificationHandler, RequestHandler, ServerRequest
from .gitroots import git_roots
from .maintenance import Maintenance
from .session import Construction, Session, signature

CAPABILITIES = protocol.Capabilities(
    sessionRestore=True,
    threadArchive=True,
    threadRename=True,
    threadGoalClear=True,
    fork="checkpoint",
    approvalEnforcedBy="runtime",
    steerMode="inject",
)
WORDING = Wording('Unknown method "{method}"', 'Invalid params for "{method}": {issues}', issues_as_data=False)
SESSION_NOT_RESTORABLE = -32002
ARCHIVED = re.compile(r"\b(?:session|thread)\s+\S+\s+is archived\b", re.IGNORECASE)
CHILD_GONE = "codex app-server exited; the session was restored from its rollout."
SETTINGS_CHANGED = "Execution settings changed; the codex session was rebuilt to apply them."
NO_RESTORE_ID = "codex session has no provider thread id to restore from its rollout"
ZERO_WORK_DELAY_S = 0.25
INTERRUPT_SETTLE_S = 10.0  # how long `thread/stop` waits for codex's interrupted boundary


def _failure(exc: Exception) -> str:
    return exc.runtime_message if isinstance(exc, ChildError) else str(exc)


def _refuse(kind: str) -> RequestHandler:
    async def refuse(request: ServerRequest) -> None:
        await request.reject(rpc.METHOD_NOT_FOUND, f"{kind} codex app-server does not serve requests")

    return refuse


class CodexBridge:
    """Routes runtime requests to per-thread codex sessions."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)
        self.sessions: dict[str, Session] = {}
        self.roots: dict[str, list[str]] = {}  # the active git writable roots of each thread (§2.5)
        self.skill_roots: list[str] | None = None
        self.serial = 0
        self.zero_work = 0
        self._models: CodexChild | None = None
        self._models_lock = trio.Lock()
        self.bridge = Bridge("codex", CAPABILITIES, wording=WORDING)
        self.bridge.handle_sessions(self)
        method = self.bridge.method
        method("thread/name/set", protocol.ThreadNameSetParams)(self.thread_name_set)
        method("thread/archive", protocol.ThreadRefParams)(self.thread_archive)
        method("thread/unarchive", protocol.ThreadRefParams)(self.thread_unarchive)
        method("thread/goal/clear", protocol.ThreadRefParams)(self.thread_goal_clear)
        method("skills/configure", maintenance.SkillsConfigureParams)(self.skills_configure)
        self.maintenance = Maintenance(self.environ)
        self.bridge.handle_maintenance(self.maintenance)

    # -- children ----------------------------------------------------------------------------------------------

    def launch_child(
        self,
        *,
        thread_id: str | None,
        on_notification: NotificationHandler | None = None,
        on_request: RequestHandler | None = None,
        on_exit: ExitHandler | None = None,
    ) -> CodexChild:
        """A child started in the bridge's nursery; wait on its `ready` before the first request."""
        child = CodexChild(
            launch.argv(self.environ),
            env=launch.child_env(self.environ),
            cwd=os.getcwd(),
            thread_id=thread_id,
            on_notification=on_notification,
            on_request=on_request,
            on_exit=on_exit,
        )
        self.bridge.spawn(child.run)
        return child

    async def configure_skills(self, child: CodexChild) -> None:
        if self.skill_roots is not None:
            await child.request("skills/extraRoots/set", {"extraRoots": self.skill_roots})

    async def _process_child(self, kind: str, on_exit: ExitHandler | None = None) -> CodexChild:
        child = self.launch_child(thread_id=None, on_request=_refuse(kind), on_exit=on_exit)
        await child.ready.wait()
        try:
            await child.request("initialize", launch.INITIALIZE_PARAMS)
            await self.configure_skills(child)
        except ChildError:
            child.stop()
            raise
        return child

    # -- model/list (§2.2) -------------------------------------------------------------------------------------

    async def model_list(self, params: protocol.ModelListParams) -> Any:
        try:
            child = await self._model_child()
            return models.model_list(await child.request("model/list", {}))
        except (ChildError, models.ModelListError, launch.LaunchError) as exc:
            self._retire_models()
            raise rpc.RpcError(rpc.BRIDGE_ERROR, _failure(exc)) from None

    async def _model_child(self) -> CodexChild:
        async with self._models_lock:  # concurrent first calls share one start
            if self._models is None or self._models.finalized:
                self._models = await self._process_child("model-list", on_exit=self._models_exited)
            return self._models

    async def _models_exited(self, child: CodexChild) -> None:
        if self._models is child:
            self._models = None

    def _retire_models(self) -> None:
        if self._models is not None:
            self._models.stop()
            self._models = None

    # -- constructions (§2.4) ----------------------------------------------------------------------------------

    async def thread_start(self, params: protocol.ThreadStartParams) -> dict[str, Any]:
        return await self._answer_construction("thread/start", params)

    async def thread_resume(self, params: protocol.ThreadResumeParams) -> dict[str, Any]:
        return await self._answer_construction("thread/resume", params)

    async def thread_fork(self, params: protocol.ThreadForkParams) -> dict[str, Any]:
        return await self._answer_construction("thread/fork", params)

    async def _answer_construction(self, method: str, request: codex_params.Constructions) -> dict[str, Any]:
        session = await self._construct(method, request)
        return {"providerThreadId": session.codex_thread, "sessionRestorable": True}

    async def _construct(self, method: str, request: codex_params.Constructions) -> Session:
        thread_id, options = request.threadId, request.options
        existing = self.sessions.pop(thread_id, None)
        if existing is not None:
            existing.release()
        self.serial += 1
        resumed = request.providerThreadId if isinstance(request, protocol.ThreadResumeParams) else None
        session = Session(
            self,
            thread_id,
            self.serial,
            Construction(request.cwd, request.instructionMode, request.dynamicTools),
            signature(request.cwd, options),
            resumed=resumed,
            awaiting_replayed_usage=method != "thread/start",
        )
        self.sessions[thread_id] = session
        if resumed is not None:
            await session.announce(resumed)
        await session.emit([g.SessionReset()])
        full = codex_params.permissions(options).full
        staged = [] if full else await trio.to_thread.run_sync(git_roots, request.cwd)
        try:
            child = await session.start_child()
            level = options.reasoningLevel
            if level in codex_params.UNSUPPORTED_EFFORTS:
                raise codex_params.ParamsError(f"Codex does not support the {level} reasoning level.")
            construction = codex_params.construction(request, staged)
            async with child.exchange(method, construction) as result:
                codex_id = _thread_id(method, result)
                session.codex_thread = codex_id
                self.roots[thread_id] = staged
                await session.announce(codex_id)
        except (ChildError, codex_params.ParamsError, launch.LaunchError) as exc:
            if self.sessions.get(thread_id) is session:
                del self.sessions[thread_id]
            session.release()
            message = _failure(exc)
            archived = method == "thread/resume" and ARCHIVED.search(message) is not None
            raise rpc.RpcError(SESSION_NOT_RESTORABLE if archived else rpc.BRIDGE_ERROR, message) from None
        return session

    # -- turns (§2.6, §2.7) ------------------------------------------------------------------------------------

    def _active(self, thread_id: str) -> Session:
        session = self.sessions.get(thread_id)
        if session is None or session.closing:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f'No active codex session for thread "{thread_id}"')
        return session

    async def _reconciled(self, session: Session, options: protocol.ExecutionOptions) -> Session:
        """The session a turn runs on: rebuilt from its rollout when its child died or settings changed."""
        if session.child is None:
            reason = CHILD_GONE
        elif signature(session.construction.cwd, options) != session.signature:
            reason = SETTINGS_CHANGED
        else:
            return session
        codex_id = session.codex_thread
        if codex_id is None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, NO_RESTORE_ID)
        # the notice comes first, as protocol.md §4.3 requires (the reference wrote it after identity and reset)
        replaced = {"threadId": session.thread_id, "providerThreadId": codex_id, "reason": reason, "contextLost": False}
        await self.bridge.notify("session/replaced", replaced)
        try:
            rebuilt = await self._construct(
                "thread/resume",
                protocol.ThreadResumeParams(
                    threadId=session.thread_id,
                    providerThreadId=codex_id,
                    cwd=session.construction.cwd,
                    options=options,
                    instructionMode=session.construction.instruction_mode,
                    dynamicTools=session.construction.dynamic_tools,
                ),
            )
        except rpc.RpcError as exc:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, exc.message) from None
        return rebuilt

    async def turn_start(self, request: protocol.TurnStartParams) -> dict[str, Any]:
        thread_id = request.threadId
        session = await self._reconciled(self._active(thread_id), request.options)
        codex_id, child = session.codex_thread, session.child
        if codex_id is None or child is None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f'No provider thread identity for thread "{thread_id}"')
        creq = request.clientRequestId
        session.translator.queue_input(codex_id, creq)
        if kit.is_standalone_compact(msgspec.to_builtins(request.input)):
            codex_method, body = "thread/compact/start", {"threadId": codex_id}
        else:
            codex_method, body = "turn/start", codex_params.turn(codex_id, request, self.roots.get(thread_id))
        try:
            async with child.exchange(codex_method, body):
                self.bridge.spawn(self._zero_work, session, codex_id, creq)
        except ChildError as exc:
            session.translator.unqueue_input(codex_id, creq)
            raise rpc.RpcError(rpc.BRIDGE_ERROR, exc.message) from None
        return {"threadId": thread_id}

    async def _zero_work(self, session: Session, codex_id: str, creq: str) -> None:
        """A turn codex accepted but never started settles as an empty completed turn (§2.6.2)."""
        await trio.sleep(ZERO_WORK_DELAY_S)
        if not session.current or session.path.open_turns:
            return
        if not session.translator.unqueue_input(codex_id, creq):
            return
        self.zero_work += 1
        turn = f"zero-work-{self.zero_work}"
        await session.emit(
            [
                g.TurnOpen(providerTurnId=turn),
                g.InputAccepted(clientRequestId=creq, providerTurnId=turn),
                g.TurnBoundary(providerTurnId=turn, status="completed"),
            ]
        )

    async def turn_steer(self, request: protocol.TurnSteerParams) -> dict[str, Any]:
        thread_id = request.threadId
        session = self._active(thread_id)
        codex_id, child = session.codex_thread, session.child
        if codex_id is None or child is None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f'No active codex session for thread "{thread_id}"')
        if not session.path.open_turns:  # protocol.md §3.3.9 (the reference asked codex and answered -32000)
            raise rpc.RpcError(rpc.NO_ACTIVE_TURN, f'No active codex turn for thread "{thread_id}"')
        expected = request.expectedTurnId
        steer = {
            "threadId": codex_id,
            "expectedTurnId": expected,
            "input": [codex_params.user_input(entry) for entry in request.input],
        }
        try:
            async with child.exchange("turn/steer", steer):
                accepted = g.InputAccepted(clientRequestId=request.clientRequestId, providerTurnId=expected)
                await session.emit([accepted])
        except ChildError as exc:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, exc.message) from None
        return {"threadId": thread_id}

    # -- ends and thread refs (§2.8, §2.9) -----------------------------------------------------------------------

    def _release(self, thread_id: str) -> None:
        session = self.sessions.pop(thread_id, None)
        if session is not None:
            session.release()

    async def thread_stop(self, typed: protocol.ThreadStopParams) -> dict[str, Any]:
        if typed.intent == "release":
            self._release(typed.threadId)
            return {"ok": True}
        session = self.sessions.get(typed.threadId)
        if session is None or session.closing or session.child is None or session.codex_thread is None:
            return {"ok": True}
        if typed.activeTurnId is None:
            return {"ok": True}
        interrupt = {"threadId": session.codex_thread, "turnId": typed.activeTurnId}
        try:
            await session.child.request("turn/interrupt", interrupt)
        except ChildError as exc:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, exc.message) from None
        # codex settles the turn right after answering; protocol.md §3.3.10 wants that settlement before our
        # answer (the reference answered first, codex-bridge.md §2.8), so wait for it, boundedly
        await session.settled(typed.activeTurnId, INTERRUPT_SETTLE_S)
        return {"ok": True}

    async def thread_name_set(self, typed: protocol.ThreadNameSetParams) -> dict[str, Any]:
        name = {"threadId": typed.providerThreadId, "name": typed.title}
        await self._thread_ref(typed, "thread/name/set", name)
        return {"ok": True}

    async def thread_archive(self, typed: protocol.ThreadRefParams) -> dict[str, Any]:
        await self._thread_ref(typed, "thread/archive", {"threadId": typed.providerThreadId})
        self._release(typed.threadId)
        return {"ok": True}

    async def thread_discard(self, typed: protocol.ThreadRefParams) -> dict[str, Any]:
        """Codex has no discard: the rollout is archived, as `thread/archive` does."""
        return await self.thread_archive(typed)

    async def thread_unarchive(self, typed: protocol.ThreadRefParams) -> dict[str, Any]:
        await self._thread_ref(typed, "thread/unarchive", {"threadId": typed.providerThreadId})
        return {"ok": True}

    async def thread_goal_clear(self, typed: protocol.ThreadRefParams) -> dict[str, Any]:
        await self._thread_ref(typed, "thread/goal/clear", {"threadId": typed.providerThreadId})
        # the reference answered `{"ok":true}` here too, which protocol.md §3.3.11 (and our daemon) refuses
        return {"cleared": True}

    async def _thread_ref(self, typed: protocol.ThreadRefParams, method: str, body: dict[str, Any]) -> None:
        """A thread-ref method on the thread's live child, else on a one-shot maintenance child."""
        session = self.sessions.get(typed.threadId)
        live = session.child if session is not None and not session.closing else None
        try:
            if live is not None and not live.finalized:
                await live.request(method, body)
            else:
                await self._one_shot(method, body)
        except (ChildError, launch.LaunchError) as exc:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, _failure(exc)) from None

    async def _one_shot(self, method: str, body: dict[str, Any]) -> None:
        child = await self._process_child("maintenance")
        try:
            await child.request(method, body)
        finally:
            child.stop()

    async def skills_configure(self, typed: maintenance.SkillsConfigureParams) -> dict[str, Any]:
        self.skill_roots = [root.path for root in typed.roots]
        for session in list(self.sessions.values()):
            child = session.child
            if session.closing or child is None or child.finalized:
                continue
            try:
                await self.configure_skills(child)
            except ChildError as exc:
                raise rpc.RpcError(rpc.BRIDGE_ERROR, exc.message) from None
        return {"ok": True}


def _thread_id(method: str, result: Any) -> str:
    """`result.thread.id` of a construction, the one result shape the bridge validates (§1.4)."""
    thread = result.get("thread") if isinstance(result, dict) else None
    ident = thread.get("id") if isinstance(thread, dict) else None
    if not (isinstance(ident, str) and ident):
        raise ChildError(f"codex app-server returned an unexpected {method} result: thread.id: expected a string")
    return ident
