"""Replay recorded cells through a live bridge and diff what it emits against the goldens (protocol.md §6).

For each cell the bridge under test is spawned; the cell's `runtime→bridge`
requests drive it (machine facts rewritten: `cwd` → a scratch workspace,
`envVars.PATH` → this machine's; an ACP launch spec → the fake agent of
`bbridge.fake_agent`, which plays the cell's provider lanes), bridge requests
are answered with the runtime's recorded answers, and every `thread/delta` is
assembled (`Assembler(provider, "da00000000", 500, 0)`, fixed clock). The
events are compared line for line with `GOLDEN_ROOT/<provider>/<cell>/raw-events.ndjson`.

Pacing follows §6.3: each request waits until earlier requests are answered,
the live turn counts reach the recording's at that point, the live event count
reaches the recording's (or the bridge has been quiet for the order timeout),
and a short drain of quiet; the fake agent's cursor then moves past it.

Allowlist (`[{provider, cell, layer: "events", where?, path, reason}]`):
`provider`/`cell` name one or `"*"`; `where` selects events whose fields equal
it (all events when absent); `path` is a JSON pointer inside each selected
event (`*` any key or index, `**` any depth) whose target is deleted (array
elements become null), or `""` to drop the event. Masks apply to both legs. An
entry naming a cell that masks nothing there fails that cell as stale; a
wildcard entry that masks nothing in any cell it matched is reported stale.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

from bbridge import grammar, rpc
from bbridge.assembler import Assembler
from bbridge.config import ConfigError
from bbridge.events import Event, encode_event
from bbridge.guard import Guard
from bbridge.parity import Check
from bbridge.recording import BRIDGE_TO_RUNTIME, RUNTIME_TO_BRIDGE, Entry, read_cell
from bbridge.replay import GOLDEN_ENTROPY

TIMEOUT_S = 15.0
ORDER_TIMEOUT_S = 5.0
DRAIN_S = 0.3
SETTLE_S = 0.75
DEFAULT_ALLOWLIST = Path(__file__).resolve().parent.parent / "conformance" / "acp-parity-allowlist.json"


# -- the plan ------------------------------------------------------------------


@dataclass
class Step:
    """One recorded runtime line and where the recording was when it was sent."""

    entry: Entry
    message: dict[str, Any]
    started: int
    completed: int
    events: int

    @property
    def is_request(self) -> bool:
        return "method" in self.message and "id" in self.message


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    answers: dict[str, deque[dict[str, Any]]] = field(default_factory=lambda: defaultdict(deque))


def _parse(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def plan_cell(cell: Path, provider: str) -> Plan:
    """Steps with the recording's gates (assembled from its current bridge lane), and the runtime's answers."""
    assembler = Assembler(provider, GOLDEN_ENTROPY, progress_throttle_ms=500, text_delta_flush_ms=0)
    plan = Plan()
    started = completed = events = 0
    bridge_requests: dict[tuple[float, str], str] = {}  # (run, id) → method of a bridge→runtime request
    for entry in read_cell(cell):
        message = _parse(entry.line)
        if message is None:
            continue
        if entry.dir == BRIDGE_TO_RUNTIME:
            if "id" in message and isinstance(message.get("method"), str):
                bridge_requests[(entry.run, json.dumps(message["id"]))] = message["method"]
            elif message.get("method") == "thread/delta":
                try:
                    params = grammar.decode_params(msgspec.json.encode(message.get("params")))
                except grammar.GrammarError:
                    continue
                for event in assembler.assemble(params.threadId, params.deltas, 0):
                    events += 1
                    started += event["type"] == "turn/started"
                    completed += event["type"] == "turn/completed"
        elif entry.dir == RUNTIME_TO_BRIDGE:
            step = Step(entry, message, started, completed, events)
            if "method" not in message and "id" in message:  # the runtime's answer to a bridge request
                method = bridge_requests.get((entry.run, json.dumps(message["id"])))
                if method is not None:
                    plan.answers[method].append(message)
                continue
            plan.steps.append(step)
    return plan


# -- rewriting recorded machine facts ------------------------------------------


def rewrite(message: dict[str, Any], workspace: str, agent: list[str]) -> dict[str, Any]:
    """This machine's PATH and workspace; an ACP launch spec pointed at the fake agent (§6.2)."""
    params = message.get("params")
    if not isinstance(params, dict):
        return message
    if isinstance(params.get("cwd"), str):
        params["cwd"] = workspace
    options = params.get("options") if isinstance(params.get("options"), dict) else {}
    assert isinstance(options, dict)
    env = options.get("envVars")
    if isinstance(env, dict) and isinstance(env.get("PATH"), str):
        env["PATH"] = os.environ.get("PATH", env["PATH"])
    for holder in (options.get("providerOptions"), params.get("providerOptions")):
        if isinstance(holder, dict) and isinstance(holder.get("acpLaunchSpec"), dict):
            spec = {k: v for k, v in holder["acpLaunchSpec"].items() if k != "modelCli"}
            holder["acpLaunchSpec"] = {**spec, "command": agent[0], "args": agent[1:], "env": {}}
    return message


