"""One bb thread's pi session (pi-bridge.md §3): its child, its input queues, its event pump, its close.

The reference wraps an in-process `AgentSession`; here the same rules run over `pi --mode rpc`:

* **Consumption** ([S2], [S3], [S5]): a prompt or steer is *consumed* when pi ran it at once (its answer came
  and no queue text was attributed to it) or, when pi queued it, once pi removed it from the queue
  (`queue_update`, multisets per queue, FIFO attribution). `turn/start` is answered after consumption.
* **Settlement** ([S2] step 4, [T24]): the run a prompt started is settled at pi's `agent_settled`; the session
  then sends the `pi/prompt/settled` boundary. A queued prompt has none of its own.
* **Order** ([O4]): the pump handles one event at a time, and may ask pi for the leaf id (`get_entries`) at an
  `agent_end` and for the context usage (`get_session_stats`, read as of the event: `estimate.py`) after a
  `turn_end`/`compaction_end` before it reads on; nothing pi writes after the session starts closing is
  translated ([P6]).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import trio

from bbridge.core import grammar as g
from bbridge.kit import Bridge
from bbridge.kit.mcp_host import McpHost, Tool
from bridges.pi import dynamic_tools, estimate, launch
from bridges.pi.child import Pending, PiChild, PiError
from bridges.pi.translate import Translator

log = structlog.get_logger("bridges.pi")

CLOSE_BUDGET_S = 4.0
START_TIMEOUT_S = 60.0
STEERING, FOLLOW_UP = "steering", "followUp"
CLOSED = "Pi SDK session closed before input was consumed"
PROMPT_FAILED = "Pi SDK prompt failed before input was consumed"
STEER_UNDELIVERED = "Pi turn ended before steer was consumed"
RETRY_UNDELIVERED = "Pi auto retry ended before steer was consumed"
BUSY = "Cannot compact context while Pi is processing a turn"
NO_SESSION = "No active Pi SDK session"
NO_KEY = "No API key found for "
AUTH_RETRIES = 8
AUTH_RETRY_S = 0.25
SETTLE_WAIT_S = 5.0


@dataclass(eq=False)
class Consumption:
    """One dispatched input waiting to be read by pi."""

    queue: str
    text: str | None = None  # the queue text attributed to it ([S5])
    done: trio.Event = field(default_factory=trio.Event)
    error: str | None = None

    def settle(self, error: str | None = None) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


@dataclass(eq=False)
class Hold:
    """Holds the pump at the events after a command's answer (once it came) until released."""

    answer: Pending | None = None
    released: trio.Event = field(default_factory=trio.Event)

    def blocks(self, number: int) -> bool:
        answered = self.answer is not None and self.answer.done.is_set()
        return answered and self.answer is not None and number > self.answer.after and not self.released.is_set()


@dataclass(frozen=True)
class Spec:
    """What a construction asks for ([M8])."""

    thread_id: str
    provider_thread_id: str
    session_file: Path
    cwd: str
    model: str | None
    thinking: str | None
    instructions: str | None
    replace_prompt: bool
    skills: tuple[str, ...]
    tools: dict[str, Tool]
    shell: dict[str, str]


