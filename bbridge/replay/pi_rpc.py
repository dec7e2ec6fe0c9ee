"""The `pi` dialect of the fake provider child: a fake `pi --mode rpc` playing a recorded pi cell (protocol.md §6.4).

pi's recordings come from the reference's in-process SDK (pi-bridge.md §3.10): `provider→bridge` is every
session event as `JSON.stringify` wrote it, `bridge→provider` every dispatch (`{"method":"prompt"|"compact"|
"abort",…}`). This child speaks pi's RPC wire to the live bridge from them:

* **Segments.** One live child per session construction; the lanes are cut after each recorded `abort` (a
  graceful close), and each child claims the next segment through the state directory, as the other dialects do.
  A child started with `--no-session` (a model-list probe) claims none.
* **Script.** The segment in wire order: an event line is played (paced by `STATE_DIR/cursor`); a dispatch is an
  expectation that blocks the script until the bridge sends that command (`prompt` with the same
  `streamingBehavior`, `compact`, `abort`). A `prompt` is answered at once, `abort` too, `compact` after the next
  `compaction_end` (with its error, as pi answers a refused compaction).
* **RPC slimming.** `message_update` loses `message` and `assistantMessageEvent.partial` (pi's RPC mode drops
  both); every other event line is played byte for byte.
* **What the events cannot carry** (pi-bridge.md §9) comes from the recorded `bridge→runtime` lane, as the
  current lanes took it: `get_entries` answers the leaf id the recording shows next after the last played
  `agent_end` (a boundary's or a stop result's `providerCheckpointId`), `get_session_stats` the next
  `contextWindow` after the last played `turn_end`/`compaction_end`. That value is the usage *at* the event
  (the reference read it in-process there), so after a `turn_end`/`compaction_end` the script waits (bounded)
  until the bridge asked: pi would count a message it ends meanwhile (a steer), which the recorded value does
  not. `get_state` names the `--model` it was given; any other command gets an empty success.
* **Client tools.** The bridge's tool extension (`-e FILE`) runs inside pi; here, when a played
  `tool_execution_start` names one of its tools, the child relays the call as the extension would (its socket,
  token and `tools/call`), and plays on only once the bridge answered it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import trio

from bbridge.core import js
from bbridge.replay.state_dir import claim_segment, provider_entries, read_cursor
from bbridge.wire import framing
from bbridge.wire.lanes import BRIDGE_TO_PROVIDER, BRIDGE_TO_RUNTIME, lane_path, read_lane

log = structlog.get_logger("bbridge.replay.pi_rpc")

EMIT_GAP_S = 0.002
USAGE_WAIT_S = 5.0  # how long the script waits for a bridge to ask for the usage after a `turn_end`
POLL_S = 0.005
CONFIG = re.compile(r"^const CONFIG = (.*);$", re.MULTILINE)


@dataclass(frozen=True)
class Step:
    seq: float
    run: float
    expect: str | None  # a command kind the bridge must send (`prompt:followUp`, `compact`, `abort`), or None
    text: str  # the event line to play


def _dispatch_key(message: dict[str, Any]) -> str:
    method = str(message.get("method"))
    if method == "prompt":
        params = message.get("params")
        behavior = params.get("streamingBehavior") if isinstance(params, dict) else None
        return f"prompt:{behavior or 'followUp'}"
    return method


def segments(cell: Path) -> list[list[Step]]:
    """The provider lanes in wire order, cut after every recorded `abort`."""
    entries = provider_entries(cell)
    cut: list[list[Step]] = [[]]
    for entry in entries:
        if entry.dir == BRIDGE_TO_PROVIDER:
            key = _dispatch_key(json.loads(entry.line))
            cut[-1].append(Step(entry.seq, entry.run, key, ""))
            if key == "abort":
                cut.append([])
        else:
            cut[-1].append(Step(entry.seq, entry.run, None, entry.line))
    return [segment for segment in cut if segment]


@dataclass
class Recorded:
    """What the recorded `bridge→runtime` lane says pi's session held: leaf ids and context usage, by position."""

    checkpoints: list[tuple[float, str]] = field(default_factory=list)
    usage: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    @classmethod
    def read(cls, cell: Path) -> Recorded:
        found = cls()
        current = lane_path(cell, BRIDGE_TO_RUNTIME, current=True)
        path = current if current.exists() else lane_path(cell, BRIDGE_TO_RUNTIME)
        for entry in read_lane(path, BRIDGE_TO_RUNTIME) if path.exists() else []:
            message = json.loads(entry.line)
            result = message.get("result")
            if isinstance(result, dict) and isinstance(result.get("providerCheckpointId"), str):
                found.checkpoints.append((entry.seq, result["providerCheckpointId"]))
            params = message.get("params") if message.get("method") == "thread/delta" else None
            for delta in params.get("deltas", []) if isinstance(params, dict) else []:
                if delta.get("kind") == "turn.boundary" and isinstance(delta.get("providerCheckpointId"), str):
                    found.checkpoints.append((entry.seq, delta["providerCheckpointId"]))
                elif delta.get("kind") == "contextWindow":
                    found.usage.append((entry.seq, {"tokens": delta.get("used"), "contextWindow": delta.get("size")}))
        return found

    def leaf(self, after: float) -> str | None:
        return next((c for seq, c in self.checkpoints if seq > after), None)

    def context(self, after: float) -> dict[str, Any] | None:
        return next((u for seq, u in self.usage if seq > after), None)


