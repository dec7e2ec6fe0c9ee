"""The echo bridge (`python -m bridges.echo`): a provider that echoes prompts, written with `bbridge.kit`.

It is the canary for the daemon and for bridge tooling (protocol.md §8): the
plain behaviour matches the example echo (§8.1) — identity then
`session.reset` on every session, one assistant message `echo: <prompt>` per
turn — streamed in several `item.textDelta` chunks, with usage summed per
session and a `providerCheckpointId` on every completed turn.

Capabilities: grammar [3, 3], `steerMode: "inject"`, `sessionRestore: true`,
`fork: "checkpoint"` (forks may start from any checkpoint this process has
handed out; resume refuses -32002 for a `providerThreadId` it could never
have minted, i.e. one not starting with `echo_`). Methods: `initialize`,
`model/list`, `thread/start` (runs a turn for `input` when given),
`thread/resume`, `thread/fork`, `turn/start`, `turn/steer`, `thread/stop`,
`thread/discard`; anything else is -32601.

Prompt directives (whitespace-separated tokens of the joined text inputs):

* *(none)* — stream `echo: <prompt>`, then usage and `turn.boundary completed`.
* `noop`, or a prompt with no text — a zero-work turn: `turn.open` then
  `turn.boundary completed`, nothing in between (§4.6).
* `slow:<ms>` — wait `<ms>` milliseconds between streamed batches (the first
  goes out at once), so a steer or an interrupt can land mid-turn.
* `hold` — after streaming, keep the turn open: steers are accepted and
  streamed into it; a steer whose text contains `finish` completes it;
  `thread/stop {intent: "interrupt"}` settles it.
* `fail` or `fail:<detail>` — stream the answer, then a settling
  `provider.error` (`Provider error`, detail with `_` read as spaces): the
  turn ends `failed`.
* `deltas:all` — one turn that emits every one of the 26 delta kinds and all
  16 item shapes, so the assembled timeline holds all 30 canonical event
  types. The two session kinds come after the turn's boundary: a
  `session.ended` with nothing open (it settles nothing) and an internal
  session rebuild (§4.3: `session/replaced`, identity, `session.reset`).
  Extension kinds used: `echo/note` (item) and `echo/state` (state).
* `deltas:session.ended` — stream the answer, then end the turn with
  `session.ended` (streamed text kept, turn `interrupted`).
* `approve:<command|file_change|permission_grant|plan>` — before answering,
  ask for an approval (`interaction/request`, a fixed payload of that
  subject kind, subject `itemId` `approval-<turn number>`,
  `providerNativeIds: true`); allowed (`allow_once`/`allow_for_session`)
  streams the normal answer, anything else `echo: denied`. Nothing is run.
* `tool:<name>`, optionally with `args:<JSON object without spaces>` — call
  the client's tool `<name>` (declared or not: the daemon decides) with an
  `item/tool/call` request inside a `tool` item shown with the tool's
  declared presentation, then echo what came back (`echo: <name> → <text>`).
  The bridge-author's view of the round trip (protocol.md §3.6.1).

`turn/steer` answers -32001 when the thread has no live turn; otherwise the
steer is accepted (`input.accepted`) into the live turn and its text streamed
as part of the answer. `thread/stop` with `interrupt` settles a live turn with
`session.ended` *before* answering; `release` forgets the session and
fabricates nothing.
"""

from __future__ import annotations

import argparse
import re
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import trio
from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.kit import Bridge, tokens
from bbridge.wire import interactions as ia
from bbridge.wire import protocol, rpc

CONTEXT_WINDOW = 200_000
PRESENTATION = g.Presentation(label=g.Label(pending="Echoing", completed="Echoed"), icon=g.Icon(glyph="Sparkles"))
TOOL_PRESENTATION = g.Presentation(
    label=g.Label(pending="Calling tool", completed="Called tool"), icon=g.Icon(glyph="Wrench")
)
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


APPROVAL_KINDS = ("command", "file_change", "permission_grant", "plan")


