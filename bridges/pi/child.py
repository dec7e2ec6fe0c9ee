"""One `pi --mode rpc` child and its endpoint (pi-bridge.md Appendix B, C).

pi's RPC wire is JSONL in both directions, framed on LF only (U+2028/U+2029 are valid inside JSON strings, so a
splitter on Unicode line breaks would cut lines). Commands carry an `id`; pi answers each with a
`{"type":"response","id","command","success",["data"|"error"]}` line. `extension_ui_request` lines are the UI
sub-protocol: the bridge has no UI, so every dialog is answered `cancelled` (fire-and-forget UI calls need no
answer). Every other line is a session event, handed in order to the session's pump through a channel, so the
pump may send commands (a leaf id, the context usage) and await their answers while the reader goes on. The
messages pi ended (`message_end`) are also kept by number until the pump asks for them, so an answer can be read
as of an earlier event (`messages_between`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from bbridge.core import js
from bbridge.kit import record_child_io
from bbridge.wire import rpc
from bridges.pi import launch

log = structlog.get_logger("bridges.pi")

MAX_LINE_BYTES = 64 * 1024 * 1024
REQUEST_TIMEOUT_S = 60.0
KILL_AFTER_S = 4.0
STDERR_TAIL_LINES = 20
DIALOGS = ("select", "confirm", "input", "editor")
EVENT_BUFFER = 4096


class PiError(Exception):
    """A command pi refused (`success: false`), did not answer in time, or could not answer (it exited)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(slots=True)
class Pending:
    """A command in flight; `after` counts the events pi wrote before its answer."""

    done: trio.Event = field(default_factory=trio.Event)
    answer: dict[str, Any] | None = None
    after: int = 0


