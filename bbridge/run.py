"""`bbridge run`: one thread, one turn, the live timeline (daemon.md §8).

For bridge authors: runs the daemon (`bbridge serve`, with the bridge as its one provider in a temporary
config, text coalescing off and undeclared extension kinds allowed) as a child on stdio and talks to it through
`bbridge.client`, as any client would; the daemon's own machinery (handshake, assembler, guard, watchdogs)
spawns the bridge. It starts a thread, sends one prompt and prints the assembled events as they arrive —
readable, or NDJSON with `--json` — until the turn settles or the bridge goes away. The exit status says
whether it worked. `--tools FILE` declares client tools (protocol.md `DynamicTool`, plus an optional canned
`answer` each) so a bridge's tool round trip can be watched end to end. With `--url` (a `Remote`) it drives a
daemon already running (`serve --listen`) instead, on one of that daemon's providers (`--provider`): the same
thread, turn and timeline, minus what only a daemon of its own can say (the bridge's environment, `--env`, and
its drop counters, which a shared daemon counts for every thread).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
import msgspec

from bbridge.client import Client, DaemonError, Notice, client_request_id, unreachable
from bbridge.wire import client_api as api

PROVIDER = "bridge"
TEXT_TYPES = {
    "item/agentMessage/delta": "",
    "item/reasoning/textDelta": "thinking: ",
    "item/reasoning/summaryTextDelta": "thinking: ",
    "item/plan/delta": "plan: ",
    "item/commandExecution/outputDelta": "",
    "item/fileChange/outputDelta": "",
}
DEFAULT_TIMEOUT_S = 300.0  # `--timeout`: well under the stall watchdog's 600 s, long enough for a slow model
STATUS_WAIT_S = 5.0  # how long the last `daemon/status` may take
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


def _label(item: dict[str, Any], done: bool) -> str:
    presentation = item.get("presentation")
    if presentation is not None:
        label = msgspec.to_builtins(presentation)["label"]
        return str(label["completed" if done else "pending"])
    kind = item["type"]
    detail = item.get("command") or item.get("tool") or item.get("path") or item.get("url") or item.get("query")
    return f"{kind} {detail}" if detail else kind


# A retry counter at the head of a provider error's detail: Codex's "Reconnecting... 3/5\n<error>", Claude Code's
# "Claude Code API retry 1/10 after 500ms: <error>" (claude-code-bridge.md §api_retry), a generic "retry 2/8: ...".
_RETRY = re.compile(r"(?:Reconnecting\.\.\.|(?:.*?\b)?[Rr]etry(?:ing)?) (\d+)/(\d+)(?: after [\d.]+ ?m?s)?[:\s]\s*")
GENERIC_ERROR = "Provider error"  # what every bridge puts in `message`; the useful words are in `detail`
# text items whose whole text can arrive in item/completed with no delta before it (prefix as when streamed)
WHOLE_TEXT = {"agentMessage": "", "plan": "plan: ", "reasoning": "thinking: "}


def error_text(event: dict[str, Any]) -> tuple[str | None, str]:
    """A `provider/error`'s (or `system/error`'s) readable words and its retry counter (`"3/5"`, or None).

    The generic `Provider error` message gives way to the detail; a multi-line detail is one line."""
    message = str(event.get("message") or "")
    detail = str(event.get("detail") or "")
    retry = None
    found = _RETRY.match(detail)
    if found:
        retry, detail = f"{found[1]}/{found[2]}", detail[found.end() :]
    detail = " / ".join(part.strip() for part in detail.splitlines() if part.strip())
    if not detail or detail == message:
        return retry, message
    return retry, detail if message in ("", GENERIC_ERROR) else f"{message}: {detail}"


def _whole_text(item: dict[str, Any]) -> str:
    """The text of a text item, as item/completed carries it."""
    if item["type"] == "reasoning":
        return "\n".join([*item.get("summary", []), *item.get("content", [])])
    return str(item.get("text") or "")


@dataclass
class _Repeat:
    """A run of the same error (a bridge retrying): printed once, then counted."""

    key: tuple[str, ...]
    count: int
    retry: str | None


@dataclass
class Renderer:
    """The readable timeline, shared by `bbridge run` and `bbridge tail` so both read the same.

    The same error again (a provider retrying: `willRetry`, a retry counter in the detail) takes one line: on a
    terminal (`live`) that line is rewritten with the latest retry counter or a count; otherwise the first is
    printed and, when the run of repeats ends, one line says how many more came and the last retry counter."""

    out: TextIO
    live: bool | None = None  # a terminal; None: ask `out`
    _streaming: str | None = None  # the item whose text run is open on the current line
    _streamed: set[str] = field(default_factory=set)  # lead + id of the open text items whose deltas were shown
    _repeat: _Repeat | None = None
    _lead: str = ""

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = self.out.isatty()

    def line(self, text: str | None) -> None:
        """End a streamed-text run or a run of retries, then print one line (None: only end the run)."""
        if self._streaming is not None:
            self.out.write("\n")
            self._streaming = None
        if self._repeat is not None:
            self._end_repeat(self._repeat)
            self._repeat = None
        if text is not None:
            self.out.write(text + "\n")

    def _end_repeat(self, repeat: _Repeat) -> None:
        if self.live:
            self.out.write("\n")  # the updating line stays as it was last written
        elif repeat.count > 1:
            more = repeat.count - 1
            last = f", the last retry {repeat.retry}" if repeat.retry else ""
            self.out.write(f"{self._lead}  ! … the same error {more} more time{'s' if more > 1 else ''}{last}\n")

    def render(self, event: dict[str, Any], lead: str = "") -> None:
        """One event; `lead` starts each line it begins (`bbridge tail` names the thread there)."""
        kind = event["type"]
        if kind in TEXT_TYPES:
            if self._streaming != event["itemId"]:
                self.line(None)
                self.out.write(lead + "    " + TEXT_TYPES[kind])
                self._streaming = event["itemId"]
                self._streamed.add(lead + event["itemId"])
            self.out.write(event["delta"])
            return
        if kind in ("provider/error", "system/error"):
            self._error(event, lead)
            return
        if kind == "item/completed" and event["item"]["type"] in WHOLE_TEXT:
            item = event["item"]
            whole = _whole_text(item)
            if lead + item["id"] not in self._streamed and whole:  # arrived whole: nothing showed it yet
                self.line(lead + "    " + WHOLE_TEXT[item["type"]] + whole)
            self._streamed.discard(lead + item["id"])
        text = _describe(event)
        if text is not None:
            self.line(lead + text)

    def _error(self, event: dict[str, Any], lead: str) -> None:
        retry, words = error_text(event)
        retrying = retry is not None or event.get("willRetry") is True
        key = (lead, event["type"], str(retrying), words)
        repeat = self._repeat
        if repeat is not None and repeat.key == key:
            repeat.count += 1
            repeat.retry = retry
            if self.live:
                self.out.write("\r\x1b[K" + _error_line(lead, retry, retrying, words, repeat.count))
            return
        self.line(None)
        self._lead, self._repeat = lead, _Repeat(key, 1, retry)
        self.out.write(_error_line(lead, retry, retrying, words, 1) + ("" if self.live else "\n"))


def _error_line(lead: str, retry: str | None, retrying: bool, words: str, count: int) -> str:
    tag = f" (retry {retry})" if retry else " (will retry)" if retrying else ""
    times = f" [{count} times]" if count > 1 and retry is None else ""  # a retry counter says it already
    return f"{lead}  ! error{tag}: {words}{times}"


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
    provider: str = PROVIDER
    settled: anyio.Event = field(default_factory=anyio.Event)
    turn_status: str | None = None
    errors: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # what the daemon dropped of the bridge's output
    tools: dict[str, RunTool] = field(default_factory=dict)
    view: Renderer = field(init=False)

    def __post_init__(self) -> None:
        self.view = Renderer(self.out)

    def take(self, note: Notice) -> None:
        params = note.params
        if isinstance(params, api.BridgeStatus):
            if params.providerId != self.provider:
                return
            if params.state == "failed" and params.reason:
                self.errors.append(params.reason)  # a crash mid-turn arrives as provider/error instead
            if params.state in ("failed", "exited"):
                self.settled.set()
        elif isinstance(params, api.InteractionOpenedParams):
            # said here, in order with the events, not by the answer (a daemon → client request can overtake them)
            self.view.line(f"  ? {params.method}: answered automatically (bbridge run is not interactive)")
            self.out.flush()
        elif isinstance(params, api.ThreadEventsNotification) and params.threadId == self.thread_id:
            for entry in params.events:
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
            self.errors.append(error_text(event)[1])


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


def write_config(directory: Path, command: list[str], cwd: str | None, env: dict[str, str] | None = None) -> Path:
    """The daemon's config: the bridge as provider `PROVIDER`, with `env` (`--env`) in its environment."""
    lines = [f"[providers.{PROVIDER}]", f"command = [{', '.join(_toml_string(arg) for arg in command)}]"]
    if cwd is not None:
        lines.append(f"cwd = {_toml_string(cwd)}")
    if env:
        lines.append(f"env = {{ {', '.join(f'{_toml_string(k)} = {_toml_string(v)}' for k, v in env.items())} }}")
    path = directory / "bbridge.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def serve_command(config: Path, log_level: str, extra: Sequence[str] = ()) -> list[str]:
    """`bbridge serve` on stdio as `bbridge run` needs it: no coalescing, any extension kind shown; `extra` are
    more of serve's options (`--record DIR` and its redactions)."""
    options = ["--flush-ms", "0", "--open-extensions", "--log-level", log_level, *extra]
    return [sys.executable, "-m", "bbridge", "serve", "--config", str(config), *options]


