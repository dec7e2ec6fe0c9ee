"""`bbridge run`: one thread, one turn, the live timeline (daemon.md §8).

For bridge authors: runs the daemon (`bbridge serve`, with the bridge as its one provider in a temporary
config, text coalescing off and undeclared extension kinds allowed) as a child on stdio and talks to it through
`bbridge.client`, as any client would; the daemon's own machinery (handshake, assembler, guard, watchdogs)
spawns the bridge. It starts a thread, sends one prompt and prints the assembled events as they arrive —
readable, or NDJSON with `--json` — until the turn settles or the bridge goes away. The exit status says
whether it worked. `--tools FILE` declares client tools (protocol.md `DynamicTool`, plus an optional canned
`answer` each) so a bridge's tool round trip can be watched end to end.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
import msgspec

from bbridge.client import Client, DaemonError, Notification
from bbridge.wire import client as api

PROVIDER = "bridge"
TEXT_TYPES = {
    "item/agentMessage/delta": "",
    "item/reasoning/textDelta": "thinking: ",
    "item/reasoning/summaryTextDelta": "thinking: ",
    "item/plan/delta": "plan: ",
    "item/commandExecution/outputDelta": "",
    "item/fileChange/outputDelta": "",
}
_ALPHABET = "23456789abcdefghijkmnpqrstuvwxyz"
# bbridge run is a bridge author's tool: the permissive, no-approval policy (protocol.md §3.2)
OPTIONS = {"permissionMode": "full", "permissionScope": "full", "approvalReviewer": None, "permissionEscalation": None}


class RunTool(msgspec.Struct, forbid_unknown_fields=True):
    """A `--tools` entry: the declaration sent as `dynamicTools`, and what a call of it is answered."""

    name: str
    description: str
    inputSchema: Any
    presentation: Any = msgspec.UNSET
    answer: Any = msgspec.UNSET  # a tool result `{success, contentItems}`; absent: the call fails


def read_tools(raw: bytes) -> list[RunTool]:
    """The `--tools` file; `msgspec.ValidationError`/`DecodeError` say what is wrong."""
    return msgspec.json.decode(raw, type=list[RunTool])


def client_request_id() -> str:
    raw = uuid.uuid4().int
    return "creq_" + "".join(_ALPHABET[(raw >> (5 * i)) & 31] for i in range(10))


def _label(item: dict[str, Any], done: bool) -> str:
    presentation = item.get("presentation")
    if presentation is not None:
        label = msgspec.to_builtins(presentation)["label"]
        return str(label["completed" if done else "pending"])
    kind = item["type"]
    detail = item.get("command") or item.get("tool") or item.get("path") or item.get("url") or item.get("query")
    return f"{kind} {detail}" if detail else kind


@dataclass
class Renderer:
    """The readable timeline, shared by `bbridge run` and `bbridge tail` so both read the same."""

    out: TextIO
    _streaming: str | None = None  # the item whose text run is open on the current line

    def line(self, text: str | None) -> None:
        """End a streamed-text run, then print one line (None: only end the run)."""
        if self._streaming is not None:
            self.out.write("\n")
            self._streaming = None
        if text is not None:
            self.out.write(text + "\n")

    def render(self, event: dict[str, Any], lead: str = "") -> None:
        """One event; `lead` starts each line it begins (`bbridge tail` names the thread there)."""
        kind = event["type"]
        if kind in TEXT_TYPES:
            if self._streaming != event["itemId"]:
                self.line(None)
                self.out.write(lead + "    " + TEXT_TYPES[kind])
                self._streaming = event["itemId"]
            self.out.write(event["delta"])
            return
        text = _describe(event)
        if text is not None:
            self.line(lead + text)


def _describe(event: dict[str, Any]) -> str | None:
    """The line of an event that is not streamed text, or None for one the timeline leaves out."""
    kind = event["type"]
    if kind == "turn/started":
        return f"▶ turn {event['scope']['turnId']}"
    if kind == "turn/completed":
        return f"■ turn {event['status']}" + (f": {event['error']['message']}" if event.get("error") else "")
    if kind == "item/started":
        return f"  ◦ {_label(event['item'], False)}"
    if kind in ("item/completed", "item/backgroundTask/completed", "item/delegation/completed"):
        item = event["item"]
        status = item.get("status", "completed")
        mark = "✓" if status == "completed" else "✗"
        return f"  {mark} {_label(item, True)}" + ("" if status == "completed" else f" ({status})")
    if kind == "thread/tokenUsage/updated":
        total = msgspec.to_builtins(event["tokenUsage"]["total"])
        return f"  usage: {total['totalTokens']} tokens (in {total['inputTokens']}, out {total['outputTokens']})"
    if kind in ("provider/error", "system/error"):
        return f"  ! error: {event['message']}"
    if kind in ("provider/warning", "system/warning"):
        return f"  ! warning: {event.get('summary') or event.get('message', '')}"
    if kind == "item/toolCall/progress" and event.get("message"):
        return f"    … {event['message']}"
    if kind == "thread/name/updated":
        return f"  title: {event['threadName']}"
    return None


@dataclass
class Timeline:
    """Renders one thread's events from the daemon's notifications and notices when its turn settles."""

    thread_id: str
    out: TextIO
    as_json: bool
    settled: anyio.Event = field(default_factory=anyio.Event)
    turn_status: str | None = None
    errors: list[str] = field(default_factory=list)
    tools: dict[str, RunTool] = field(default_factory=dict)
    view: Renderer = field(init=False)

    def __post_init__(self) -> None:
        self.view = Renderer(self.out)

    def take(self, note: Notification) -> None:
        if note.method == "bridge/status":
            status = msgspec.convert(note.params, api.BridgeStatus)
            if status.providerId != PROVIDER:
                return
            if status.state == "failed" and status.reason:
                self.errors.append(status.reason)  # a crash mid-turn arrives as provider/error instead
            if status.state in ("failed", "exited"):
                self.settled.set()
        elif note.method == "interaction/opened":
            # said here, in order with the events, not by the answer (a daemon → client request can overtake them)
            self.view.line(f"  ? {note.params['method']}: answered automatically (bbridge run is not interactive)")
            self.out.flush()
        elif note.method == "thread/events":
            batch = msgspec.convert(note.params, api.ThreadEventsNotification)
            if batch.threadId == self.thread_id:
                for entry in batch.events:
                    self.show(entry.event)

    def closed(self) -> None:
        """The daemon went away: nothing more will come."""
        if not self.settled.is_set():
            self.errors.append("the daemon closed the connection")
            self.settled.set()

    def show(self, event: dict[str, Any]) -> None:
        if self.as_json:
            self.out.write(msgspec.json.encode(event).decode() + "\n")
        else:
            self.view.render(event)
        self.out.flush()
        kind = event["type"]
        if kind == "turn/completed":
            self.turn_status = event["status"]
            if event.get("error"):
                self.errors.append(event["error"]["message"])
            self.settled.set()
        elif kind in ("provider/error", "system/error"):
            self.errors.append(event["message"])


def _answer_interaction(timeline: Timeline, method: str, params: dict[str, Any]) -> Any:
    """No human is here: approvals are denied, questions get no answer, tool calls get their canned answer."""
    if method == "item/tool/call":
        tool = timeline.tools.get(str(params.get("tool")))
        if tool is not None and tool.answer is not msgspec.UNSET:
            return tool.answer
        text = f"bbridge run has no answer for tool {params.get('tool')!r}"
        return {"success": False, "contentItems": [{"type": "inputText", "text": text}]}
    payload = params.get("payload") or {}
    if payload.get("kind") == "approval":
        return {"decision": "deny"}
    return {"kind": "user_answer", "answers": {}}


def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but TOML also wants DEL escaped."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def write_config(directory: Path, command: list[str], cwd: str | None) -> Path:
    """The daemon's config: the bridge as provider `PROVIDER`."""
    lines = [f"[providers.{PROVIDER}]", f"command = [{', '.join(_toml_string(arg) for arg in command)}]"]
    if cwd is not None:
        lines.append(f"cwd = {_toml_string(cwd)}")
    path = directory / "bbridge.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def serve_command(config: Path, log_level: str) -> list[str]:
    """`bbridge serve` on stdio as `bbridge run` needs it: no coalescing, any extension kind shown."""
    options = ["--flush-ms", "0", "--open-extensions", "--log-level", log_level]
    return [sys.executable, "-m", "bbridge", "serve", "--config", str(config), *options]