class Session:
    """The record of one thread's pi session; `start` it, then `prompt` / `steer` / `compact`, then `close`."""

    def __init__(
        self, bridge: Bridge, translator: Translator, spec: Spec, program: launch.Program, env: dict[str, str]
    ) -> None:
        self.bridge, self.translator, self.spec, self.program = bridge, translator, spec, program
        self.thread_id, self.provider_thread_id = spec.thread_id, spec.provider_thread_id
        self.env = env
        self.closing = False
        self.compacting = False
        self.processing = False
        self.child: PiChild | None = None
        self.host: McpHost | None = None
        self.on_call: Callable[[Session, str, Any], Awaitable[Any]] | None = None
        self.on_gone: Callable[[Session], None] | None = None
        self._dir: Path | None = None
        self._queues: dict[str, list[Consumption]] = {STEERING: [], FOLLOW_UP: []}
        self._seen: dict[str, list[str]] = {STEERING: [], FOLLOW_UP: []}
        self._run_owner = False  # a prompt of ours started the current run: settle it at `agent_settled`
        self._retrying = False
        self._compactions = 0
        self._handled = 0  # how many of pi's events the pump has handled
        self._caught_up = trio.Condition()
        self._holds: list[Hold] = []
        self._leaf: str | None = None
        self._closed: trio.Event | None = None
        self._ending: trio.Event | None = None  # set from a run's final `agent_end` to its `agent_settled`
        self._checkpoint: str | None = None

    # -- start ([S1]) -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn pi and wait until it answers; `PiError` (its text for the runtime) when it cannot start."""
        spec = self.spec
        self._dir = Path(tempfile.mkdtemp(prefix="bb-pi-"))  # 0700: the prompt, the extension, the tool socket
        prompt_file = None
        if spec.instructions:
            prompt_file = self._dir / "instructions.md"
            prompt_file.write_text(spec.instructions)
        extension = None
        if spec.tools:
            self.host = McpHost(spec.tools, self._tool_call, thread_id=self.thread_id)
            await self.host.open()
            self.bridge.spawn(self.host.serve)
            extension = dynamic_tools.write_extension(self._dir, self.host)
        spec_launch = launch.Launch(
            session=spec.session_file,
            cwd=spec.cwd,
            model=spec.model,
            thinking=spec.thinking,
            system_prompt=prompt_file if spec.replace_prompt else None,
            append_prompt=None if spec.replace_prompt else prompt_file,
            skills=spec.skills,
            extension=extension,
        )
        spec_launch.session.parent.mkdir(parents=True, exist_ok=True)
        child = self.child = PiChild(
            launch.child_argv(self.program, spec_launch), env=self.env, cwd=spec.cwd, thread_id=self.thread_id
        )
        try:
            await child.start(self.bridge.spawn)
            state = await child.command("get_state", timeout=START_TIMEOUT_S)
        except PiError:
            await self._discard()
            raise
        self._check_model(state)
        self.bridge.spawn(self._pump, child)

    def _check_model(self, state: Any) -> None:
        """A requested model must be the one pi runs ([S9]): pi falls back to another on a miss."""
        wanted = self.spec.model
        if not wanted:
            return
        model = state.get("model") if isinstance(state, dict) else None
        names = set()
        if isinstance(model, dict) and isinstance(model.get("id"), str):
            names = {model["id"], f"{model.get('provider')}/{model['id']}"}
        if wanted not in names:
            self.bridge.spawn(self._discard)
            raise PiError(f'Failed to resolve Pi model "{wanted}"')

    async def _discard(self) -> None:
        if self.child is not None:
            await self.child.close()
        self._cleanup()

    def _cleanup(self) -> None:
        if self.host is not None:
            self.host.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    # -- input ([S2], [S3], [S4]) -------------------------------------------------------------------------------

    async def prompt(self, text: str, images: list[dict[str, Any]], client_request_id: str) -> None:
        """Dispatch turn input; its acceptance is emitted once pi consumed it ([M12] step 4), or `PiError`."""
        consumption = Consumption(FOLLOW_UP)
        async with self._holding() as hold:
            await self._dispatch(consumption, text, images, hold)
            if consumption.text is None:  # pi started a run with it: accepted before the run's first event
                await self.accept(client_request_id)
                return
        await consumption.done.wait()  # queued behind the running turn: accepted once pi reads it
        if consumption.error is not None:
            raise PiError(consumption.error)
        await self.accept(client_request_id)

    async def steer(self, text: str, images: list[dict[str, Any]], client_request_id: str) -> None:
        """Dispatch a steer; accepted once pi took it (queued, or run because the run had ended) ([M14])."""
        consumption = Consumption(STEERING)
        async with self._holding() as hold:
            await self._dispatch(consumption, text, images, hold)
            await self.accept(client_request_id)
        if consumption.text is not None:
            self.bridge.spawn(self._watch_steer, consumption)

    async def accept(self, client_request_id: str) -> None:
        await self._emit([g.InputAccepted(clientRequestId=client_request_id)])

    async def end(self) -> None:
        """`session.ended` before an interrupting stop: the assembler settles the open turn as interrupted."""
        await self._emit([g.SessionEnded()])

    @contextlib.asynccontextmanager
    async def _holding(self) -> AsyncIterator[Hold]:
        """While the body runs, the pump handles no event pi wrote after the answer to the body's command."""
        hold = Hold()
        self._holds.append(hold)
        try:
            yield hold
        finally:
            self._holds.remove(hold)
            hold.released.set()

    async def _dispatch(self, consumption: Consumption, text: str, images: list[dict[str, Any]], hold: Hold) -> None:
        await self._settled()
        child = self._live()
        self._queues[consumption.queue].append(consumption)
        behavior = "steer" if consumption.queue == STEERING else "followUp"
        fields: dict[str, Any] = {"message": text, "streamingBehavior": behavior}
        if images:
            fields["images"] = images
        busy = self.processing
        self.processing = True
        try:
            pending = await self._send_prompt(child, fields, hold)
        except PiError as exc:
            self._drop(consumption)
            consumption.settle(exc.message)
            for other in self._pending():
                self._drop(other)
                other.settle(PROMPT_FAILED)
            if not busy:
                self.processing = False
            await self.session_error(exc.message)
            if consumption.queue == FOLLOW_UP and consumption.text is None:
                await self._emit(self.translator.settled(self.thread_id, "failed", exc.message))
            raise
        await self._catch_up(pending.after)
        if consumption.text is None:  # not queued: pi started a run with it
            self._drop(consumption)
            consumption.settle()
            if consumption.queue == FOLLOW_UP:
                self._run_owner = True

    async def _send_prompt(self, child: PiChild, fields: dict[str, Any], hold: Hold) -> Pending:
        """The prompt, retried while pi's auth storage misses credentials that are arriving ([S7])."""
        retries = 0
        while True:
            pending = await child.send("prompt", **fields)
            hold.answer = pending
            try:
                await child.answer(pending, "prompt")
                return pending
            except PiError as exc:
                retries += 1
                if not exc.message.startswith(NO_KEY) or retries > AUTH_RETRIES:
                    raise
            await trio.sleep(AUTH_RETRY_S)

    async def _watch_steer(self, consumption: Consumption) -> None:
        await consumption.done.wait()
        if consumption.error is not None and consumption.error != CLOSED:
            await self.session_error(consumption.error)

    async def start_compaction(self, client_request_id: str) -> None:
        """`/compact` as a turn ([M12] step 2): accepted, then run without waiting. The acceptance waits for a
        finished run to settle: that run's settle report (`claimIfIdle`) would otherwise claim it as a turn."""
        await self._settled()
        await self.accept(client_request_id)
        self.bridge.spawn(self.compact)

    async def compact(self) -> None:
        """Manual compaction; its settle report goes out when pi answers ([S4], [M12] step 2)."""
        await self._settled()
        child = self._live()
        if self.processing or self.compacting:
            await self._emit(self.translator.settled(self.thread_id, "failed", BUSY))
            return
        self.processing = self.compacting = True
        before = self._compactions
        error: str | None = None
        pending = await child.send("compact")
        try:
            await child.answer(pending, "compact", timeout=None)
        except PiError as exc:
            error = exc.message
        finally:
            await self._catch_up(pending.after)  # pi wrote its `compaction_end` before this answer
            self.processing = self.compacting = False
        if error is not None and self._compactions != before:
            error = None  # pi emitted the manual `compaction_end`: the event is the outcome, the refusal is not
        if not self.closing:
            await self._emit(self.translator.settled(self.thread_id, "failed" if error else "completed", error))

    def _ended(self) -> None:
        if self._ending is not None:
            self._ending.set()
            self._ending = None

    async def _settled(self) -> None:
        """Input that arrives while a finished run is still settling waits for it (bounded): pi would otherwise
        queue a prompt into a run that takes no more input, or refuse a compaction as busy."""
        ending = self._ending
        if ending is not None:
            with trio.move_on_after(SETTLE_WAIT_S):
                await ending.wait()

    def _live(self) -> PiChild:
        if self.child is None or self.closing:
            raise PiError(NO_SESSION)
        return self.child

    def _pending(self) -> list[Consumption]:
        return [c for queue in self._queues.values() for c in queue if not c.done.is_set()]

    def _drop(self, consumption: Consumption) -> None:
        queue = self._queues[consumption.queue]
        if consumption in queue:
            queue.remove(consumption)

    def _reject(self, queue: str, error: str) -> None:
        for consumption in list(self._queues[queue]):
            self._drop(consumption)
            consumption.settle(error)

    async def _catch_up(self, events: int) -> None:
        """Wait until the pump has handled the first `events` events (those pi wrote before an answer)."""
        async with self._caught_up:
            while self._handled < events and not self.closing:
                await self._caught_up.wait()

    # -- the pump ([T1]–[T3], [S5], [S6]) -----------------------------------------------------------------------

    async def _pump(self, child: PiChild) -> None:
        async with child.events:
            async for number, event in child.events:
                for hold in list(self._holds):
                    if hold.blocks(number):
                        await hold.released.wait()
                if not self.closing:
                    await self._handle(child, number, event)
                async with self._caught_up:
                    self._handled = number
                    self._caught_up.notify_all()
        if not self.closing:  # pi went away on its own
            await self._gone(child)

    async def _handle(self, child: PiChild, number: int, event: Any) -> None:
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "queue_update":
            self._observe(event)
        elif kind == "agent_start" or (kind == "compaction_start" and event.get("reason") == "manual"):
            self.processing = True
        elif kind == "auto_retry_start":
            self._retrying = True
        elif kind == "auto_retry_end":
            self._retrying = False
            if event.get("success") is False:
                self._reject(STEERING, RETRY_UNDELIVERED)
        elif kind == "compaction_end" and event.get("reason") == "manual":
            self.processing = False
            self._compactions += 1
        checkpoint = None
        if kind == "agent_end" and event.get("willRetry") is not True:
            self.processing = False
            self._ending = trio.Event()  # pi takes input again only once the run has settled
            checkpoint = await self._read_leaf(child)
        await self._emit(self.translator.event(self.thread_id, event, checkpoint))
        if kind in ("turn_end", "compaction_end"):
            await self._emit(self.translator.context_window(await self._context_usage(child, number)))
        if kind == "agent_settled":
            if self._queues[STEERING] and not self._retrying:
                self._reject(STEERING, STEER_UNDELIVERED)
            if self._run_owner:
                self._run_owner = False
                await self._emit(self.translator.settled(self.thread_id, "completed"))
            self._ended()  # after the settle report: input waiting on it is accepted after, never before

    def _observe(self, event: dict[str, Any]) -> None:
        """Attribute added queue texts to waiting dispatches (FIFO) and consume removed ones ([S5])."""
        for queue in (STEERING, FOLLOW_UP):
            now = [t for t in event.get(queue, []) if isinstance(t, str)] if isinstance(event.get(queue), list) else []
            added = Counter(now) - Counter(self._seen[queue])
            removed = Counter(self._seen[queue]) - Counter(now)
            self._seen[queue] = now
            for text in now:
                if added[text] <= 0:
                    continue
                added[text] -= 1
                waiting = next((c for c in self._queues[queue] if c.text is None), None)
                if waiting is None:
                    break
                waiting.text = text
            for text, count in removed.items():
                for _ in range(count):
                    taken = next((c for c in self._queues[queue] if c.text == text), None)
                    if taken is not None:
                        self._drop(taken)
                        taken.settle()

    async def _context_usage(self, child: PiChild, number: int) -> Any:
        """pi's context usage as of event `number` ([T3]): pi answers once its loop yields, after the messages it
        took in meanwhile (a queued steer), so those are taken back out (`estimate.as_of_event`)."""
        pending = await child.send("get_session_stats")
        try:
            stats = await child.answer(pending, "get_session_stats")
        except PiError:
            return None
        usage = stats.get("contextUsage") if isinstance(stats, dict) else None
        return estimate.as_of_event(usage, child.messages_between(number, pending.after))

    async def _read_leaf(self, child: PiChild) -> str | None:
        """pi's leaf (checkpoint) id: the newest entry of the active branch ([F4])."""
        try:
            data = await (
                child.command("get_entries", since=self._leaf) if self._leaf else child.command("get_entries")
            )
        except PiError:
            try:
                data = await child.command("get_entries")
            except PiError:
                return None
        leaf = data.get("leafId") if isinstance(data, dict) else None
        self._leaf = leaf if isinstance(leaf, str) and leaf else self._leaf
        return self._leaf

    # -- output -------------------------------------------------------------------------------------------------

    async def _emit(self, deltas: list[g.Delta]) -> None:
        if deltas and not self.closing:
            await self.bridge.emit(self.thread_id, deltas)

    async def session_error(self, message: str) -> None:
        """[S8]: a `provider.error` that settles the turn, then the runtime's `error` notification."""
        if self.closing:
            return
        await self._emit(self.translator.error(self.thread_id, message))
        params = {"threadId": self.thread_id, "providerThreadId": self.provider_thread_id, "message": message}
        await self.bridge.notify("error", params)

    async def _tool_call(self, tool: str, arguments: Any) -> Any:
        if self.closing or self.on_call is None:
            raise PiError(dynamic_tools.NOT_FOUND)
        return await self.on_call(self, tool, arguments)

    async def _gone(self, child: PiChild) -> None:
        """pi exited while the session was live: its open turn fails with what pi said, and the record goes."""
        with trio.move_on_after(2):
            await child.exited.wait()
        self._reject(STEERING, CLOSED)
        self._reject(FOLLOW_UP, CLOSED)
        await self.session_error(child.ended_text())
        self.closing = True
        self._cleanup()
        if self.on_gone is not None:
            self.on_gone(self)

    # -- close ([C1]) --------------------------------------------------------------------------------------------

    async def close(self) -> str | None:
        """Graceful close: nothing more is translated, waiting input is rejected, pi aborts (4 s budget) and exits;
        returns the leaf id. Concurrent closes share one."""
        if self._closed is not None:
            await self._closed.wait()
            return self._checkpoint
        self._closed = trio.Event()
        self.closing = True
        self._ended()
        self._reject(STEERING, CLOSED)
        self._reject(FOLLOW_UP, CLOSED)
        if self.host is not None:
            self.host.close()
        child = self.child
        if child is not None and not child.exited.is_set():
            with trio.move_on_after(CLOSE_BUDGET_S):
                with contextlib.suppress(PiError):
                    await child.command("abort", timeout=None)
            with trio.move_on_after(CLOSE_BUDGET_S):
                self._checkpoint = await self._read_leaf(child)
        else:
            self._checkpoint = self._leaf
        if child is not None:
            await child.close()
        self._cleanup()
        async with self._caught_up:
            self._caught_up.notify_all()
        self._closed.set()
        return self._checkpoint