async def _one_turn(
    client: Client, provider: str, thread_id: str, cwd: str | None, prompt: str, declared: list[Any]
) -> None:
    """thread/start, then turn/start with the prompt; a refusal is a `DaemonError` with the daemon's message."""
    options: dict[str, Any] = {**OPTIONS, "envVars": {}}
    start = {"providerId": provider, "threadId": thread_id, "cwd": cwd or os.getcwd(), "options": options}
    await client.request("thread/start", {**start, **({"dynamicTools": declared} if declared else {})})
    text_input = [{"type": "text", "text": prompt, "mentions": []}]
    turn = {"providerId": provider, "threadId": thread_id, "input": text_input, "options": options}
    await client.request("turn/start", {**turn, "clientRequestId": client_request_id()})


def waiting_words(thread: dict[str, Any] | None) -> str:
    """What an unsettled turn waits on, from the thread's `daemon/status` row (the watchdogs' view)."""
    if thread is None:
        return "the daemon does not know the thread"
    turn = thread.get("openTurn")
    waits = thread.get("waitingOn") or []
    if waits:
        asked = ", ".join(
            f"a {w['kind'].replace('_', ' ')} ({w['requestId']}, pending {w['ageS']:.0f}s)" for w in waits
        )
        return f"turn {turn['turnId'] if turn else '?'} is waiting on a client to answer {asked}"
    if turn is not None:
        silent = thread.get("sinceBridgeS")
        return f"turn {turn['turnId']} is open and has had no provider traffic for {silent or 0:.0f}s"
    if thread.get("pendingTurnStart"):
        return "the provider accepted the turn but has not started it"
    return "no turn is open: the provider never started one"