def _slim(text: str) -> str:
    """A `message_update` as pi's RPC mode writes it; any other line as recorded."""
    if '"message_update"' not in text:
        return text
    event = js.parse(text)
    if not isinstance(event, dict) or event.get("type") != "message_update":
        return text
    update = event.get("assistantMessageEvent")
    slim = {k: v for k, v in event.items() if k != "message"}
    if isinstance(update, dict):
        slim["assistantMessageEvent"] = {k: v for k, v in update.items() if k != "partial"}
    return js.stringify(slim)


def _flag(argv: Sequence[str], name: str) -> str | None:
    return next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name), None)


class FakePi:
    """Plays one segment to the live bridge over pi's RPC wire."""

    def __init__(self, script: list[Step], recorded: Recorded, state: Path, argv: Sequence[str]) -> None:
        self.script, self.recorded, self.state = script, recorded, state
        self.model = _flag(argv, "--model")
        extension = _flag(argv, "-e")
        self.tools = _extension_config(Path(extension)) if extension else None
        self.position = 0
        self.inbox: list[dict[str, Any]] = []  # live commands the script has not reached yet
        self.changed = trio.Event()
        self.compacting: dict[str, Any] | None = None  # the live `compact` waiting for its `compaction_end`
        self.last_end = script[0].seq - 1 if script else 0.0  # the last played agent_end (or the start)
        self.last_turn_end = self.last_end
        self.usage_asked = trio.Event()
        self.relay: _Relay | None = None
        self.write_lock = trio.Lock()
        self.done = False

    async def write(self, text: str) -> None:
        async with self.write_lock:
            await trio.to_thread.run_sync(_write_stdout, text)

    async def respond(self, command: dict[str, Any], data: Any = None, error: str | None = None) -> None:
        answer: dict[str, Any] = {"type": "response", "command": command.get("type"), "success": error is None}
        if "id" in command:
            answer = {"id": command["id"], **answer}
        if error is not None:
            answer["error"] = error
        elif data is not None:
            answer["data"] = data
        await self.write(js.stringify(answer))

    async def receive(self, command: dict[str, Any]) -> None:
        """A live command: queries are answered at once; dispatches wait for their place in the script."""
        kind = command.get("type")
        if kind == "get_state":
            model = None
            if self.model:
                provider, _, ident = self.model.partition("/")
                model = {"id": ident, "provider": provider} if ident else {"id": provider}
            await self.respond(command, {"model": model, "isStreaming": False, "isCompacting": False})
        elif kind == "get_entries":
            await self.respond(command, {"entries": [], "leafId": self.recorded.leaf(self.last_end)})
        elif kind == "get_session_stats":
            await self.respond(command, {"contextUsage": self.recorded.context(self.last_turn_end)})
            self.usage_asked.set()
        elif kind in ("prompt", "compact", "abort") and not self.done:
            self.inbox.append(command)
            self.changed.set()
        else:
            await self.respond(command, {})

    def _matching(self, expect: str) -> dict[str, Any] | None:
        for command in self.inbox:
            kind = command.get("type")
            key = f"prompt:{command.get('streamingBehavior') or 'followUp'}" if kind == "prompt" else kind
            if key == expect:
                self.inbox.remove(command)
                return command
        return None

    async def play(self) -> None:
        while self.position < len(self.script):
            step = self.script[self.position]
            if step.expect is not None:
                command = self._matching(step.expect)
                if command is None:
                    await self._idle()
                    continue
                self.position += 1
                if step.expect == "compact":
                    self.compacting = command
                    continue
                while self._next_is("queue_update"):  # pi queues (and says so) before it answers
                    self.position += 1
                    await self._play(self.script[self.position - 1])
                await self.respond(command)
                continue
            cursor = read_cursor(self.state)
            if cursor is not None and (step.run, step.seq) >= cursor:
                await self._idle()
                continue
            self.position += 1
            await self._play(step)
            await trio.sleep(EMIT_GAP_S)
        self.done = True
        for command in self.inbox:  # past the segment: anything else gets an empty success
            await self.respond(command)
        self.inbox.clear()

    def _next_is(self, kind: str) -> bool:
        if self.position >= len(self.script):
            return False
        step = self.script[self.position]
        return step.expect is None and f'"type":"{kind}"' in step.text

    async def _play(self, step: Step) -> None:
        event = js.parse(step.text)
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "agent_end":  # before the line goes out: the bridge asks right after reading it
            self.last_end = step.seq
        elif kind in ("turn_end", "compaction_end"):
            self.last_turn_end = step.seq
            self.usage_asked = trio.Event()
        await self.write(_slim(step.text))
        if kind == "compaction_end" and self.compacting is not None:
            command, self.compacting = self.compacting, None
            error = event.get("errorMessage")
            await self.respond(command, error=error if isinstance(error, str) else None)
        if kind == "tool_execution_start" and self.tools is not None and event.get("toolName") in self.tools["names"]:
            self.relay = self.relay or await _Relay.open(self.tools)
            await self.relay.call(str(event["toolName"]), event.get("args"))
        if kind in ("turn_end", "compaction_end"):
            with trio.move_on_after(USAGE_WAIT_S):
                await self.usage_asked.wait()

    async def _idle(self) -> None:
        with trio.move_on_after(POLL_S):
            await self.changed.wait()
        self.changed = trio.Event()