async def _one_turn(client: Client, thread_id: str, cwd: str | None, prompt: str, declared: list[Any]) -> None:
    """thread/start, then turn/start with the prompt; a refusal is a `DaemonError` with the daemon's message."""
    options: dict[str, Any] = {**OPTIONS, "envVars": {}}
    start = {"providerId": PROVIDER, "threadId": thread_id, "cwd": cwd or os.getcwd(), "options": options}
    await client.request("thread/start", {**start, **({"dynamicTools": declared} if declared else {})})
    text_input = [{"type": "text", "text": prompt, "mentions": []}]
    turn = {"providerId": PROVIDER, "threadId": thread_id, "input": text_input, "options": options}
    await client.request("turn/start", {**turn, "clientRequestId": client_request_id()})


async def bridge_mistakes(client: Client, thread_id: str) -> list[str]:
    """`--strict`: what the daemon noted against the bridge in the thread (`daemon/status` `bridgeMistakes`:
    grammar drops and suspect closes, each naming the bridge's item key)."""
    status = await client.request("daemon/status", {})
    found = [t for t in status["threads"] if t["threadId"] == thread_id]
    return [str(m["message"]) for t in found for m in t.get("bridgeMistakes", [])]


async def run_once(
    command: list[str],
    prompt: str,
    cwd: str | None,
    as_json: bool,
    out: TextIO = sys.stdout,
    tools: list[RunTool] | None = None,
    log_level: str = "warning",
    strict: bool = False,
) -> int:
    thread_id = "thr_run" + uuid.uuid4().hex[:8]
    mistakes: list[str] = []
    timeline = Timeline(thread_id, out, as_json, tools={tool.name: tool for tool in tools or []})
    declared = [
        {k: v for k, v in msgspec.to_builtins(tool).items() if k != "answer"} for tool in timeline.tools.values()
    ]

    async def answer(method: str, params: dict[str, Any]) -> Any:
        return _answer_interaction(timeline, method, params)

    async def follow(client: Client) -> None:
        async for note in client.notifications():
            timeline.take(note)
        timeline.closed()

    with tempfile.TemporaryDirectory(prefix="bbridge-run-") as directory:
        serve = serve_command(write_config(Path(directory), command, cwd), log_level)
        try:
            async with Client.spawn(serve, on_request=answer) as client, anyio.create_task_group() as group:
                group.start_soon(follow, client)
                try:
                    await _one_turn(client, thread_id, cwd, prompt, declared)
                    with anyio.move_on_after(600):
                        await timeline.settled.wait()
                    if strict:
                        mistakes = await bridge_mistakes(client, thread_id)
                except DaemonError as exc:  # caught here: raised in the task group it would come out grouped
                    timeline.errors.append(exc.message)
                group.cancel_scope.cancel()
        except DaemonError as exc:  # the daemon did not start (it says why on stderr)
            timeline.errors.append(exc.message)
    if not as_json:
        timeline.view.line(None)
    for mistake in mistakes:
        print(f"bbridge run: --strict: {mistake}", file=sys.stderr)
    if mistakes:
        timeline.errors.append(f"--strict: {len(mistakes)} bridge mistake(s), above")
    elif timeline.turn_status == "completed":
        return 0
    reason = "; ".join(dict.fromkeys(timeline.errors)) or f"the turn ended {timeline.turn_status or 'without settling'}"
    print(f"bbridge run: failed: {reason}", file=sys.stderr)
    return 1