# -- the live run --------------------------------------------------------------


@dataclass
class Run:
    events: list[Event] = field(default_factory=list)
    drops: int = 0
    stalls: list[str] = field(default_factory=list)
    stderr: str = ""


class Replayer:
    """Drives one bridge process through one cell's plan."""

    def __init__(
        self, cell: Path, provider: str, command: list[str], plan: Plan, *, drain: float, settle: float
    ) -> None:
        self.cell, self.provider, self.command, self.plan = cell, provider, command, plan
        self.drain, self.settle = drain, settle
        self.assembler = Assembler(provider, GOLDEN_ENTROPY, progress_throttle_ms=500, text_delta_flush_ms=0)
        self.guard = Guard()
        self.run = Run()
        self.started = self.completed = 0
        self.last_line = 0.0
        self.changed = trio.Event()
        self.unanswered = 0
        self.exited = False

    def _heard(self) -> None:
        self.last_line = trio.current_time()
        self.changed.set()
        self.changed = trio.Event()

    async def _on_notifications(self, batch: list[rpc.Notification]) -> None:
        for note in batch:
            if note.method != "thread/delta" or note.params is None:
                continue
            try:
                params = grammar.decode_params(note.params)
            except grammar.GrammarError as exc:
                self.run.stalls.append(f"invalid thread/delta: {exc}")
                continue
            for event in self.assembler.assemble(params.threadId, params.deltas, 0):
                if self.guard.observe(event) is not None:
                    self.run.drops += 1
                self.run.events.append(event)
                self.started += event["type"] == "turn/started"
                self.completed += event["type"] == "turn/completed"
        self._heard()

    async def _on_request(self, request: rpc.Request) -> Any:
        self._heard()
        queue = self.plan.answers.get(request.method)
        if not queue:
            self.run.stalls.append(f"no recorded answer for bridge request {request.method} ({request.id})")
            raise rpc.RpcError(rpc.BRIDGE_ERROR, "parity replay: no recorded answer")
        answer = queue.popleft()
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            raise rpc.RpcError(
                int(error.get("code", rpc.BRIDGE_ERROR)), str(error.get("message", "")), error.get("data")
            )
        return msgspec.Raw(msgspec.json.encode(answer.get("result")))

    async def _wait(self, label: str, done: Any, timeout: float = TIMEOUT_S) -> None:
        with trio.move_on_after(timeout) as scope:
            while not done():
                if self.exited:
                    self.run.stalls.append(f"bridge exited while waiting for {label}")
                    return
                with trio.move_on_after(0.05):
                    await self.changed.wait()
        if scope.cancelled_caught:
            self.run.stalls.append(f"timed out waiting for {label}")

    async def _quiet(self, period: float) -> None:
        while trio.current_time() - self.last_line < period and not self.exited:
            await trio.sleep(period - (trio.current_time() - self.last_line))

    async def _send(self, conn: rpc.Connection, message: dict[str, Any], nursery: trio.Nursery) -> None:
        method, params = message["method"], msgspec.Raw(msgspec.json.encode(message.get("params")))
        if "id" not in message:
            await conn.notify(method, params)
            return
        self.unanswered += 1

        async def call() -> None:
            try:
                await conn.request_raw(method, params, id=message["id"], timeout=None)
            except rpc.RpcError:
                pass  # an error is an answer too
            finally:
                self.unanswered -= 1
                self._heard()

        nursery.start_soon(call)

    async def replay(self) -> Run:
        with tempfile.TemporaryDirectory(prefix="bbridge-parity-") as scratch:
            state, workspace = Path(scratch, "state"), Path(scratch, "workspace")
            state.mkdir()
            workspace.mkdir()
            agent = [
                sys.executable,
                "-m",
                "bbridge.fake_agent",
                "--recording",
                str(self.cell.resolve()),
                "--state",
                str(state),
            ]
            env = {k: v for k, v in os.environ.items() if k != "BB_PROVIDER_BRIDGE_RECORD_DIR"}
            proc = await trio.lowlevel.open_process(
                self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
            )
            assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
            conn = rpc.Connection(
                proc.stdin, proc.stdout, name="parity-bridge", on_request=self._on_request,
                on_notifications=self._on_notifications, default_timeout=None,
            )  # fmt: skip
            cursor = state / "cursor"
            requests = [s for s in self.plan.steps if s.is_request]
            cursor.write_text(f"{requests[0].entry.run} {requests[0].entry.seq}" if requests else "end")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_stderr, proc.stderr)
                nursery.start_soon(self._serve, conn)
                initialize = {"jsonrpc": "2.0", "method": "initialize", "id": "parity-initialize",
                              "params": {"protocolVersion": 2, "client": {"name": "bb-parity", "version": "0"}}}  # fmt: skip
                await self._send(conn, initialize, nursery)
                await self._wait("parity-initialize", lambda: self.unanswered == 0)
                for index, step in enumerate(self.plan.steps):
                    if step.is_request:
                        await self._gate(step)
                    message = rewrite(step.message, str(workspace), agent)
                    if message.get("method") == "thread/stop" and message["params"].get("intent") == "release":
                        self.guard.clear_thread(message["params"].get("threadId", ""))
                    await self._send(conn, message, nursery)
                    later = [s for s in self.plan.steps[index + 1 :] if s.is_request]
                    cursor.write_text(f"{later[0].entry.run} {later[0].entry.seq}" if later else "end")
                cursor.write_text("end")
                await self._wait("all responses", lambda: self.unanswered == 0)
                await self._quiet(self.settle)
                await trio.aclose_forcefully(proc.stdin)
                with trio.move_on_after(TIMEOUT_S) as scope:
                    await proc.wait()
                if scope.cancelled_caught:
                    self.run.stalls.append("bridge did not exit after stdin closed; killed")
                    proc.kill()
                await conn.aclose()
                nursery.cancel_scope.cancel()
        return self.run

    async def _gate(self, step: Step) -> None:
        label = step.message["method"]
        await self._wait(f"answers before {label}", lambda: self.unanswered == 0)
        await self._wait(
            f"turn counts before {label}",
            lambda: self.started >= step.started and self.completed >= step.completed,
        )
        with trio.move_on_after(TIMEOUT_S):  # best effort: the recording's events, or a quiet bridge
            while len(self.run.events) < step.events and trio.current_time() - self.last_line < ORDER_TIMEOUT_S:
                with trio.move_on_after(0.05):
                    await self.changed.wait()
        await self._quiet(self.drain)

    async def _serve(self, conn: rpc.Connection) -> None:
        await conn.run()
        self.exited = True
        self._heard()

    async def _read_stderr(self, stream: trio.abc.ReceiveStream) -> None:
        chunks = [bytes(data) async for data in stream]
        self.run.stderr = b"".join(chunks).decode("utf-8", errors="replace")