def _write_stdout(text: str) -> None:
    os.write(1, (text + "\n").encode())


def _extension_config(path: Path) -> dict[str, Any] | None:
    found = CONFIG.search(path.read_text(encoding="utf-8")) if path.is_file() else None
    if found is None:
        return None
    config: dict[str, Any] = json.loads(found[1])
    config["names"] = {tool["name"] for tool in config.get("tools", [])}
    return config


class _Relay:
    """The tool extension's side of the bridge's socket: hello, then JSON-RPC `tools/call`, one at a time."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.lines = framing.LineReader()
        self.next = 1

    @classmethod
    async def open(cls, config: dict[str, Any]) -> _Relay:
        stream = await trio.open_unix_socket(config["socket"])
        relay = cls(stream)
        await stream.send_all(f"{config['hello']}\n".encode())
        await relay._line()  # the acknowledgement
        return relay

    async def _line(self) -> bytes:
        while True:
            data = await self.stream.receive_some()
            if not data:
                raise EOFError("the bridge closed the tool relay")
            for line in self.lines.feed(data):
                if isinstance(line, bytes):
                    return line

    async def call(self, name: str, arguments: Any) -> Any:
        ident, self.next = self.next, self.next + 1
        request = {
            "jsonrpc": "2.0",
            "id": ident,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        await self.stream.send_all((json.dumps(request) + "\n").encode())
        return json.loads(await self._line())


async def serve(cell: Path, state: Path, argv: Sequence[str]) -> None:
    script: list[Step] = []
    if "--no-session" not in argv:
        cut = segments(cell)
        index = claim_segment(state)
        script = cut[index] if index < len(cut) else []
        log.info("claimed a pi segment", segment=index, steps=len(script))
    player = FakePi(script, Recorded.read(cell), state, argv)
    async with trio.lowlevel.FdStream(os.dup(0)) as stdin, trio.open_nursery() as nursery:
        nursery.start_soon(player.play)
        lines = framing.LineReader()
        async for data in stdin:
            for line in lines.feed(data):
                if isinstance(line, bytes) and line.strip():
                    command = json.loads(line)
                    if isinstance(command, dict):
                        await player.receive(command)
        nursery.cancel_scope.cancel()