def approval_subject(
    kind: str, item_id: str, cwd: str
) -> ia.CommandSubject | ia.FileChangeSubject | ia.PermissionGrantSubject | ia.PlanSubject:
    """The fixed subject `approve:<kind>` asks about."""
    if kind == "command":
        return ia.CommandSubject(itemId=item_id, command="echo approve", cwd=cwd, actions=[], sessionGrant=None)
    if kind == "file_change":
        return ia.FileChangeSubject(itemId=item_id, writeScope=cwd, sessionGrant=None)
    if kind == "permission_grant":
        grant = ia.GrantProfile(network=ia.NetworkGrant(enabled=True), fileSystem=None)
        return ia.PermissionGrantSubject(itemId=item_id, toolName="echo", permissions=grant)
    return ia.PlanSubject(itemId=item_id, plan="1. Echo the prompt.", planFilePath=None)


@dataclass
class Directives:
    mode: str = "echo"  # echo | noop | fail | all | ended
    delay: float = 0.0  # seconds before each streamed chunk
    hold: bool = False
    detail: str = "echo failure requested by the prompt"
    tool: str | None = None  # a client tool to call first
    approve: str | None = None  # an approval subject kind to ask about first
    args: dict[str, Any] = field(default_factory=dict)


def parse_directives(text: str) -> Directives:
    """The prompt's directives; unknown tokens are just text to echo."""
    found = Directives(mode="echo" if text.strip() else "noop")
    for token in text.split():
        name, _, arg = token.partition(":")
        if token == "noop":
            found.mode = "noop"
        elif name == "slow" and arg.isdigit():
            found.delay = int(arg) / 1000
        elif token == "hold":
            found.hold = True
        elif name == "fail":
            found.mode = "fail"
            if arg:
                found.detail = arg.replace("_", " ")
        elif token == "deltas:all":
            found.mode = "all"
        elif token == "deltas:session.ended":
            found.mode = "ended"
        elif name == "tool" and arg:
            found.tool = arg
        elif name == "approve" and arg in APPROVAL_KINDS:
            found.approve = arg
        elif name == "args":
            try:
                decoded = msgspec.json.decode(arg)
            except msgspec.DecodeError:
                decoded = None
            if isinstance(decoded, dict):
                found.args = decoded
    return found


def prompt_text(inputs: list[protocol.PromptInput]) -> str:
    return " ".join(i.text for i in inputs if isinstance(i, protocol.TextInput))