# -- the allowlist -------------------------------------------------------------


@dataclass
class AllowEntry:
    index: int
    provider: str
    cell: str
    path: str
    reason: str
    where: dict[str, Any] = field(default_factory=dict)
    masked: int = 0
    matched: int = 0

    def applies(self, provider: str, cell: str) -> bool:
        return self.provider in ("*", provider) and self.cell in ("*", cell)

    def describe(self) -> str:
        return f"allowlist entry #{self.index} ({self.provider}/{self.cell} {json.dumps(self.where)} {self.path!r})"


def read_allowlist(path: Path | None) -> list[AllowEntry]:
    if path is None or not path.exists():
        return []
    entries = []
    try:
        raw_entries = json.loads(path.read_text(encoding="utf-8"))
        for index, raw in enumerate(raw_entries):
            if raw.get("layer", "events") != "events" or not str(raw.get("reason", "")).strip():
                raise ConfigError(f"{path}: entry {index} needs layer 'events' and a reason")
            entry = AllowEntry(index, raw["provider"], raw["cell"], raw["path"], raw["reason"], raw.get("where", {}))
            entries.append(entry)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: not an allowlist ({exc})") from None
    return entries


def _mask_at(value: Any, segments: list[str]) -> int:
    """Delete (objects) or null (arrays) what `segments` points at; the number of targets removed."""
    if not segments:
        return 0
    head, rest = segments[0], segments[1:]
    if head == "**":
        return _mask_at(value, rest) + sum(_mask_at(child, segments) for child in _children(value))
    keys = list(value) if isinstance(value, dict) else range(len(value)) if isinstance(value, list) else []
    hits = 0
    for key in keys:
        if head != "*" and str(key) != head:
            continue
        if rest:
            hits += _mask_at(value[key], rest)
        elif isinstance(value, dict):
            del value[key]
            hits += 1
        elif value[key] is not None:
            value[key] = None
            hits += 1
    return hits


