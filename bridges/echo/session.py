"""One echo thread: its provider session, its live turn, and how that turn is streamed, steered and settled.

A turn is registered when it starts (so a steer or a stop sent at once sees it) and streamed by a task the kit
spawns: its batches (from `translate`) go out one at a time under the turn's lock, so a steer, an interrupt and
the runner never interleave inside a step. There is no provider process: the echo bridge answers by itself.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import trio

from bbridge.core import grammar as g
from bbridge.kit import Bridge, tokens
from bbridge.wire import protocol, rpc
from bridges.echo import approvals, dynamic_tools, translate
from bridges.echo.presentation import tool_presentation


@dataclass
class Turn:
    number: int
    directives: translate.Directives
    prompt: str = ""
    batches: deque[list[g.Delta]] = field(default_factory=deque)  # middle batches still to stream
    text: str = ""  # the whole answer streamed (or queued) so far
    live: bool = True
    lock: trio.Lock = field(default_factory=trio.Lock)  # one turn step at a time (runner, steer, stop)
    wake: trio.Event = field(default_factory=trio.Event)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    @property
    def key(self) -> g.ItemKey:
        return translate.answer_key(self.number)

    def queue_text(self, text: str) -> None:
        self.text += text
        self.batches.extend(translate.text_batches(self.key, text))


class Session:
    """One thread's provider session (`echo_<nonce>_<n>`) and its turns."""

    def __init__(
        self,
        bridge: Bridge,
        thread_id: str,
        provider_thread_id: str,
        cwd: str,
        checkpoints: list[str],
        tools: list[protocol.DynamicTool],
    ) -> None:
        self.bridge = bridge
        self.thread_id = thread_id
        self.provider_thread_id = provider_thread_id
        self.cwd = cwd
        self.checkpoints = checkpoints  # shared with the process-wide history of this provider session
        self.turns = 0
        self.turn: Turn | None = None
        self.tools = {tool.name: tool for tool in tools}  # the client's, by name

    # -- control -----------------------------------------------------------------

    def start_turn(self, inputs: list[protocol.PromptInput], client_request_id: str | None) -> None:
        """Register the live turn now (later requests see it) and stream it in the background."""
        if self.turn is not None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f"Thread {self.thread_id} has a live turn; steer or stop it first")
        self.turns += 1
        prompt = translate.prompt_text(inputs)
        turn = Turn(self.turns, translate.parse_directives(prompt), prompt)
        opening = translate.opening(turn.directives, client_request_id, self.provider_thread_id)
        if turn.directives.mode == "all":
            turn.batches.extend(translate.coverage_items(self.cwd))
        if turn.directives.answers_at_once:
            turn.queue_text(f"echo: {prompt}")
        turn.batches.appendleft(opening + (turn.batches.popleft() if turn.batches else []))
        self.turn = turn
        self.bridge.spawn(self._run, turn)

    async def steer(self, params: protocol.TurnSteerParams) -> None:
        """Accept a steer into the live turn and stream its text; `finish` in it ends a held turn."""
        turn = self.turn
        refusal = rpc.RpcError(rpc.NO_ACTIVE_TURN, f"No active turn to steer (expected {params.expectedTurnId})")
        if turn is None:
            raise refusal
        async with turn.lock:
            if not turn.live:
                raise refusal
            text = translate.prompt_text(params.input)
            await self.bridge.emit(self.thread_id, [g.InputAccepted(clientRequestId=params.clientRequestId)])
            turn.queue_text(f" [steer] {text}")
            if "finish" in text.split():
                turn.directives.hold = False
            turn.wake.set()

    async def settle(self) -> None:
        """Interrupt the live turn, if any: `session.ended` closes it and its open items."""
        turn = self.turn
        if turn is None:
            return
        async with turn.lock:
            turn.scope.cancel()
            if turn.live:
                turn.live = False
                self.turn = None
                await self.bridge.emit(self.thread_id, [g.SessionEnded()])

    def release(self) -> None:
        """Detach quietly, whatever the turn was doing: nothing is fabricated."""
        if self.turn is not None:
            self.turn.live = False
            self.turn.scope.cancel()

    def discard(self) -> None:
        """Stop streaming the live turn of a discarded thread."""
        if self.turn is not None:
            self.turn.scope.cancel()

    @property
    def checkpoint(self) -> str | None:
        """The last checkpoint handed out, which a stop answers with."""
        return self.checkpoints[-1] if self.checkpoints else None

    # -- the turn's run ------------------------------------------------------------

    async def _run(self, turn: Turn) -> None:
        with turn.scope:
            if turn.directives.tool is not None:
                await self._call_tool(turn, turn.directives.tool)
            elif turn.directives.approve is not None:
                await self._ask_approval(turn, turn.directives.approve)
            first = True
            while True:
                if not turn.batches and turn.directives.hold:
                    await turn.wake.wait()
                    turn.wake = trio.Event()
                    continue
                if turn.directives.delay and not first:
                    await trio.sleep(turn.directives.delay)
                first = False
                async with turn.lock:
                    if not turn.live:
                        return
                    if turn.batches:
                        await self.bridge.emit(self.thread_id, turn.batches.popleft())
                        continue
                    if turn.directives.hold:
                        continue
                    turn.live = False
                    self.turn = None
                    await self.bridge.emit(self.thread_id, self._closing(turn))
                    if turn.directives.mode == "all":
                        await self._rebuild()
                    return

    async def _call_tool(self, turn: Turn, name: str) -> None:
        """`tool:<name>`: the opening batch with a `tool` item, the client's answer, the item's close."""
        key = dynamic_tools.tool_key(turn.number)
        shown = tool_presentation(self.tools.get(name))
        args = turn.directives.args
        opened = g.ItemOpen(key=key, item=dynamic_tools.tool_shape(name, args), presentation=shown)
        await self.bridge.emit(self.thread_id, [*turn.batches.popleft(), opened])
        ok, text = await dynamic_tools.call(
            self.bridge, self.thread_id, self.provider_thread_id, name, args, turn.number
        )
        shape = dynamic_tools.tool_shape(name, args, ok, text)
        status: g.ItemStatus = "completed" if ok else "failed"
        await self.bridge.emit(self.thread_id, [g.ItemClose(key=key, status=status, item=shape, presentation=shown)])
        turn.queue_text(f"echo: {name} → {text}")

    async def _ask_approval(self, turn: Turn, kind: str) -> None:
        """`approve:<kind>`: the opening batch, the approval asked, then the answer it allows (or `denied`)."""
        await self.bridge.emit(self.thread_id, turn.batches.popleft())
        allowed = await approvals.ask(self.bridge, self.thread_id, self.provider_thread_id, self.cwd, kind, turn.number)
        turn.queue_text(f"echo: {turn.prompt}" if allowed else "echo: denied")

    def _closing(self, turn: Turn) -> list[g.Delta]:
        """The turn's settling batch; an answered turn adds its usage to the session's and hands out a checkpoint."""
        settling = translate.settling(turn.directives, turn.key)
        if settling is not None:
            return settling
        usage = self.bridge.usage(self.thread_id).turn(
            tokens(input=len(turn.text), output=len(turn.text)), model_context_window=translate.CONTEXT_WINDOW
        )
        checkpoint = f"{self.provider_thread_id}:{len(self.checkpoints) + 1}"
        self.checkpoints.append(checkpoint)
        return translate.completed(turn.directives, turn.key, usage, checkpoint)

    async def _rebuild(self) -> None:
        """The last two kinds of `deltas:all`, after the turn settled: `session.ended` (nothing is open, so
        it settles nothing) and an internal session rebuild (§4.3): `session/replaced`, identity, `session.reset`."""
        await self.bridge.emit(self.thread_id, [g.SessionEnded()])
        replaced = {
            "threadId": self.thread_id,
            "providerThreadId": self.provider_thread_id,
            "reason": "deltas:all rebuilds the session to show session.reset",
            "contextLost": False,
        }
        await self.bridge.notify("session/replaced", replaced)
        await self.bridge.open_session(self.thread_id, self.provider_thread_id, session_restorable=True)
