"""One `codex app-server` child and its JSON-RPC endpoint (spec §1.3–§1.6, §5.2): framing and correlation.

`classify` sorts a child's stdout line into response, request or notification exactly as the reference's reader
does, and the lines the bridge writes are `JSON.stringify`'d as the reference's were.

Each stdout line is handled to completion before the next is read: a notification's handler and a server
request's handler are awaited in the reader, and a response's continuation (the body of `exchange`) holds the
reader until it ends or sends the child its next request — trio gives no other way to make "the awaiting handler
resumes before the next line" hold (§5.2). Finalization runs the exit hook before pending requests fail (§1.4).
"""

from __future__ import annotations

import contextlib
import errno
import math
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from bbridge.core import js
from bbridge.kit.child import Child, StderrTail, StopPlan
from bbridge.wire import rpc

REQUEST_TIMEOUT_S = 60.0
EXIT_GRACE_S = 1.0
# §1.4 Kill: stdin closed, SIGTERM, SIGKILL (the group) 4 s later unless it exited; killing does not wait
STOP = StopPlan(grace_s=4.0, kill_wait_s=0, leftovers=None)
STDERR_TAIL_LINES = 40
MISSING_CLI = (
    "bb could not find the Codex CLI on this machine. Install Codex (https://developers.openai.com/codex/cli)"
    " or put `codex` on PATH, then retry."
)


@dataclass(slots=True, frozen=True)
class CodexResponse:
    """An answer to one of our requests: `error` (the reason, when it failed) or `result`."""

    id: float
    error: str | None
    result: Any


@dataclass(slots=True, frozen=True)
class CodexRequest:
    """A request of the child's, before it becomes the `ServerRequest` the session answers."""

    id: str | int | float
    method: str
    params: Any


@dataclass(slots=True, frozen=True)
class CodexNotification:
    """A notification of the child's; `message` keeps only `method` and `params` (codex's `emittedAtMs` is
    discarded)."""

    method: str
    message: dict[str, Any]


def _number(value: Any) -> float:
    """JS `Number()` of an id: numeric strings convert, anything else is NaN (matches nothing)."""
    if js.is_number(value):
        return float(value)
    try:
        return float(str(value).strip() or "0")
    except ValueError:
        return math.nan


def classify(line: str | bytes) -> CodexResponse | CodexRequest | CodexNotification | None:
    """One stdout line of a child; None for what the reader skips."""
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = js.trim(text)
    if not text:
        return None
    try:
        message = js.parse(text)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    ident, method = message.get("id"), message.get("method")
    has_id = isinstance(ident, str) or js.is_number(ident)
    if has_id and "method" not in message:
        error = message.get("error")
        if error:
            detail = error.get("message") if isinstance(error, dict) else None
            code = error.get("code") if isinstance(error, dict) else None
            reason = detail if isinstance(detail, str) and detail else None
            if reason is None:
                reason = (
                    f"codex app-server returned error code {js.stringify(code) if js.is_number(code) else 'unknown'}"
                )
            return CodexResponse(_number(ident), reason, None)
        return CodexResponse(_number(ident), None, message.get("result"))
    if not isinstance(method, str):
        return None
    if has_id and isinstance(ident, str | int | float):
        return CodexRequest(ident, method, message.get("params"))
    kept: dict[str, Any] = {"method": method}
    if "params" in message:
        kept["params"] = message["params"]
    return CodexNotification(method, kept)