# daemon/status counters that say the daemon dropped something the bridge sent, and how to say it
DROPS = {
    "grammar_drops": "event(s) the protocol grammar refused were dropped",
    "rejected_notifications": "invalid thread/delta notification(s) were skipped whole",
    "failed_notifications": "bridge notification(s) failed in the daemon and were lost",
}


def drop_reasons(counters: dict[str, int]) -> list[str]:
    """A `run` daemon serves this one turn: any drop it counted is this bridge's."""
    found = [f"{counters[name]} {words}" for name, words in DROPS.items() if counters.get(name)]
    if not found:
        return []
    return [f"the daemon dropped what the bridge sent: {'; '.join(found)} (its warnings above say which and why)"]


async def _settle(
    client: Client, timeline: Timeline, thread_id: str, timed_out: float | None, strict: bool, own: bool
) -> list[str]:
    """After the turn (or `timed_out` seconds without it settling): ask the daemon what it dropped, what the
    turn waits on when it gave up and, with `strict`, what it noted against the bridge in the thread
    (`bridgeMistakes`: grammar drops and suspect closes, each naming the bridge's item key), which it returns."""
    status = None
    with anyio.move_on_after(STATUS_WAIT_S), contextlib.suppress(DaemonError):  # gone: the timeline says why
        status = await client.status()
    thread = next((t for t in status.threads if t.get("threadId") == thread_id), None) if status else None
    if timed_out is not None:
        words = waiting_words(thread) if status is not None else "the daemon did not answer daemon/status"
        timeline.errors.insert(0, f"gave up after {timed_out:g}s (--timeout): {words}")
    if status is not None and own:  # a shared daemon's counters are every thread's
        timeline.dropped.extend(drop_reasons(status.counters))
    return [str(m["message"]) for m in (thread or {}).get("bridgeMistakes", [])] if strict else []