def _children(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else list(value) if isinstance(value, list) else []


def mask(events: list[Event], entry: AllowEntry) -> tuple[list[Event], int]:
    """The events with the entry's mask applied, and how many targets it removed."""
    segments = [s for s in entry.path.split("/") if s]
    kept: list[Event] = []
    hits = 0
    for event in events:
        if all(event.get(k) == v for k, v in entry.where.items()):
            if not segments:
                hits += 1
                continue
            hits += _mask_at(event, segments)
        kept.append(event)
    return kept, hits


# -- comparison ----------------------------------------------------------------


def compare(name: str, golden: list[str], live: Run, entries: list[AllowEntry]) -> Check:
    """PASS when the masked legs are equal, no exact-cell entry is stale, and nothing stalled.

    Unmasked golden lines are compared as they are on disk: byte for byte.
    """
    provider, cell = name.split("/", 1)
    want: list[Event] = [json.loads(line) for line in golden]
    got = live.events
    masked_golden = False
    named: list[str] = []
    stale: list[str] = []
    for entry in entries:
        if not entry.applies(provider, cell):
            continue
        entry.matched += 1
        want, hits_want = mask(want, entry)
        got, hits_got = mask(got, entry)
        entry.masked += hits_want + hits_got
        masked_golden = masked_golden or bool(hits_want)
        if hits_want or hits_got:
            named.append(f"#{entry.index} ({hits_want} golden, {hits_got} replayed)")
        elif entry.cell != "*":
            stale.append(f"  stale {entry.describe()}: masks nothing")
    expected = [encode_event(e).decode() for e in want] if masked_golden else golden
    actual = [encode_event(e).decode() for e in got]
    detail = [f"  stall: {s}" for s in live.stalls] + stale
    if expected != actual:
        detail.append(_difference(expected, actual))
    summary = f"{name}: {len(live.events)} events, golden {len(golden)}, grammar drops {live.drops}"
    if named:
        summary += f"; allowlisted: {', '.join(named)}"
    return Check(summary, not detail, "\n".join(detail))


def _difference(expected: list[str], actual: list[str]) -> str:
    matcher = difflib.SequenceMatcher(None, expected, actual, autojunk=False)
    only_golden = sum(i2 - i1 for tag, i1, i2, _, _ in matcher.get_opcodes() if tag in ("delete", "replace"))
    only_live = sum(j2 - j1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("insert", "replace"))
    index = next(
        (i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b), min(len(expected), len(actual))
    )
    want = expected[index] if index < len(expected) else "<end of golden>"
    have = actual[index] if index < len(actual) else "<end of replay>"
    return f"  {only_golden} only in golden, {only_live} only in replay; first at line {index + 1}:\n    golden: {want}\n    replay: {have}"


def check_cells(
    command: list[str],
    cells: list[Path],
    golden_root: Path,
    allowlist: Path | None = DEFAULT_ALLOWLIST,
    *,
    drain: float = DRAIN_S,
    settle: float = SETTLE_S,
    dump_dir: Path | None = None,
) -> Iterator[Check]:
    """One check per cell, then one per wildcard allowlist entry that masked nothing anywhere it applied."""
    entries = read_allowlist(allowlist)
    for cell in cells:
        provider = cell.resolve().parent.name
        name = f"{provider}/{cell.resolve().name}"
        golden_path = golden_root / provider / cell.resolve().name / "raw-events.ndjson"
        if not golden_path.exists():
            yield Check(name, False, f"  no golden at {golden_path}")
            continue
        golden = [line for line in golden_path.read_text(encoding="utf-8").split("\n") if line]
        replayer = Replayer(cell, provider, command, plan_cell(cell, provider), drain=drain, settle=settle)
        live = trio.run(replayer.replay)
        if dump_dir is not None:
            dump_dir.mkdir(parents=True, exist_ok=True)
            (dump_dir / f"{provider}-{cell.name}.ndjson").write_bytes(
                b"".join(encode_event(e) + b"\n" for e in live.events)
            )
            (dump_dir / f"{provider}-{cell.name}.stderr").write_text(live.stderr, encoding="utf-8")
        yield compare(name, golden, live, entries)
    for entry in entries:
        if entry.cell == "*" and entry.matched and not entry.masked:
            yield Check(f"{entry.describe()} masks nothing in {entry.matched} cell(s) (stale)", False)