def request_line(ident: int, method: str, params: Any = None) -> bytes:
    """A request to the child: `jsonrpc, id, method, params` (params omitted when there are none)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        message["params"] = params
    return js.stringify(message).encode() + b"\n"


def result_line(ident: Any, result: Any) -> bytes:
    return js.stringify({"jsonrpc": "2.0", "id": ident, "result": result}).encode() + b"\n"


def error_line(ident: Any, code: int, message: str) -> bytes:
    return js.stringify({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}).encode() + b"\n"


class ChildError(Exception):
    """A request the child did not answer with a result; `spawn_failed` selects the missing-CLI guidance (§1.6)."""

    def __init__(self, message: str, *, spawn_failed: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.spawn_failed = spawn_failed

    @property
    def runtime_message(self) -> str:
        """What the runtime is told when a launch-path request fails."""
        return MISSING_CLI if self.spawn_failed else self.message


class ServerRequest:
    """A request from the child; answer it at most once, never after the child is finalized (§1.4)."""

    def __init__(self, child: CodexChild, ident: str | int | float, method: str, params: Any) -> None:
        self.child, self.id, self.method, self.params = child, ident, method, params
        self.answered = False

    async def respond(self, result: Any) -> None:
        await self._answer(result_line(self.id, result))

    async def reject(self, code: int, message: str) -> None:
        await self._answer(error_line(self.id, code, message))

    async def _answer(self, line: bytes) -> None:
        if self.answered or self.child.finalized:
            return
        self.answered = True
        await self.child.write(line)


NotificationHandler = Callable[[CodexNotification], Awaitable[None]]
RequestHandler = Callable[[ServerRequest], Awaitable[None]]
ExitHandler = Callable[["CodexChild"], Awaitable[None]]


@dataclass(slots=True)
class _Pending:
    method: str
    settled: trio.Event = field(default_factory=trio.Event)
    released: trio.Event = field(default_factory=trio.Event)
    error: ChildError | None = None
    result: Any = None


def spawn_error_text(command: str, exc: OSError) -> str:
    """Node's text for a failed spawn (`spawn codex ENOENT`), which reaches the runtime in §3.13's `error`."""
    code = errno.errorcode.get(exc.errno or 0, "UNKNOWN")
    return f"spawn {command} {code}"


class CodexChild:
    """One app-server process; `run` it in a nursery (`nursery.start`), then `request` / `exchange` / `stop`."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        cwd: str,
        thread_id: str | None,
        on_notification: NotificationHandler | None = None,
        on_request: RequestHandler | None = None,
        on_exit: ExitHandler | None = None,
        request_timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.argv, self.env, self.cwd, self.thread_id = list(argv), env, cwd, thread_id
        self.on_notification, self.on_request, self.on_exit = on_notification, on_request, on_exit
        self.request_timeout = request_timeout
        self.process = Child(argv, env=env, cwd=cwd, thread_id=thread_id, tail=StderrTail(STDERR_TAIL_LINES))
        self.code: int | None = None
        self.signal: str | None = None
        self.spawn_failed = False
        self.finalized = False
        self._next_id = 1
        self._pending: dict[float, _Pending] = {}
        self._holding: _Pending | None = None  # the response whose continuation holds the reader
        self._stopping = trio.Event()
        self.ready = trio.Event()  # set once the process is spawned (or failed to spawn): requests may be sent

    # -- requests ------------------------------------------------------------------------------------------------

    async def request(self, method: str, params: Any = None) -> Any:
        """The child's result; `ChildError` on an error answer, a timeout, or the child's end."""
        async with self.exchange(method, params) as result:
            return result

    @contextlib.asynccontextmanager
    async def exchange(self, method: str, params: Any = None) -> AsyncIterator[Any]:
        """Like `request`, but the reader reads no further line until the body ends (§5.2).

        The body is the response's continuation: it may send the child more requests (that releases the reader),
        but must not wait on anything else that needs this child's output. Call only once `run` has started; a
        request written after stdin closed is rejected when the child finalizes.
        """
        if self.finalized:
            raise ChildError("codex app-server is not running", spawn_failed=self.spawn_failed)
        self._release()
        ident = self._next_id
        self._next_id += 1
        pending = self._pending[float(ident)] = _Pending(method)
        try:
            await self.write(request_line(ident, method, params))
            with trio.move_on_after(self.request_timeout):
                await pending.settled.wait()
            if not pending.settled.is_set():
                raise ChildError(
                    f"codex app-server did not answer {method} within {round(self.request_timeout * 1000)}ms"
                )
            if pending.error is not None:
                raise pending.error
            yield pending.result
        finally:
            self._pending.pop(float(ident), None)
            pending.released.set()

    def _release(self) -> None:
        if self._holding is not None:
            self._holding.released.set()
            self._holding = None

    async def write(self, line: bytes) -> None:
        """One line to the child's stdin; skipped once stdin is closed (§1.4)."""
        await self.process.write(line)

    # -- lifecycle -----------------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Spawn, serve until the child finalizes (exit hook included); kills its group when cancelled."""
        try:
            proc = await self.process.spawn()
        except OSError as exc:
            self.spawn_failed = True
            self.process.stderr.add(spawn_error_text(self.argv[0], exc))
            task_status.started()
            self.ready.set()
            await self._finalize()
            return
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        task_status.started()
        self.ready.set()
        try:
            async with trio.open_nursery() as nursery:
                drained = [trio.Event(), trio.Event()]
                nursery.start_soon(self._read_stdout, drained[0])
                nursery.start_soon(_until_done, drained[1], self.process.pump_stderr)
                nursery.start_soon(self._escalate)
                status = await proc.wait()
                with trio.move_on_after(EXIT_GRACE_S):  # `close` may never come: a grandchild can hold the pipes
                    for event in drained:
                        await event.wait()
                nursery.cancel_scope.cancel()
            if status < 0:
                self.signal = signal.Signals(-status).name
            else:
                self.code = status
            await self._finalize()
        finally:
            with trio.CancelScope(shield=True):
                self.process.kill_group()
                for pipe in (proc.stdin, proc.stdout, proc.stderr):  # finalizing destroys the pipes (§1.4)
                    await pipe.aclose()
                await proc.wait()

    def stop(self) -> None:
        """Close stdin, SIGTERM, SIGKILL 4 s later unless finalized; does not wait (§1.4)."""
        self._stopping.set()

    async def _escalate(self) -> None:
        await self._stopping.wait()
        await self.process.stop(STOP)

    @property
    def stderr_tail(self) -> list[str]:
        return self.process.stderr.lines

    def exit_message(self, prefix: str = "codex app-server exited") -> str:
        """`<prefix> (code c, signal s)[: <stderr tail>]`; §3.13 passes `codex app-server exited unexpectedly`."""
        code = "null" if self.code is None else str(self.code)
        sig = self.signal or "null"
        tail = "\n".join(self.stderr_tail)
        return f"{prefix} (code {code}, signal {sig})" + (f": {tail}" if tail else "")

    async def _finalize(self) -> None:
        self.finalized = True
        self.process.stdin = None  # nothing more is written (its pipe is closed when `run` ends)
        self._release()
        if self.on_exit is not None:
            await self.on_exit(self)
        error = ChildError(self.exit_message(), spawn_failed=self.spawn_failed)
        for pending in self._pending.values():
            if not pending.settled.is_set():
                pending.error = error
                pending.settled.set()

    # -- reading -------------------------------------------------------------------------------------------------

    async def _read_stdout(self, done: trio.Event) -> None:
        try:
            async for line in self.process.lines():
                await self._handle(line)
        finally:
            done.set()

    async def _handle(self, line: bytes) -> None:
        if self.finalized:
            return
        message = classify(line)
        if isinstance(message, CodexResponse):
            pending = self._pending.get(message.id)
            if pending is None or pending.settled.is_set():
                return
            if message.error is not None:
                pending.error = ChildError(message.error)
            else:
                pending.result = message.result
            self._holding = pending
            pending.settled.set()
            await pending.released.wait()
        elif isinstance(message, CodexRequest):
            request = ServerRequest(self, message.id, message.method, message.params)
            if self.on_request is None:
                await request.reject(rpc.METHOD_NOT_FOUND, f'Unhandled codex request "{message.method}"')
            else:
                await self.on_request(request)
        elif isinstance(message, CodexNotification) and self.on_notification is not None:
            await self.on_notification(message)


async def _until_done(done: trio.Event, fn: Callable[[], Awaitable[None]]) -> None:
    try:
        await fn()
    finally:
        done.set()
