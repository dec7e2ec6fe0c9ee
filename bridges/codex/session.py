"""One bb thread's codex session: its app-server child, translator and emission path (spec §2.11, §3, §4).

Everything a session child says reaches the runtime only while the session is current (registered under its
thread and not closing), so a replaced or released construction's late output, requests and exit are dropped
or refused. Notifications are translated and emitted in the child's reader, one batch per notification (§5.1);
requests that wait on the runtime are written before the reader moves on and answered from their own task.
The emission path is the session's: `DeltaPath` (what of each translated batch is written when, §3.2) and
`delta_params` (the batch in the reference's member order).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import msgspec
import structlog
import trio
from msgspec import UNSET, UnsetType

from bbridge.core import grammar as g
from bbridge.kit import Bridge, DeltaEncoder, DeltaError
from bbridge.wire import protocol, rpc

from . import approvals, launch
from .child import (
    ChildError,
    CodexChild,
    CodexNotification,
    ExitHandler,
    NotificationHandler,
    RequestHandler,
    ServerRequest,
)
from .translate import Translator


class Owner(Protocol):
    """What a session needs of the bridge that owns it (`CodexBridge`)."""

    sessions: dict[str, Session]
    bridge: Bridge

    def launch_child(
        self,
        *,
        thread_id: str | None,
        on_notification: NotificationHandler | None = None,
        on_request: RequestHandler | None = None,
        on_exit: ExitHandler | None = None,
    ) -> CodexChild: ...

    async def configure_skills(self, child: CodexChild) -> None: ...


log = structlog.get_logger("bridges.codex")

EXITED = "codex app-server exited unexpectedly"
NOT_CURRENT = "codex session is no longer current"
TOOL_CALL = "item/tool/call"
APPROVALS = frozenset({approvals.COMMAND, approvals.FILE_CHANGE, approvals.PERMISSIONS})

# `thread/delta` params with the reference's member order (spec Appendix B): the Structs' but for three, a
# `turn.boundary`'s turn id first, an `unhandled`'s turn id before its `parentRef`, a tool item's `server` before
# its `tool`.
delta_params = DeltaEncoder(
    kinds={
        "turn.boundary": ("kind", "providerTurnId", "status", "error", "providerCheckpointId"),
        "unhandled": ("kind", "raw", "rawType", "vouchedTurn", "providerTurnId", "parentRef"),
    },
    items={"tool": ("type", "server", "tool")},
)


@dataclass(frozen=True, slots=True)
class Construction:
    """What a rebuild reuses from the original construction (§2.6.3): cwd, instruction mode, dynamic tools."""

    cwd: str
    instruction_mode: Literal["append", "replace"]
    dynamic_tools: list[protocol.DynamicTool] | UnsetType


def signature(cwd: str, options: protocol.ExecutionOptions) -> tuple[Any, ...]:
    """The execution settings a live child cannot change; a turn asking for others rebuilds the session."""
    extra: dict[str, Any] = {} if options.providerOptions is UNSET else options.providerOptions
    return (
        cwd,
        options.reasoningLevel,
        extra.get("memoryEnabled"),
        extra.get("providerSubagentsEnabled"),
        type(options),  # the permission mode (the options' tag)
        options.permissionScope,
        options.approvalReviewer,
        options.permissionEscalation,
    )


def bb_tools(dynamic_tools: list[protocol.DynamicTool] | UnsetType) -> dict[str, g.Presentation | None]:
    """The bb-injected tool names, with the presentation a definition carries (§2.4 step 2)."""
    tools = [] if dynamic_tools is UNSET else dynamic_tools
    return {tool.name: None if tool.presentation is UNSET else tool.presentation for tool in tools}


def _tool_call(params: Any) -> dict[str, Any]:
    """`item/tool/call` params codex must send (§4.2); raises ValueError naming the first bad member."""
    if not isinstance(params, dict):
        raise ValueError("params: expected object")
    for name in ("threadId", "callId", "tool"):
        if not (isinstance(params.get(name), str) and params[name]):
            raise ValueError(f"{name}: expected non-empty string")
    turn = params.get("turnId")
    if not (turn is None or (isinstance(turn, str) and turn)):
        raise ValueError("turnId: expected non-empty string or null")
    return params


class Session:
    """A construction of one bb thread: created by `thread/start|resume|fork` or a rebuild."""

    def __init__(
        self,
        owner: Owner,
        thread_id: str,
        serial: int,
        construction: Construction,
        settings: tuple[Any, ...],
        *,
        resumed: str | None = None,
        awaiting_replayed_usage: bool,
    ) -> None:
        self.owner = owner
        self.thread_id = thread_id
        self.serial = serial
        self.construction = construction
        self.signature = settings
        self.codex_thread: str | None = resumed
        self.translator = Translator(bb_tools(construction.dynamic_tools))
        self.path = DeltaPath(awaiting_replayed_usage=awaiting_replayed_usage)
        self.child: CodexChild | None = None
        self.closing = False
        self._boundary = trio.Event()  # set (and renewed) whenever a batch settles a turn

    @property
    def current(self) -> bool:
        return not self.closing and self.owner.sessions.get(self.thread_id) is self

    # -- emission (§3.2) -------------------------------------------------------------------------------------

    async def emit(self, deltas: list[g.Delta]) -> None:
        batch = self.path.push(deltas)
        if batch:
            await self._write([self._batch_line(batch)])
        if any(isinstance(delta, g.TurnBoundary) for delta in deltas):
            self._boundary.set()
            self._boundary = trio.Event()

    async def settled(self, turn: str, limit: float) -> None:
        """Wait (at most `limit` s) until codex's boundary for `turn` has been emitted, or the child is gone."""
        with trio.move_on_after(limit):
            while turn in self.path.open_turns and self.child is not None and self.current:
                await self._boundary.wait()

    async def announce(self, codex_id: str) -> None:
        """`thread/identity`, then whatever waited for it as one batch; once per session."""
        if self.path.announced:
            return
        if self.codex_thread is None:
            self.codex_thread = codex_id
        identity = {"threadId": self.thread_id, "providerThreadId": self.codex_thread, "sessionRestorable": True}
        lines = [rpc.encode_notification("thread/identity", identity)]
        buffered = self.path.announce()
        if buffered:
            lines.append(self._batch_line(buffered))
        await self._write([line for line in lines if line])

    def _batch_line(self, deltas: list[g.Delta]) -> bytes:
        try:
            return rpc.encode_notification("thread/delta", msgspec.Raw(delta_params(self.thread_id, deltas)))
        except DeltaError as exc:  # a translator bug must not take the thread down: log it, drop the batch
            log.error("dropped an invalid thread/delta batch", thread=self.thread_id, error=str(exc))
            return b""

    async def _write(self, lines: list[bytes]) -> None:
        await self.owner.bridge.conn.send_lines([line for line in lines if line])

    # -- the child ---------------------------------------------------------------------------------------------

    async def start_child(self) -> CodexChild:
        """Spawn and handshake the session child (§1.5); `ChildError` when it cannot serve."""
        child = self.owner.launch_child(
            thread_id=self.thread_id,
            on_notification=self._on_notification,
            on_request=self._on_request,
            on_exit=self._on_exit,
        )
        self.child = child
        await child.ready.wait()
        await child.request("initialize", launch.INITIALIZE_PARAMS)
        with contextlib.suppress(ChildError):  # API-key auth cannot read rate limits: no snapshot (§1.5 step 2)
            self.translator.seed_rate_limits(await child.request("account/rateLimits/read"))
        await self.owner.configure_skills(child)
        return child

    def release(self) -> None:
        """Stop the session: nothing more reaches the runtime, the child is stopped without waiting."""
        self.closing = True
        if self.child is not None:
            self.child.stop()
            self.child = None

    async def _on_notification(self, note: CodexNotification) -> None:
        if not self.current:
            return
        params = note.message.get("params")
        if note.method == "thread/started" and isinstance(params, dict):
            started = params.get("thread")
            if isinstance(started, dict) and isinstance(started.get("id"), str) and started["id"]:
                await self.announce(started["id"])
        await self.emit(self.translator.translate(note.message))

    async def _on_exit(self, child: CodexChild) -> None:
        """An unexpected exit settles open turns as failed and says so (§3.13); the next turn rebuilds."""
        if child is not self.child or not self.current:
            return
        self.child = None
        message = child.exit_message(EXITED)
        failed: list[g.Delta] = [
            g.TurnBoundary(providerTurnId=turn, status="failed", error=g.BoundaryError(message=message))
            for turn in self.path.open_turns
        ]
        await self.emit(failed)
        error: dict[str, Any] = {"threadId": self.thread_id}
        if self.codex_thread is not None:
            error["providerThreadId"] = self.codex_thread
        error["message"] = message
        await self._write([rpc.encode_notification("error", error)])
        if self.codex_thread is not None:
            await self.emit(self.translator.child_exited(self.codex_thread))

    # -- requests from codex (§4) ------------------------------------------------------------------------------

    async def _on_request(self, request: ServerRequest) -> None:
        if not self.current:
            await request.reject(rpc.BRIDGE_ERROR, NOT_CURRENT)
            return
        if request.method == TOOL_CALL:
            try:
                params = _tool_call(request.params)
            except ValueError as exc:
                await request.reject(rpc.INVALID_PARAMS, f"Invalid codex tool call params: {exc}")
                return
            arguments = params.get("arguments")
            call = {
                "providerThreadId": self.codex_thread or params["threadId"],
                "threadId": self.thread_id,
                "turnId": params.get("turnId"),
                "callId": params["callId"],
                "tool": params["tool"],
                "arguments": {} if arguments is None else arguments,
                "providerNativeIds": True,
            }
            await self._relay(request, TOOL_CALL, call, lambda result: result)
            return
        if request.method not in APPROVALS:
            error = approvals.unhandled_request(request.method)
            await request.reject(error.code, error.message)
            return
        try:
            approval = approvals.decode(request.method, request.params, self.thread_id, self.codex_thread)
        except approvals.ApprovalError as exc:
            await request.reject(exc.code, exc.message)
            return
        if approval.deltas:
            await self.emit(approval.deltas)
        subject = approval.subject
        await self._relay(
            request,
            "interaction/request",
            msgspec.to_builtins(approval.request),
            lambda resolution: approvals.encode(subject, resolution),
        )

    async def _relay(self, request: ServerRequest, method: str, params: Any, answer: Callable[[Any], Any]) -> None:
        """Ask the runtime and answer codex from another task; the request is on the wire before we return."""
        sent = trio.Event()

        async def ask() -> None:
            sent.set()  # no checkpoint until the request holds the runtime connection's write lock
            try:
                result = await self.owner.bridge.request(method, params)
            except rpc.RpcError as exc:
                await request.reject(rpc.BRIDGE_ERROR, exc.message)
                return
            try:
                await request.respond(answer(result))
            except approvals.ApprovalError as exc:
                await request.reject(rpc.BRIDGE_ERROR, exc.message)

        self.owner.bridge.spawn(ask)
        await sent.wait()


