"""The fake provider child of the replay harness (protocol.md §6.4).

`python -m bbridge.replay.fake_agent --recording CELL_DIR --state STATE_DIR
[--dialect json-rpc|claude-cli|pi]` stands in for the real agent: the cell's
`provider→bridge` lane is its script, played back on stdout, and the
`bridge→provider` lane is what it expects the bridge to write. An expectation
blocks the script until a matching live line arrives (same kind; same key for
requests and notifications, same id for responses); request ids the bridge
mints are mapped to the recorded ones so the recorded responses answer the live
requests, and ids the provider minted are replayed verbatim. The dialect says
what a key, an id and a generic answer are: JSON-RPC (ACP agents, the codex
app-server; the default) or the Claude Code CLI's stream-json
(`bbridge.replay.claude_cli`); pi's recordings hold SDK events, not wire lines, and
its dialect is a player of its own (`bbridge.replay.pi_rpc`). Arguments it does not know are ignored, as a
bridge passes the real CLI's flags.

One recording can serve several children (a new agent per session, resume or
fork): the lanes are cut into segments at each bridge-written `initialize`, and
each child claims the next unclaimed segment through the state directory. The
harness paces spontaneous provider lines with `STATE_DIR/cursor`
(`"<run> <seq>"`: play lines strictly before that position; `end` or absent:
play all), so a steer or an interrupt lands between the same two lines it did
live. Divergence never hangs the bridge: an unmatched live line that matches a
later expectation skips ahead after 750 ms, pending live requests get a
generic success after 5 s (`--lookahead-ms`, `--stall-ms`), and past the end
of its segment the child answers everything generically. It logs on stderr
only (structlog).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog
import trio

from bbridge import logs
from bbridge.replay import pi_rpc
from bbridge.replay.claude_cli import ClaudeCli
from bbridge.replay.state_dir import claim_segment, provider_entries, read_cursor
from bbridge.wire import framing
from bbridge.wire.lanes import BRIDGE_TO_PROVIDER, PROVIDER_TO_BRIDGE

STALL_MS = 5000
LOOKAHEAD_MS = 750
CURSOR_POLL_S = 0.005
EMIT_GAP_S = 0.002
RESPONSE_GAP_S = 0.05  # lets the bridge act on a response before the line after it, as it did live
log = structlog.get_logger("bbridge.replay.fake_agent")
SESSION_DEFINING = re.compile(r"^(thread|session)/(start|resume|fork|new|load|archive|unarchive|name/set)$")


class Dialect(Protocol):
    """A provider wire: how its lines are classified, re-addressed and answered."""

    initialize: str  # the key of the bridge request that opens a segment

    def classify(self, message: dict[str, Any]) -> tuple[str, str, Any]:
        """(kind, key, id) of a JSON object line."""
        ...

    def readdress(self, message: dict[str, Any], live_id: Any) -> dict[str, Any]:
        """A recorded response, answering the live request id instead."""
        ...

    def generic(self, request_id: Any) -> dict[str, Any]:
        """An empty success for a live request the recording cannot answer."""
        ...

    def learn(self, recorded: dict[str, Any], live: dict[str, Any]) -> None:
        """A live request matched a recorded one."""
        ...

    def rewrite(self, message: dict[str, Any]) -> dict[str, Any]:
        """A recorded provider line as this live bridge must see it."""
        ...


class JsonRpc:
    """JSON-RPC 2.0: requests have an id and a method, responses an id only, notifications a method only."""

    initialize = "initialize"

    def classify(self, message: dict[str, Any]) -> tuple[str, str, Any]:
        has_id = type(message.get("id")) in (str, int, float)
        method = message.get("method")
        if has_id and isinstance(method, str):
            return "request", method, message["id"]
        if has_id:
            return "response", "response", message["id"]
        return "notification", method if isinstance(method, str) else "?", None

    def readdress(self, message: dict[str, Any], live_id: Any) -> dict[str, Any]:
        return {k: (live_id if k == "id" else v) for k, v in message.items()}

    def generic(self, request_id: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request_id, "result": {}}

    def learn(self, recorded: dict[str, Any], live: dict[str, Any]) -> None:
        """Nothing to learn: JSON-RPC requests carry no ids the provider calls back."""

    def rewrite(self, message: dict[str, Any]) -> dict[str, Any]:
        return message


DIALECTS: dict[str, Callable[[], Dialect]] = {"json-rpc": JsonRpc, "claude-cli": ClaudeCli}


@dataclass(frozen=True)
class Line:
    """A classified line: `request` / `response` / `notification`, or `raw` when it is no JSON object."""

    kind: str
    key: str
    id: Any = None
    message: dict[str, Any] | None = None

    def matches(self, other: Line) -> bool:
        if self.kind != other.kind:
            return False
        return str(self.id) == str(other.id) if self.kind == "response" else self.key == other.key


@dataclass(frozen=True)
class Step:
    run: float
    seq: float
    dir: str
    text: str
    line: Line


def classify(text: str, dialect: Dialect) -> Line:
    try:
        message = json.loads(text)
    except ValueError:
        return Line("raw", "raw")
    if not isinstance(message, dict):
        return Line("raw", "raw")
    kind, key, id = dialect.classify(message)
    return Line(kind, key, id, message)


def segments(cell: Path, dialect: Dialect) -> list[list[Step]]:
    """The provider lanes in wire order, cut at every `initialize` the bridge wrote."""
    entries = provider_entries(cell)
    cut: list[list[Step]] = []
    for entry in entries:
        step = Step(entry.run, entry.seq, entry.dir, entry.line, classify(entry.line, dialect))
        starts = step.dir == BRIDGE_TO_PROVIDER and step.line.kind == "request" and step.line.key == dialect.initialize
        if not cut or starts:
            cut.append([])
        cut[-1].append(step)
    return cut


def encode(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Timing:
    """When divergence is given up on, in seconds (§6.4: 750 ms look-ahead, 5 s stall)."""

    lookahead: float = LOOKAHEAD_MS / 1000
    stall: float = STALL_MS / 1000


class Player:
    """Plays one segment against the live bridge."""

    def __init__(self, script: list[Step], state: Path, index: int, dialect: Dialect, timing: Timing) -> None:
        self.script = script
        self.state = state
        self.index = index
        self.dialect = dialect
        self.timing = timing
        self.position = 0
        self.pending: list[Line] = []
        self.live_ids: dict[str, Any] = {}  # recorded request id → live request id
        self.skipped: set[str] = set()  # recorded ids of requests this bridge never sent
        self.session_key = next(
            (s.line.key for s in script if s.dir == BRIDGE_TO_PROVIDER and s.line.kind == "request" and SESSION_DEFINING.match(s.line.key)),
            None,
        )  # fmt: skip
        self.saw_session_request = False
        self.changed = trio.Event()
        self.armed_at: float | None = None
        self.looked_ahead = False

    def log(self, text: str) -> None:
        log.info(text, segment=self.index)

    def write(self, text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def emit(self, step: Step) -> None:
        line = step.line
        if line.kind == "response" and line.message is not None:
            live = self.live_ids.get(str(line.id), line.id)
            self.write(encode(self.dialect.readdress(line.message, live)))
        elif line.message is not None:
            self.write(encode(self.dialect.rewrite(line.message)))
        else:
            self.write(step.text)

    def generic(self, live: Line, reason: str) -> None:
        if live.kind == "request":
            self.log(f"{reason}: answering {live.key} ({live.id}) generically")
            self.write(encode(self.dialect.generic(live.id)))
        else:
            self.log(f"{reason}: dropping unmatched {live.kind} {live.key}")

    # -- live lines ----------------------------------------------------------

    def receive(self, text: str) -> None:
        live = classify(text, self.dialect)
        if live.kind == "raw":
            return
        if not self.saw_session_request and live.kind == "request" and SESSION_DEFINING.match(live.key):
            self.saw_session_request = True
            if self.session_key is not None and live.key != self.session_key:
                self.log(f"first session request {live.key} is not the segment's {self.session_key}; releasing it")
                (self.state / f"segment-{self.index}").rmdir()
                self.script, self.position = [], 0
                for pending in self.pending:
                    self.generic(pending, "released segment")
                self.pending.clear()
        if self.position >= len(self.script):
            self.generic(live, "past end of segment")
            return
        self.pending.append(live)
        self.arm()
        self.changed.set()

    def arm(self) -> None:
        self.armed_at = trio.current_time() if self.pending else None
        self.looked_ahead = False

    # -- the script ----------------------------------------------------------

    def advance(self) -> float | None:
        """Take one step: the gap to wait after an emitted line, 0 after a matched expectation, None when blocked."""
        if self.position >= len(self.script):
            return None
        step = self.script[self.position]
        line = step.line
        if step.dir == PROVIDER_TO_BRIDGE:
            if line.kind != "response":
                cursor = read_cursor(self.state)
                if cursor is not None and (step.run, step.seq) >= cursor:
                    return None
            elif str(line.id) in self.skipped:
                self.position += 1
                return 0
            elif str(line.id) not in self.live_ids:
                return None  # answers a request the bridge has not sent yet
            self.emit(step)
            self.position += 1
            return RESPONSE_GAP_S if line.kind == "response" else EMIT_GAP_S
        live = next((p for p in self.pending if p.matches(line)), None)
        if live is None:
            return None
        self.pending.remove(live)
        if line.kind == "request":
            self.live_ids[str(line.id)] = live.id
            if line.message is not None and live.message is not None:
                self.dialect.learn(line.message, live.message)
        self.position += 1
        self.arm()
        return 0

    def look_ahead(self) -> None:
        """An unmatched live line that matches a later expectation: skip what this bridge never wrote."""
        self.looked_ahead = True
        for live in self.pending:
            for index in range(self.position + 1, len(self.script)):
                step = self.script[index]
                if step.dir != BRIDGE_TO_PROVIDER or not step.line.matches(live):
                    continue
                skipped = []
                for between in self.script[self.position : index]:
                    if between.dir == BRIDGE_TO_PROVIDER:
                        if between.line.kind == "request":
                            self.skipped.add(str(between.line.id))
                        skipped.append(between.line.key)
                    elif between.line.kind != "response" or str(between.line.id) in self.live_ids:
                        self.emit(between)
                self.log(f"bridge skipped recorded {', '.join(skipped)}; resuming at {live.key}")
                self.position = index
                self.arm()
                return

    def stall(self) -> None:
        expected = self.script[self.position].line.key if self.position < len(self.script) else "nothing"
        self.log(f"stalled for {self.timing.stall}s at step {self.position}/{len(self.script)} (expecting {expected})")
        for live in self.pending:
            self.generic(live, "stall")
        self.pending.clear()
        self.arm()

    async def play(self) -> None:
        while True:
            gap = self.advance()
            if gap is not None:
                if gap:
                    await trio.sleep(gap)
                continue
            with trio.move_on_after(CURSOR_POLL_S):
                await self.changed.wait()
            self.changed = trio.Event()
            if self.armed_at is not None and self.pending:
                waited = trio.current_time() - self.armed_at
                if waited >= self.timing.stall:
                    self.stall()
                elif waited >= self.timing.lookahead and not self.looked_ahead:
                    self.look_ahead()


async def serve(cell: Path, state: Path, dialect: Dialect, timing: Timing) -> None:
    cut = segments(cell, dialect)
    index = claim_segment(state)
    player = Player(cut[index] if index < len(cut) else [], state, index, dialect, timing)
    if not player.script:
        player.log(f"no recorded segment {index} (the recording has {len(cut)}); answering generically")
    async with trio.lowlevel.FdStream(os.dup(0)) as stdin, trio.open_nursery() as nursery:
        nursery.start_soon(player.play)
        lines = framing.LineReader()
        async for data in stdin:
            for line in lines.feed(data):
                if isinstance(line, bytes):
                    player.receive(line.decode("utf-8", errors="replace"))
        nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bbridge.replay.fake_agent", description="replay a cell's provider lanes", allow_abbrev=False
    )
    parser.add_argument("--recording", type=Path, required=True, metavar="CELL_DIR")
    parser.add_argument("--state", type=Path, required=True, metavar="STATE_DIR")
    parser.add_argument("--dialect", default="json-rpc", choices=[*sorted(DIALECTS), "pi"])
    parser.add_argument("--lookahead-ms", type=float, default=LOOKAHEAD_MS)
    parser.add_argument("--stall-ms", type=float, default=STALL_MS)
    args, rest = parser.parse_known_args(argv)  # the rest: the real CLI's flags, which a bridge passes
    logs.configure()
    if args.dialect == "pi":  # pi's recordings are SDK events and dispatches, not wire lines (`pi_rpc`)
        trio.run(pi_rpc.serve, args.recording, args.state, rest)
        return
    timing = Timing(args.lookahead_ms / 1000, args.stall_ms / 1000)
    trio.run(serve, args.recording, args.state, DIALECTS[args.dialect](), timing)


if __name__ == "__main__":
    main()
