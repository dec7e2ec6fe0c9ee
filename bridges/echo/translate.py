"""Pure: a prompt's directives -> the turn's delta batches (the opening, the answer's chunks, the closing, `deltas:all`).

The echo bridge's "provider message" is the prompt itself: `parse_directives` reads it, and every batch the turn
streams is built here from what it found. Nothing here awaits or keeps state; `session.py` decides when each
batch goes out and what happens between them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.wire import protocol
from bridges.echo.approvals import APPROVAL_KINDS
from bridges.echo.presentation import PRESENTATION

CONTEXT_WINDOW = 200_000


@dataclass
class Directives:
    mode: str = "echo"  # echo | noop | fail | all | ended
    delay: float = 0.0  # seconds before each streamed chunk
    hold: bool = False
    detail: str = "echo failure requested by the prompt"
    tool: str | None = None  # a client tool to call first
    approve: str | None = None  # an approval subject kind to ask about first
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def answers_at_once(self) -> bool:
        """Whether the answer is known when the turn opens (no zero-work turn, tool call or approval first)."""
        return self.mode != "noop" and self.tool is None and self.approve is None


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
    """The prompt (or steer) as one text: its text inputs joined by spaces."""
    return " ".join(i.text for i in inputs if isinstance(i, protocol.TextInput))


def chunks(text: str) -> list[str]:
    """Word-sized pieces (each keeps its trailing whitespace) that concatenate back to `text`."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def answer_key(number: int) -> g.ItemKey:
    """The key of turn `number`'s answer message."""
    return g.ItemKey(providerItemId=f"msg-{number}")


def text_batches(key: g.ItemKey, text: str) -> list[list[g.Delta]]:
    """`text` streamed into the answer message, one chunk per batch."""
    return [[g.ItemTextDelta(key=key, channel="agentMessage", text=c)] for c in chunks(text)]


def opening(directives: Directives, client_request_id: str | None, provider_thread_id: str) -> list[g.Delta]:
    """The turn's first deltas: its input accepted (when a client sent it), `turn.open`, `deltas:all`'s metadata."""
    opened: list[g.Delta] = [] if client_request_id is None else [g.InputAccepted(clientRequestId=client_request_id)]
    opened.append(g.TurnOpen())
    if directives.mode == "all":
        opened += [
            g.ThreadStarted(),
            g.ThreadIdentity(providerThreadId=provider_thread_id),
            g.ThreadName(name="echo"),
        ]
    return opened


def settling(directives: Directives, key: g.ItemKey) -> list[g.Delta] | None:
    """The closing batch of a turn that ends without usage (`noop`, `deltas:session.ended`, `fail`); else None."""
    mode = directives.mode
    if mode == "noop":
        return [g.TurnBoundary(status="completed")]
    if mode == "ended":
        return [g.SessionEnded()]
    if mode == "fail":
        error = g.ProviderError(message="Provider error", detail=directives.detail, willRetry=False, settlesTurn=True)
        return [g.ItemTextClose(key=key, channel="agentMessage"), error]
    return None


def completed(directives: Directives, key: g.ItemKey, usage: g.Usage, checkpoint: str) -> list[g.Delta]:
    """The closing batch of an answered turn: the message closed, its usage, the boundary with its checkpoint."""
    close: list[g.Delta] = [g.ItemTextClose(key=key, channel="agentMessage"), usage]
    if directives.mode == "all":
        used = usage.total.totalTokens
        close.append(g.ContextWindow(used=used, size=CONTEXT_WINDOW, estimated=False, attach="open"))
    return [*close, g.TurnBoundary(status="completed", providerCheckpointId=checkpoint)]


# -- deltas:all ----------------------------------------------------------------


def coverage_items(cwd: str) -> list[list[g.Delta]]:
    """Every item shape and every non-session delta kind of `deltas:all`, one logical step per batch."""
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