class PiChild:
    """One pi process: `await start(nursery)`, then `command`, `events`, `close`."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str], cwd: str, thread_id: str) -> None:
        self.argv, self.env, self.cwd, self.thread_id = list(argv), env, cwd, thread_id
        self.stderr_tail: list[str] = []
        self.exit_code: int | None = None
        self.exited = trio.Event()
        self._proc: trio.Process | None = None
        self._stdin: trio.abc.SendStream | None = None
        self._ids = itertools.count(1)
        self._pending: dict[str, Pending] = {}
        self._write_lock = trio.Lock()
        self._send, self.events = trio.open_memory_channel[tuple[int, Any]](EVENT_BUFFER)  # (number, event)
        self.sent = 0  # events handed to the pump
        # (number, message) of each `message_end` not yet asked for; at most a channel's worth are ahead of the pump
        self._ended: deque[tuple[int, Any]] = deque(maxlen=EVENT_BUFFER + 1)
        self._log = log.bind(threadId=thread_id)

    async def start(self, spawn: Callable[..., None]) -> None:
        """Spawn pi in its own process group (its readers run as `spawn`'s tasks); `OSError` when it cannot."""
        proc = await trio.lowlevel.open_process(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        send, receive = record_child_io(proc.stdin, proc.stdout, thread_id=self.thread_id)
        self._proc, self._stdin = proc, send
        spawn(self._read, receive)
        spawn(self._read_stderr, proc.stderr)
        spawn(self._wait)

    # -- commands -------------------------------------------------------------------------------------------

    async def command(self, kind: str, timeout: float | None = REQUEST_TIMEOUT_S, **fields: Any) -> Any:
        """Send `{id, type: kind, **fields}` and return the answer's `data`; `PiError` on a refusal or an end."""
        pending = await self.send(kind, **fields)
        return await self.answer(pending, kind, timeout)

    async def send(self, kind: str, **fields: Any) -> Pending:
        """Write a command; its answer is awaited separately (`answer`), so a caller may do work in between."""
        ident = f"bb-{next(self._ids)}"
        pending = self._pending[ident] = Pending()
        if self.exited.is_set():
            pending.answer = {"success": False, "error": self.ended_text()}
            pending.done.set()
            return pending
        await self.write({"id": ident, "type": kind, **fields})
        return pending

    async def answer(self, pending: Pending, kind: str, timeout: float | None = REQUEST_TIMEOUT_S) -> Any:
        with trio.move_on_after(timeout if timeout is not None else float("inf")):
            await pending.done.wait()
        answer = pending.answer
        if answer is None:
            raise PiError(f"pi did not answer {kind} within {timeout:g}s")
        if answer.get("success") is not True:
            raise PiError(launch.through_bbridge(str(answer.get("error") or f"pi refused {kind}")))
        return answer.get("data")

    async def write(self, message: dict[str, Any]) -> None:
        """One JSONL line (JavaScript's JSON: the model sees text exactly as given)."""
        data = (js.stringify(message) + "\n").encode()
        async with self._write_lock:
            if self._stdin is None:
                return
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self._stdin.send_all(data)

    def messages_between(self, after: int, upto: int) -> list[Any]:
        """The messages of the `message_end` events numbered `after` < n <= `upto`; those up to `after` are
        forgotten (the pump asks with rising `after`)."""
        while self._ended and self._ended[0][0] <= after:
            self._ended.popleft()
        return [message for number, message in self._ended if number <= upto]

    def ended_text(self) -> str:
        tail = "\n".join(self.stderr_tail[-5:])
        status = f"code {self.exit_code}" if self.exit_code is not None and self.exit_code >= 0 else "a signal"
        return f"pi exited with {status}" + (f": {tail}" if tail else "")

    # -- reading --------------------------------------------------------------------------------------------

    async def _read(self, stream: trio.abc.ReceiveStream) -> None:
        lines = rpc.LineReader(MAX_LINE_BYTES)
        try:
            async with self._send:
                while data := await stream.receive_some():
                    for line in lines.feed(bytes(data)):
                        if isinstance(line, bytes):
                            await self._line(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = js.parse(line)
        except (ValueError, UnicodeDecodeError):
            self._log.warning("pi wrote a line that is not JSON", line=line[:200].decode(errors="replace"))
            return
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "response" and isinstance(message.get("id"), str) and message["id"] in self._pending:
            pending = self._pending.pop(message["id"])
            pending.answer, pending.after = message, self.sent
            pending.done.set()
        elif kind == "extension_ui_request":
            if message.get("method") in DIALOGS and isinstance(message.get("id"), str):
                await self.write({"type": "extension_ui_response", "id": message["id"], "cancelled": True})
        else:
            self.sent += 1
            if kind == "message_end":
                self._ended.append((self.sent, message.get("message")))
            await self._send.send((self.sent, message))

    async def _read_stderr(self, stream: trio.abc.ReceiveStream) -> None:
        lines = rpc.LineReader(64 * 1024)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await stream.receive_some():
                for line in lines.feed(bytes(data)):
                    if isinstance(line, bytes) and line.strip():
                        text = line.decode("utf-8", errors="replace")
                        self.stderr_tail = [*self.stderr_tail[-STDERR_TAIL_LINES + 1 :], text]
                        self._log.info("pi stderr", line=text)

    async def _wait(self) -> None:
        assert self._proc is not None
        try:
            self.exit_code = await self._proc.wait()
        finally:
            if self.exit_code is None:  # cancelled: the bridge is going away, and pi's group goes with it
                with trio.CancelScope(shield=True):
                    await self._end_group()
        self.exited.set()
        for ident, pending in list(self._pending.items()):
            pending.answer, pending.after = {"success": False, "error": self.ended_text()}, self.sent
            pending.done.set()
            del self._pending[ident]

    # -- closing --------------------------------------------------------------------------------------------

    async def close(self, grace: float = KILL_AFTER_S) -> None:
        """Close stdin (pi disposes and exits 0); after `grace`, SIGTERM then SIGKILL the whole group."""
        stdin, self._stdin = self._stdin, None
        if stdin is not None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stdin.aclose()
        if self._proc is None:
            return
        with trio.move_on_after(grace):
            await self.exited.wait()
        await self._end_group()

    async def _end_group(self) -> None:
        """SIGTERM, then SIGKILL, pi's process group (its shells too); each step waits a second at most."""
        assert self._proc is not None
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, sig)
            with trio.move_on_after(1.0):
                await self._proc.wait()
            if self._proc.returncode is not None and sig == signal.SIGTERM:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self._proc.pid, signal.SIGKILL)  # whatever of the group outlived pi
                return