def new_thread_id() -> str:
    return "thr_run" + uuid.uuid4().hex[:8]


@dataclass(frozen=True)
class Remote:
    """A running daemon `bbridge run --url` drives: its URL, token, CA file and the provider to use."""

    url: str
    provider: str
    token: str | None = None
    ca_file: Path | None = None


@contextlib.asynccontextmanager
async def _daemon(
    remote: Remote | None, command: list[str], cwd: str | None, env: dict[str, str] | None, log_level: str,
    answer: Callable[[str, dict[str, Any]], Awaitable[Any]], serve_options: Sequence[str] = (),
) -> AsyncIterator[Client]:  # fmt: skip
    """A client of the remote daemon, or of a daemon of its own (the bridge its one provider) on stdio."""
    if remote is not None:
        async with Client.connect(remote.url, token=remote.token, ca_file=remote.ca_file, on_request=answer) as c:
            yield c
        return
    with tempfile.TemporaryDirectory(prefix="bbridge-run-") as directory:
        serve = serve_command(write_config(Path(directory), command, cwd, env), log_level, serve_options)
        async with Client.spawn(serve, on_request=answer) as client:
            yield client


async def run_once(
    command: list[str],
    prompt: str,
    cwd: str | None,
    as_json: bool,
    out: TextIO = sys.stdout,
    tools: list[RunTool] | None = None,
    log_level: str = "warning",
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    env: dict[str, str] | None = None,
    strict: bool = False,
    remote: Remote | None = None,
    thread_id: str | None = None,
    serve_options: Sequence[str] = (),
) -> int:
    """One turn; `thread_id` names the thread (default: a new `thr_run…`), `serve_options` are passed to the daemon
    of its own (`--record DIR`, `--redact …`)."""
    thread_id = thread_id or new_thread_id()
    mistakes: list[str] = []
    provider = remote.provider if remote is not None else PROVIDER
    timeline = Timeline(thread_id, out, as_json, provider, tools={tool.name: tool for tool in tools or []})
    declared = [
        {k: v for k, v in msgspec.to_builtins(tool).items() if k != "answer"} for tool in timeline.tools.values()
    ]

    async def answer(method: str, params: dict[str, Any]) -> Any:
        return _answer_interaction(timeline, method, params)

    async def follow(client: Client) -> None:
        async for note in client.notifications():
            timeline.take(note)
        timeline.closed()

    try:
        async with (
            _daemon(remote, command, cwd, env, log_level, answer, serve_options) as client,
            anyio.create_task_group() as group,
        ):
            group.start_soon(follow, client)
            try:
                with anyio.move_on_after(timeout) as waited:
                    await _one_turn(client, provider, thread_id, cwd, prompt, declared)
                    await timeline.settled.wait()
                timed_out = timeout if waited.cancelled_caught else None
                mistakes = await _settle(client, timeline, thread_id, timed_out, strict, own=remote is None)
            except DaemonError as exc:  # caught here: raised in the task group it would come out grouped
                timeline.errors.append(exc.message)
            group.cancel_scope.cancel()
    except DaemonError as exc:  # the daemon did not start (it says why on stderr), or refused this client
        timeline.errors.append(exc.message)
    except OSError as exc:
        if remote is None:
            raise
        timeline.errors.append(unreachable(remote.url, exc))
    if not as_json:
        timeline.view.line(None)
    for mistake in mistakes:
        print(f"bbridge run: --strict: {mistake}", file=sys.stderr)
    problems = [*([f"--strict: {len(mistakes)} bridge mistake(s), above"] if mistakes else []), *timeline.dropped]
    if timeline.turn_status == "completed" and not problems:
        return 0
    reasons = problems if timeline.turn_status == "completed" else [*timeline.errors, *problems]
    reason = "; ".join(dict.fromkeys(reasons)) or f"the turn ended {timeline.turn_status or 'without settling'}"
    print(f"bbridge run: failed: {reason}", file=sys.stderr)
    return 1