def chunks(text: str) -> list[str]:
    """Word-sized pieces (each keeps its trailing whitespace) that concatenate back to `text`."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


@dataclass
class Turn:
    number: int
    directives: Directives
    prompt: str = ""
    batches: deque[list[g.Delta]] = field(default_factory=deque)  # middle batches still to stream
    text: str = ""  # the whole answer streamed (or queued) so far
    live: bool = True
    lock: trio.Lock = field(default_factory=trio.Lock)  # one turn step at a time (runner, steer, stop)
    wake: trio.Event = field(default_factory=trio.Event)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    @property
    def key(self) -> g.ItemKey:
        return g.ItemKey(providerItemId=f"msg-{self.number}")

    def queue_text(self, text: str) -> None:
        self.text += text
        self.batches.extend([g.ItemTextDelta(key=self.key, channel="agentMessage", text=c)] for c in chunks(text))


@dataclass
class Session:
    thread_id: str
    provider_thread_id: str
    cwd: str
    checkpoints: list[str]  # shared with the process-wide history of this provider session
    turns: int = 0
    turn: Turn | None = None
    tools: dict[str, protocol.DynamicTool] = field(default_factory=dict)  # the client's, by name


class Echo:
    """Sessions, turns and the request handlers of one echo bridge process."""

    def __init__(self) -> None:
        self.bridge = Bridge("echo", CAPABILITIES)
        self.nonce = uuid.uuid4().hex[:12]
        self.minted = 0
        self.sessions: dict[str, Session] = {}
        self.histories: dict[str, list[str]] = {}  # providerThreadId -> checkpoints, kept after release for forks
        self.bridge.handle_sessions(self)

    # -- sessions --------------------------------------------------------------

    async def model_list(self, params: protocol.ModelListParams) -> dict[str, object]:
        return {"models": [ECHO_MODEL], "selectedOnlyModels": []}

    async def thread_start(self, params: protocol.ThreadStartParams) -> dict[str, object]:
        self.minted += 1
        session = await self._open(params, f"echo_{self.nonce}_{self.minted}", [])
        if params.input is not UNSET and params.input:
            self._start_turn(session, params.input, None)
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
            await self._settle(old)
        self.histories[ptid] = history
        session = self.sessions[params.threadId] = Session(params.threadId, ptid, params.cwd, history)
        session.tools = {tool.name: tool for tool in params.dynamicTools or []}
        await self.bridge.open_session(params.threadId, ptid, session_restorable=True)
        return session

    async def thread_stop(self, params: protocol.ThreadStopParams) -> dict[str, object]:
        session = self.sessions.get(params.threadId)
        if session is None:
            return {}
        if params.intent == "interrupt":
            await self._settle(session)
        else:  # release: detach quietly, whatever the provider was doing
            if session.turn is not None:
                session.turn.live = False
                session.turn.scope.cancel()
            del self.sessions[params.threadId]
            self.bridge.forget(params.threadId)
        return {"providerCheckpointId": session.checkpoints[-1]} if session.checkpoints else {}

    async def thread_discard(self, params: protocol.ThreadRefParams) -> dict[str, object]:
        session = self.sessions.pop(params.threadId, None)
        if session is not None and session.turn is not None:
            session.turn.scope.cancel()
        self.bridge.forget(params.threadId)
        return {}

    async def _settle(self, session: Session) -> None:
        """Interrupt the live turn, if any: `session.ended` closes it and its open items."""
        turn = session.turn
        if turn is None:
            return
        async with turn.lock:
            turn.scope.cancel()
            if turn.live:
                turn.live = False
                session.turn = None
                await self.bridge.emit(session.thread_id, [g.SessionEnded()])

    # -- turns -------------------------------------------------------------------

    def _session(self, thread_id: str) -> Session:
        session = self.sessions.get(thread_id)
        if session is None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f"Unknown thread: {thread_id}")
        return session

    async def turn_start(self, params: protocol.TurnStartParams) -> dict[str, object]:
        session = self._session(params.threadId)
        if session.turn is not None:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f"Thread {params.threadId} has a live turn; steer or stop it first")
        self._start_turn(session, params.input, params.clientRequestId)
        return {}

    async def turn_steer(self, params: protocol.TurnSteerParams) -> dict[str, object]:
        session = self._session(params.threadId)
        turn = session.turn
        refusal = rpc.RpcError(rpc.NO_ACTIVE_TURN, f"No active turn to steer (expected {params.expectedTurnId})")
        if turn is None:
            raise refusal
        async with turn.lock:
            if not turn.live:
                raise refusal
            text = prompt_text(params.input)
            await self.bridge.emit(session.thread_id, [g.InputAccepted(clientRequestId=params.clientRequestId)])
            turn.queue_text(f" [steer] {text}")
            if "finish" in text.split():
                turn.directives.hold = False
            turn.wake.set()
        return {}

    def _start_turn(self, session: Session, inputs: list[protocol.PromptInput], creq: str | None) -> None:
        """Register the live turn now (later requests see it) and stream it in the background."""
        session.turns += 1
        prompt = prompt_text(inputs)
        turn = Turn(session.turns, parse_directives(prompt), prompt)
        opening: list[g.Delta] = [] if creq is None else [g.InputAccepted(clientRequestId=creq)]
        opening.append(g.TurnOpen())
        if turn.directives.mode == "all":
            opening += self._coverage_head(session)
            turn.batches.extend(self._coverage_items(session))
        if turn.directives.mode != "noop" and turn.directives.tool is None and turn.directives.approve is None:
            turn.queue_text(f"echo: {prompt}")
        turn.batches.appendleft(opening + (turn.batches.popleft() if turn.batches else []))
        session.turn = turn
        self.bridge.spawn(self._run, session, turn)

    async def _run(self, session: Session, turn: Turn) -> None:
        with turn.scope:
            if turn.directives.tool is not None:
                await self._call_tool(session, turn, turn.directives.tool)
            elif turn.directives.approve is not None:
                await self._ask_approval(session, turn, turn.directives.approve)
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
                        await self.bridge.emit(session.thread_id, turn.batches.popleft())
                        continue
                    if turn.directives.hold:
                        continue
                    turn.live = False
                    session.turn = None
                    await self.bridge.emit(session.thread_id, self._closing(session, turn))
                    if turn.directives.mode == "all":
                        await self._rebuild(session)
                    return

    async def _call_tool(self, session: Session, turn: Turn, name: str) -> None:
        """`tool:<name>`: the opening batch with a `tool` item, the client's answer, the item's close."""
        key = g.ItemKey(providerItemId=f"tool-{turn.number}")
        declared = session.tools.get(name)
        shown = TOOL_PRESENTATION
        if declared is not None and declared.presentation is not UNSET:
            shown = declared.presentation
        args = turn.directives.args
        opening = turn.batches.popleft()
        await self.bridge.emit(
            session.thread_id,
            [*opening, g.ItemOpen(key=key, item=g.ToolShape(tool=name, server="bb", args=args), presentation=shown)],
        )
        call = {
            "providerThreadId": session.provider_thread_id,
            "threadId": session.thread_id,
            "turnId": None,
            "callId": f"call-{session.provider_thread_id}-{turn.number}",
            "tool": name,
            "arguments": args,
        }
        try:
            answer = await self.bridge.request("item/tool/call", call)
        except rpc.RpcError as exc:
            answer = {"success": False, "contentItems": [{"type": "inputText", "text": exc.message}]}
        ok = isinstance(answer, dict) and answer.get("success") is True
        items = answer.get("contentItems") if isinstance(answer, dict) else None
        text = "\n".join(c["text"] for c in items or [] if isinstance(c, dict) and isinstance(c.get("text"), str))
        shape = (
            g.ToolShape(tool=name, server="bb", args=args, result=text)
            if ok
            else g.ToolShape(tool=name, server="bb", args=args, error=text)
        )
        await self.bridge.emit(
            session.thread_id,
            [g.ItemClose(key=key, status="completed" if ok else "failed", item=shape, presentation=shown)],
        )
        turn.queue_text(f"echo: {name} → {text}")

    async def _ask_approval(self, session: Session, turn: Turn, kind: str) -> None:
        """`approve:<kind>`: the opening batch, the approval asked, then the answer it allows (or `denied`)."""
        await self.bridge.emit(session.thread_id, turn.batches.popleft())
        payload = ia.ApprovalPayload(
            subject=approval_subject(kind, f"approval-{turn.number}", session.cwd),
            reason=f"echo asks before it answers ({kind})",
            availableDecisions=["allow_once", "allow_for_session", "deny"],
        )
        ask = ia.InteractionRequestParams(
            providerThreadId=session.provider_thread_id,
            threadId=session.thread_id,
            turnId=None,
            payload=payload,
            providerNativeIds=True,
        )
        try:
            answer = await self.bridge.request("interaction/request", msgspec.to_builtins(ask))
        except rpc.RpcError:
            answer = None
        allowed = isinstance(answer, dict) and answer.get("decision") in ("allow_once", "allow_for_session")
        turn.queue_text(f"echo: {turn.prompt}" if allowed else "echo: denied")

    async def _rebuild(self, session: Session) -> None:
        """The last two kinds of `deltas:all`, after the turn settled: `session.ended` (nothing is open, so
        it settles nothing) and an internal session rebuild (§4.3): `session/replaced`, identity, `session.reset`."""
        await self.bridge.emit(session.thread_id, [g.SessionEnded()])
        replaced = {
            "threadId": session.thread_id,
            "providerThreadId": session.provider_thread_id,
            "reason": "deltas:all rebuilds the session to show session.reset",
            "contextLost": False,
        }
        await self.bridge.notify("session/replaced", replaced)
        await self.bridge.open_session(session.thread_id, session.provider_thread_id, session_restorable=True)

    def _closing(self, session: Session, turn: Turn) -> list[g.Delta]:
        mode = turn.directives.mode
        if mode == "noop":
            return [g.TurnBoundary(status="completed")]
        if mode == "ended":
            return [g.SessionEnded()]
        close: list[g.Delta] = [g.ItemTextClose(key=turn.key, channel="agentMessage")]
        if mode == "fail":
            error = g.ProviderError(
                message="Provider error", detail=turn.directives.detail, willRetry=False, settlesTurn=True
            )
            return [*close, error]
        usage = self.bridge.usage(session.thread_id).turn(
            tokens(input=len(turn.text), output=len(turn.text)), model_context_window=CONTEXT_WINDOW
        )
        close.append(usage)
        if mode == "all":
            used = usage.total.totalTokens
            close.append(g.ContextWindow(used=used, size=CONTEXT_WINDOW, estimated=False, attach="open"))
        checkpoint = f"{session.provider_thread_id}:{len(session.checkpoints) + 1}"
        session.checkpoints.append(checkpoint)
        return [*close, g.TurnBoundary(status="completed", providerCheckpointId=checkpoint)]

    # -- deltas:all ----------------------------------------------------------------

    def _coverage_head(self, session: Session) -> list[g.Delta]:
        """Thread metadata, in the turn's opening batch."""
        return [
            g.ThreadStarted(),
            g.ThreadIdentity(providerThreadId=session.provider_thread_id),
            g.ThreadName(name="echo"),
        ]

    def _coverage_items(self, session: Session) -> list[list[g.Delta]]:
        """Every item shape and every non-session delta kind, one logical step per batch."""
        cwd = session.cwd
        thinking, plan = g.ItemKey(channel="thinking"), g.ItemKey(channel="plan")
        streams: list[g.Delta] = [
            g.ItemTextDelta(key=thinking, channel="reasoningSummary", text="Plan the echo"),
            g.ItemTextDelta(key=thinking, channel="reasoningText", text="The prompt asks for every kind."),
            g.ItemTextClose(key=thinking, channel="reasoningText"),
            g.ItemTextDelta(key=plan, channel="plan", text="1. echo everything"),
            g.ItemTextClose(key=plan, channel="plan"),
        ]
        cmd1, cmd2 = g.ItemKey(providerItemId="cmd-1"), g.ItemKey(providerItemId="cmd-2")
        command1 = g.CommandShape(command="echo hi", cwd=cwd)
        command2 = g.CommandShape(command="printf ab", cwd=cwd)
        commands: list[g.Delta] = [
            g.ItemOpen(key=cmd1, item=command1, presentation=PRESENTATION),
            g.ItemOutputDelta(key=cmd1, channel="command", text="hi\n"),
            g.ItemClose(key=cmd1, status="completed", exitCode=0, aggregatedOutput="hi\n", item=command1),
            g.ItemOpen(key=cmd2, item=command2),
            g.CommandOutputSnapshot(key=cmd2, text="a"),
            g.CommandOutputSnapshot(key=cmd2, text="ab"),
            g.ItemClose(key=cmd2, status="completed", exitCode=0, item=command2),
        ]
        fc, tool = g.ItemKey(providerItemId="fc-1"), g.ItemKey(providerItemId="tool-1")
        change = g.FileChangeShape(changes=[g.FileChangeEntry(path=f"{cwd}/echo.txt", kind="add", newText="echo\n")])
        call = g.ToolShape(tool="echo_tool", args={"text": "echo"})
        edits: list[g.Delta] = [
            g.ItemOpen(key=fc, item=change),
            g.ItemOutputDelta(key=fc, channel="fileChange", text="wrote echo.txt\n"),
            g.ItemClose(key=fc, status="completed", item=change),
            g.ItemOpen(key=tool, item=call, presentation=PRESENTATION),
            g.ItemProgress(key=tool, message="working", flush=True),
            g.ItemClose(
                key=tool, status="completed", item=g.ToolShape(tool="echo_tool", args={"text": "echo"}, result="ok")
            ),
        ]
        shapes: list[tuple[str, g.ItemShape]] = [
            ("search-1", g.WebSearchShape(queries=["echo"])),
            ("fetch-1", g.WebFetchShape(url="https://example.com/echo", pattern=None)),
            ("image-1", g.ImageViewShape(path=f"{cwd}/echo.png")),
            ("read-1", g.FileReadShape(path=f"{cwd}/echo.txt")),
            ("grep-1", g.SearchShape(mode="content", query="echo")),
            ("steps-1", g.PlanStepsShape(steps=[g.PlanStep(step="echo", status="completed")])),
            ("compact-1", g.CompactionShape()),
            ("reason-1", g.ReasoningShape(summary=["echo"], content=["echo"])),
            ("plan-1", g.PlanShape(text="1. echo")),
            ("named-1", g.AgentMessageShape(text="a named message")),
            ("child-1", g.DelegationShape(childRef="child-1", label="Echo helper", background=False)),
            ("note-1", g.ExtensionShape(kind="echo/note", payload={"note": "echo"})),
        ]
        singles: list[g.Delta] = []
        for pid, shape in shapes:
            key = g.ItemKey(providerItemId=pid)
            presentation = PRESENTATION if isinstance(shape, g.ExtensionShape) else UNSET
            singles.append(g.ItemOpen(key=key, item=shape, presentation=presentation))
            singles.append(
                g.ItemClose(key=key, status="completed", resultText="done", item=shape, presentation=presentation)
            )
        task = g.ItemKey(providerItemId="bg-1")
        helper = g.ItemKey(providerItemId="child-2")

        def background(status: g.ItemStatus, task_status: Literal["running", "completed"]) -> g.BackgroundTaskShape:
            return g.BackgroundTaskShape(
                familyId="echo", taskType="shell", description="echo in the background", status=status,
                taskStatus=task_status, skipTranscript=False,
            )  # fmt: skip

        delegate = g.DelegationShape(childRef="child-2", label="Echo in the background", background=True)
        lasting: list[g.Delta] = [
            g.ItemOpen(key=task, item=background("pending", "running")),
            g.ItemProgress(key=task, snapshot=background("pending", "running"), flush=True),
            g.ItemClose(key=task, status="completed", item=background("completed", "completed")),
            g.ItemOpen(key=helper, item=delegate),
            g.ItemProgress(key=helper, snapshot=delegate, flush=True),
            g.ItemClose(key=helper, status="completed", item=delegate),
        ]
        limits = g.RateLimits(
            providerId="echo", status="allowed", kind="unknown", windows=[], reachedReason=None,
            overageStatus=None, overageReason=None,
        )  # fmt: skip
        raw = g.RawEvent(jsonrpc="2.0", method="echo/unknown")
        signals: list[g.Delta] = [
            g.ExtensionState(extensionKind="echo/state", payload={"n": 1}),
            g.ProviderRateLimits(rateLimits=limits),
            g.ProviderModelFallback(
                originalModel="echo-large", fallbackModel="echo", reason="provider", message="fell back"
            ),
            g.ProviderWarning(summary="echo warning", vouchedTurn=True),
            g.Unhandled(raw=raw, rawType="echo/unknown", vouchedTurn=True),
            g.ProviderError(message="transient", willRetry=True),
            g.TurnDiff(diff="--- /dev/null\n+++ b/echo.txt\n+echo\n"),
            g.ContextCompacted(),
            g.ContextCleared(),
        ]
        return [streams, commands, edits, singles, lasting, signals]


def main(argv: list[str] | None = None) -> None:
    """`--help` prints this module's text (the prompt directives) and exits; otherwise serve on stdio."""
    parser = argparse.ArgumentParser(
        prog="python -m bridges.echo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args(argv)
    Echo().bridge.run()
