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

import dataclasses
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from bbridge.core import js
from bbridge.kit.child import Child, StderrTail, StopPlan
from bridges.pi import launch

log = structlog.get_logger("bridges.pi")

REQUEST_TIMEOUT_S = 60.0
MODEL_LIST_TIMEOUT_S = 60.0
KILL_AFTER_S = 4.0
# stdin closed, pi disposes and exits 0; after the grace, SIGTERM then SIGKILL the whole group (its shells too),
# each step waiting a second at most
STOP = StopPlan(wait_s=KILL_AFTER_S, grace_s=1.0, term_group=True, kill_wait_s=1.0)
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
        self._log = log.bind(threadId=thread_id)
        self.process = Child(
            argv,
            env=env,
            cwd=cwd,
            thread_id=thread_id,
            tail=StderrTail(
                STDERR_TAIL_LINES, skip_blank=True, on_line=lambda line: self._log.info("pi stderr", line=line)
            ),
        )
        self.exit_code: int | None = None
        self.exited = trio.Event()
        self._ids = itertools.count(1)
        self._pending: dict[str, Pending] = {}
        self._send, self.events = trio.open_memory_channel[tuple[int, Any]](EVENT_BUFFER)  # (number, event)
        self.sent = 0  # events handed to the pump
        # (number, message) of each `message_end` not yet asked for; at most a channel's worth are ahead of the pump
        self._ended: deque[tuple[int, Any]] = deque(maxlen=EVENT_BUFFER + 1)

    async def start(self, spawn: Callable[..., None]) -> None:
        """Spawn pi in its own process group (its readers run as `spawn`'s tasks); `PiError` when it cannot."""
        try:
            await self.process.spawn()
        except OSError as exc:
            raise PiError(f"pi could not be started: {exc}") from None
        spawn(self._read)
        spawn(self.process.pump_stderr)
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
        await self.process.write((js.stringify(message) + "\n").encode())

    def messages_between(self, after: int, upto: int) -> list[Any]:
        """The messages of the `message_end` events numbered `after` < n <= `upto`; those up to `after` are
        forgotten (the pump asks with rising `after`)."""
        while self._ended and self._ended[0][0] <= after:
            self._ended.popleft()
        return [message for number, message in self._ended if number <= upto]

    @property
    def stderr_tail(self) -> list[str]:
        return self.process.stderr.lines

    def ended_text(self) -> str:
        tail = "\n".join(self.stderr_tail[-5:])
        status = f"code {self.exit_code}" if self.exit_code is not None and self.exit_code >= 0 else "a signal"
        return f"pi exited with {status}" + (f": {tail}" if tail else "")

    # -- reading --------------------------------------------------------------------------------------------

    async def _read(self) -> None:
        async with self._send:
            async for line in self.process.lines():
                await self._line(line)

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

    async def _wait(self) -> None:
        try:
            self.exit_code = await self.process.wait()
        finally:
            if self.exit_code is None:  # cancelled: the bridge is going away, and pi's group goes with it
                with trio.CancelScope(shield=True):
                    await self.process.stop(dataclasses.replace(STOP, wait_s=0))
        self.exited.set()
        for ident, pending in list(self._pending.items()):
            pending.answer, pending.after = {"success": False, "error": self.ended_text()}, self.sent
            pending.done.set()
            del self._pending[ident]

    # -- closing --------------------------------------------------------------------------------------------

    async def close(self, grace: float = KILL_AFTER_S) -> None:
        """Close stdin (pi disposes and exits 0); after `grace`, SIGTERM then SIGKILL the whole group (`STOP`)."""
        await self.process.stop(dataclasses.replace(STOP, wait_s=grace))


async def available_models(
    argv: Sequence[str], *, env: dict[str, str], cwd: str, spawn: Callable[..., None]
) -> list[Any]:
    """pi's available models for `cwd` (`get_available_models`), from a throwaway child (`launch.listing_argv`);
    `PiError` when pi cannot start, refuses or is too slow."""
    child = PiChild(argv, env=env, cwd=cwd, thread_id="model-list")
    await child.start(spawn)
    try:
        with trio.fail_after(MODEL_LIST_TIMEOUT_S):
            data = await child.command("get_available_models", timeout=None)
    except trio.TooSlowError:
        raise PiError("pi did not list its models in time") from None
    finally:
        with trio.CancelScope(shield=True):
            await child.close()
    found = data.get("models") if isinstance(data, dict) else None
    return found if isinstance(found, list) else []
