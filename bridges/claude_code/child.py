"""One Claude Code CLI child (spec §1.8–§1.9, §2): stream-json lines both ways and the control channel.

The child runs on the kit's `Child` (spawn, record-mode tee, stderr tail, stop). Its stdout is read line by line,
strictly in order: a `control_response` settles the bridge's own control request of that `request_id`, a
`control_request` (`can_use_tool`, `hook_callback`, `mcp_message`, ...) or `control_cancel_request` is handed to
the session, which answers it through `answer`, and every other line is an SDK message. Member orders follow
the reference's SDK (bridge-originated control requests put `request_id` first).
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import structlog
import trio

from bbridge.core import js
from bbridge.kit.child import Child, StderrTail, StopPlan
from bbridge.wire import rpc
from bridges.claude_code.dynamic_tools import MCP_SERVER
from bridges.claude_code.launch import MISSING_CLI, LaunchError

log = structlog.get_logger("bridges.claude_code")

Json = Any
Message = dict[str, Any]
TERM_AFTER_S = 2.0
# the abrupt close (§1.9): stdin closed, SIGTERM if the child has not exited 2 s later, SIGKILL 5 s after that
STOP = StopPlan(wait_s=TERM_AFTER_S, grace_s=5.0)
STDERR_TAIL_BYTES = 4000
INPUT_CLOSED = "Claude SDK input stream is closed"
IGNORED_TYPES = frozenset({"keep_alive", "transcript_mirror"})
HOOK_EVENTS = (
    "PermissionDenied",
    "PermissionRequest",
    "PostToolUse",
    "PostToolUseFailure",
    "PreToolUse",
    "SubagentStart",
    "SubagentStop",
)


class Waiter:
    """One of the bridge's control requests: `done` is set once `answer` holds its response (or the session's end)."""

    __slots__ = ("answer", "done")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.answer: dict[str, Any] = {}

    def settle(self, response: dict[str, Any]) -> None:
        self.answer = response
        self.done.set()

    @property
    def error(self) -> str | None:
        """The CLI's error text, when it answered with one."""
        return str(self.answer.get("error")) if self.answer.get("subtype") == "error" else None