class DeltaPath:
    """The emission rules of §3.2 for one session: identity first, replayed usage filtered."""

    def __init__(self, *, awaiting_replayed_usage: bool) -> None:
        self.awaiting_replayed_usage = awaiting_replayed_usage
        self.open_turns: dict[str, None] = {}
        self.announced = False
        self._buffer: list[g.Delta] = []

    def push(self, deltas: list[g.Delta]) -> list[g.Delta] | None:
        """The batch to write now, or None (nothing, or held until identity is announced)."""
        if not deltas:
            return None
        survivors = self._filter(deltas)
        if not self.announced:
            self._buffer.extend(survivors)
            return None
        return survivors

    def announce(self) -> list[g.Delta] | None:
        """Identity was written: the buffered deltas as one batch (None when there are none or it was done)."""
        if self.announced:
            return None
        self.announced = True
        buffered, self._buffer = self._buffer, []
        return self._filter(buffered) if buffered else None

    def _filter(self, deltas: list[g.Delta]) -> list[g.Delta]:
        kept: list[g.Delta] = []
        for delta in deltas:
            if isinstance(delta, g.TurnOpen):
                self.awaiting_replayed_usage = False
                if isinstance(delta.providerTurnId, str):
                    self.open_turns[delta.providerTurnId] = None
            elif isinstance(delta, g.TurnBoundary) and isinstance(delta.providerTurnId, str):
                self.open_turns.pop(delta.providerTurnId, None)
            if self.awaiting_replayed_usage and isinstance(delta, g.Usage):
                continue
            if self.awaiting_replayed_usage and isinstance(delta, g.ContextWindow):
                delta = g.ContextWindow(
                    used=delta.used, size=delta.size, estimated=delta.estimated, attach=delta.attach
                )
            kept.append(delta)
        return kept