class ClaudeChild:
    """A `claude` child's endpoint: writes lines, correlates control requests and their responses by id."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str], cwd: str, thread_id: str) -> None:
        self.process = Child(
            argv, env=env, cwd=cwd, thread_id=thread_id, tail=StderrTail(0, max_bytes=STDERR_TAIL_BYTES)
        )
        self.thread_id = thread_id
        self._requests: dict[str, Waiter] = {}

    async def spawn(self) -> None:
        """Start the child; `LaunchError` with the runtime's text when it cannot be."""
        try:
            await self.process.spawn()
        except FileNotFoundError:
            raise LaunchError(MISSING_CLI) from None
        except OSError as exc:
            raise LaunchError(f"Failed to spawn Claude Code process: {exc}") from None

    @property
    def input_open(self) -> bool:
        return self.process.stdin is not None

    async def write(self, line: Json) -> None:
        """One line to the child; a child whose input is gone fails the runtime request that wrote (§3.7)."""
        if not await self.process.write(encode(line)):
            raise rpc.RpcError(rpc.BRIDGE_ERROR, INPUT_CLOSED)

    async def post(self, body: dict[str, Any]) -> None:
        """Write a control request whose answer nobody awaits (the `initialize` of a session child)."""
        await self.write(control_request(request_id(), body))

    async def send(self, body: dict[str, Any]) -> Waiter:
        """Write a control request under a fresh id; its `Waiter` settles when the CLI answers it."""
        ident = request_id()
        waiter = Waiter()
        self._requests[ident] = waiter
        await self.write(control_request(ident, body))
        return waiter

    async def request(self, body: dict[str, Any]) -> Any:
        """A control request; its `success` response, or `RpcError` with the CLI's error text."""
        waiter = await self.send(body)
        await waiter.done.wait()
        if waiter.error is not None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, waiter.error)
        return waiter.answer.get("response")

    async def answer(self, request_id: str, body: Json, error: str | None = None) -> None:
        """Answer one of the CLI's control requests; a child whose input is gone gets nothing."""
        line = control_error(request_id, error) if error is not None else control_success(request_id, body)
        with contextlib.suppress(rpc.RpcError):
            await self.write(line)

    def fail_requests(self, message: str) -> None:
        """Every control request still unanswered settles as an error with `message` (the session is ending)."""
        for waiter in self._requests.values():
            waiter.settle({"subtype": "error", "error": message})
        self._requests.clear()

    async def read(
        self,
        on_message: Callable[[Message], Awaitable[None]],
        on_request: Callable[[Message], None],
        on_cancel: Callable[[Json], None],
    ) -> None:
        """Read stdout to its end: responses settle here, the CLI's requests and cancels go to their callbacks
        (which must not block the reader), SDK messages are awaited in order."""
        async for line in self.process.lines():
            if not line.strip():
                continue
            try:
                message = js.parse(line)
            except msgspec.DecodeError:
                log.debug("skipped a non-JSON line from the Claude CLI", threadId=self.thread_id)
                continue
            if not isinstance(message, dict):
                continue
            kind = message.get("type")
            if kind == "control_response":
                self._settle(message.get("response"))
            elif kind == "control_request":
                on_request(message)
            elif kind == "control_cancel_request":
                on_cancel(message.get("request_id"))
            elif kind not in IGNORED_TYPES:
                await on_message(message)

    def _settle(self, response: Json) -> None:
        if not isinstance(response, dict):
            return
        waiter = self._requests.pop(str(response.get("request_id")), None)
        if waiter is not None:
            waiter.settle(response)

    async def exit_code(self) -> int | None:
        """The child's exit status once its stdout ended: waited for up to 2 s, None if it has not exited."""
        with trio.move_on_after(TERM_AFTER_S):
            await self.process.wait()
        return self.process.returncode

    @property
    def stderr_text(self) -> str:
        return self.process.stderr.text

    async def pump_stderr(self) -> None:
        await self.process.pump_stderr()

    async def close_stdin(self) -> None:
        await self.process.close_stdin()

    async def stop(self) -> None:
        """The abrupt close (§1.9) by `STOP`."""
        await self.process.stop(STOP)


# -- lines (§2.2–§2.5) ------------------------------------------------------------------


def encode(value: Json) -> bytes:
    """One line for the child as `JSON.stringify` writes it (§8.1; tool inputs go back verbatim), and its newline."""
    return (js.stringify(value) + "\n").encode()


def request_id() -> str:
    """A fresh id for a bridge-originated control request (13 base-36 characters, as the reference's)."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return "".join(secrets.choice(alphabet) for _ in range(13))


def control_request(request_id: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"request_id": request_id, "type": "control_request", "request": body}


def control_success(request_id: str, body: Json) -> dict[str, Any]:
    return {"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": body}}


def control_error(request_id: str, text: str) -> dict[str, Any]:
    return {"type": "control_response", "response": {"subtype": "error", "request_id": request_id, "error": text}}


def initialize(*, mcp: bool, instructions: str, instruction_mode: str) -> dict[str, Any]:
    """The first request to every child: the seven hooks, the in-process MCP server, the system prompt."""
    hooks = {event: [{"hookCallbackIds": [f"hook_{i}"]}] for i, event in enumerate(HOOK_EVENTS)}
    body: dict[str, Any] = {"subtype": "initialize", "hooks": hooks}
    if mcp:
        body["sdkMcpServers"] = [MCP_SERVER]
    if instruction_mode == "replace":
        body["systemPrompt"] = [instructions]
    elif instructions:
        body["appendSystemPrompt"] = instructions
    return body


def hook_event(callback_id: Json) -> str | None:
    """The hook event a callback id was registered for."""
    match = re.fullmatch(r"hook_(\d+)", callback_id) if isinstance(callback_id, str) else None
    index = int(match.group(1)) if match else -1
    return HOOK_EVENTS[index] if 0 <= index < len(HOOK_EVENTS) else None


def user_line(text: str, session_id: str, uuid: str) -> dict[str, Any]:
    return {
        "type": "user",
        "message": {"role": "user", "content": text},
        "parent_tool_use_id": None,
        "session_id": session_id,
        "uuid": uuid,
    }
