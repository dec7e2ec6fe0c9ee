"""The recorded-traffic rules (protocol.md §7.4): replay committed cells' runtime lanes into the bridge.

Each cell gets a fresh bridge process and the parity harness's pacing (§6.3):
a plan from the recording (current lane preferred) gates every recorded
request on the turn counts the recording had reached; runtime answers to
bridge requests are served from the recording by method. The runtime's own
per-machine rewrites apply (workspace `cwd`, `PATH`), and so does what the
runtime would know live: the `providerThreadId` this bridge reported and the
turn it has open (for `activeTurnId`/`expectedTurnId`).

How the bridge reaches its provider is the bridge's business: `{cell}` and
`{provider}` in its arguments, and the environment variables
`BBRIDGE_CONFORMANCE_CELL` / `BBRIDGE_CONFORMANCE_PROVIDER`, name the cell
being replayed (e.g. to start a fake provider child that plays its provider
lanes).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

from bbridge import grammar, rpc
from bbridge.assembler import Assembler
from bbridge.conformance.client import Client, Entry
from bbridge.conformance.fixture import Fixture
from bbridge.conformance.report import Result, failed, passed, skipped
from bbridge.conformance.scripted import with_client
from bbridge.events import encode_event
from bbridge.guard import Guard
from bbridge.recording import BRIDGE_TO_RUNTIME, RUNTIME_TO_BRIDGE, find_cells, is_cell, read_cell
from bbridge.schema import ThreadEvent

CHECKS = ("replays", "events-schema-valid", "grammar", "turn-lifecycle", "not-empty")
CELL_ENV = "BBRIDGE_CONFORMANCE_CELL"
PROVIDER_ENV = "BBRIDGE_CONFORMANCE_PROVIDER"
PARITY_INITIALIZE = {"protocolVersion": 2, "client": {"name": "bb-parity", "version": "0"}}


class UsageError(ValueError):
    """`--recordings` names nothing replayable; the CLI exits 2."""


def select_cells(root: Path, names: Sequence[str]) -> list[Path]:
    """The thread-scoped conformance cells under `root` (a recordings root, a provider folder or one cell).

    Rule ids name the cell only (`recorded/<cell>/...`), so one run covers one provider.
    """
    if not root.is_dir():
        raise UsageError(f"--recordings {root}: not a directory")
    cells = [root] if is_cell(root) else [c for c in find_cells(root) if c.name in names and _thread_scoped(c)]
    if not cells:
        raise UsageError(f"--recordings {root}: no thread-scoped cell named {', '.join(names)}")
    providers = sorted({c.parent.name for c in cells})
    if len(providers) > 1:
        raise UsageError(f"--recordings {root}: cells of {', '.join(providers)}; point it at one provider's folder")
    return cells


def _thread_scoped(cell: Path) -> bool:
    manifest = cell / "manifest.json"
    if not manifest.exists():
        return True
    try:
        return bool(json.loads(manifest.read_text(encoding="utf-8")).get("scope", "thread") == "thread")
    except (OSError, json.JSONDecodeError):
        return False


def without_recordings() -> list[Result]:
    return [skipped(f"recorded/<cell>/{check}", "no --recordings DIR given") for check in CHECKS]


# -- plan -------------------------------------------------------------------------


@dataclass
class Step:
    """A recorded runtime→bridge message and the recording's progress when it was sent."""

    message: dict[str, Any]
    started: int
    completed: int
    events: int


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    answers: dict[str, deque[dict[str, Any]]] = field(default_factory=lambda: defaultdict(deque))
    started: int = 0
    completed: int = 0
    events: int = 0


def plan_cell(cell: Path, provider: str) -> Plan:
    """The recording's own assembly (grammar-clean, cleared at release stops) and the steps gated on it."""
    assembler = Assembler(provider, "P", progress_throttle_ms=0, text_delta_flush_ms=0)
    guard = Guard()
    plan = Plan()
    bridge_requests: dict[tuple[float, str], str] = {}
    for entry in read_cell(cell):
        try:
            message = json.loads(entry.line)
        except json.JSONDecodeError:
            continue
        if not isinstance(message, dict):
            continue
        method, key = message.get("method"), (entry.run, json.dumps(message.get("id")))
        if entry.dir == BRIDGE_TO_RUNTIME:
            if method and "id" in message:
                bridge_requests[key] = method
            elif method == "thread/delta":
                _assemble(plan, assembler, guard, message.get("params"))
        elif entry.dir == RUNTIME_TO_BRIDGE:
            if method:
                if method == "thread/stop" and (message.get("params") or {}).get("intent") == "release":
                    guard.clear()
                plan.steps.append(Step(message, plan.started, plan.completed, plan.events))
            elif key in bridge_requests:
                plan.answers[bridge_requests[key]].append(message)
    return plan


def _assemble(plan: Plan, assembler: Assembler, guard: Guard, params: Any) -> None:
    try:
        batch = grammar.decode_params(json.dumps(params))
    except grammar.GrammarError:
        return
    for event in assembler.assemble(batch.threadId, batch.deltas):
        if guard.observe(event) is None:
            plan.events += 1
            plan.started += event["type"] == "turn/started"
            plan.completed += event["type"] == "turn/completed"


# -- replay -------------------------------------------------------------------------


@dataclass
class Replayer:
    """Drives one cell's runtime lane into a live bridge and notes every stall."""

    plan: Plan
    fixture: Fixture
    workspace: str
    stalls: list[str] = field(default_factory=list)
    provider_threads: dict[str, str] = field(default_factory=dict)  # recorded providerThreadId -> live

    async def answer(self, client: Client, request: dict[str, Any]) -> None:
        """Runtime answers to bridge requests come from the recording, by method, re-addressed to the live id."""
        queue = self.plan.answers.get(request["method"])
        if not queue:
            self.stalls.append(f"no recorded answer for bridge request {request['method']} ({request['id']})")
            await client.answer(
                request["id"], error={"code": rpc.BRIDGE_ERROR, "message": "parity replay: no recorded answer"}
            )
            return
        recorded = queue.popleft()
        if recorded.get("error"):
            await client.answer(request["id"], error=recorded["error"])
        else:
            await client.answer(request["id"], result=recorded.get("result"))

    async def wait(self, client: Client, label: str, predicate: Callable[[], bool]) -> bool:
        if await client.wait_for(lambda: True if predicate() else None, self.fixture.timeouts.replay_wait):
            return True
        why = "bridge exited while waiting for" if client.exited else "timed out waiting for"
        self.stalls.append(f"{why} {label}")
        return False

    async def run(self, client: Client) -> None:
        t = self.fixture.timeouts
        await client.request("initialize", PARITY_INITIALIZE, id="parity-initialize")
        await self.wait(client, "initialize", lambda: client.response_index("parity-initialize") is not None)
        sent: list[Any] = []
        for step in self.plan.steps:
            message = step.message
            if "id" not in message:
                await client.send_line(msgspec.json.encode(self._rewrite(client, message)))
                continue
            method = message["method"]
            if not await self.wait(client, f"responses before {method}", lambda: _answered(client, sent)):
                return
            gate = f"{step.started} turn/started and {step.completed} turn/completed before {method}"
            if not await self.wait(client, gate, _reached(client, step)):
                return
            await client.wait_for(_at_least(client, step.events), t.replay_order)
            await client.quiet(t.replay_drain, t.replay_wait)
            if method == "thread/stop" and (message.get("params") or {}).get("intent") == "release":
                client.guard.clear()
            sent.append(message["id"])
            client.sent_ids.add(message["id"])
            await client.send_line(msgspec.json.encode(self._rewrite(client, message)))
        if await self.wait(client, "the last responses", lambda: _answered(client, sent)):
            await client.quiet(t.replay_settle, t.replay_wait)
        await client.close_stdin()
        if not await client.wait_exit(t.replay_wait):
            self.stalls.append("bridge did not exit after stdin closed; killed")

    def _rewrite(self, client: Client, message: dict[str, Any]) -> dict[str, Any]:
        """This machine's facts and what the runtime knows live, in place of the recorded ones."""
        params = message.get("params")
        if not isinstance(params, dict):
            return message
        params = dict(params)
        self._learn(client)
        if "cwd" in params:
            params["cwd"] = self.workspace
        options = params.get("options")
        if isinstance(options, dict) and isinstance(options.get("envVars"), dict) and "PATH" in options["envVars"]:
            params["options"] = {**options, "envVars": {**options["envVars"], "PATH": os.environ.get("PATH", "")}}
        for key in ("providerThreadId", "sourceProviderThreadId"):
            if params.get(key) in self.provider_threads:
                params[key] = self.provider_threads[params[key]]
        thread = params.get("threadId")
        for key in ("activeTurnId", "expectedTurnId"):
            if isinstance(params.get(key), str) and isinstance(thread, str):
                turn = client.assembler.get_open_turn_id(thread) or _last_turn(client, thread)
                if turn is not None:
                    params[key] = client.assembler.get_provider_turn_id(thread, turn) or turn
        return {**message, "params": params}

    def _learn(self, client: Client) -> None:
        """Map recorded provider thread ids to the ones this bridge reported, thread by thread, latest wins."""
        live: dict[str, str] = {}
        for entry in client.log:
            params = entry.message.get("params") if entry.kind == "notification" else None
            if entry.message.get("method") == "thread/identity" and isinstance(params, dict):
                live[str(params.get("threadId"))] = str(params.get("providerThreadId"))
        for step in self.plan.steps:
            params = step.message.get("params") or {}
            recorded, thread = params.get("providerThreadId"), params.get("threadId")
            if isinstance(recorded, str) and thread in live:
                self.provider_threads[recorded] = live[thread]


def _answered(client: Client, ids: list[Any]) -> bool:
    return all(client.response_index(i) is not None for i in ids)


def _reached(client: Client, step: Step) -> Callable[[], bool]:
    """Whether the live grammar-clean turn counts have reached the step's recorded gate."""

    def reached() -> bool:
        clean = [e.event["type"] for e in client.log if e.kind == "event" and e.violation is None]
        return clean.count("turn/started") >= step.started and clean.count("turn/completed") >= step.completed

    return reached


def _at_least(client: Client, events: int) -> Callable[[], bool | None]:
    return lambda: True if len(client.events()) >= events else None


def _last_turn(client: Client, thread: str) -> str | None:
    turns = [e["scope"]["turnId"] for e in client.events() if e["type"] == "turn/started" and e["threadId"] == thread]
    return turns[-1] if turns else None


def check_replay(cell: str, plan: Plan, stalls: list[str], log: list[Entry]) -> list[Result]:
    """The five `recorded/<cell>/...` results of one replay."""
    rule = f"recorded/{cell}/"
    events = [e for e in log if e.kind == "event"]
    results = [
        failed(rule + "replays", "; ".join(stalls)) if stalls else passed(rule + "replays", "no stalls"),
        _schema(rule + "events-schema-valid", log),
    ]
    # §7.4: the replayed events the live grammar kept, through a fresh grammar machine (never cleared)
    fresh = Guard()
    kept = [e.event for e in events if e.violation is None]
    broken = next(((event, v) for event in kept if (v := fresh.observe(event)) is not None), None)
    if broken is not None:
        event, v = broken
        results.append(failed(rule + "grammar", f"{v.rule} on {event['type']}: {v.reason}"))
    else:
        results.append(passed(rule + "grammar", "the replayed events pass a fresh grammar machine"))
    types = [event["type"] for event in kept]
    started, completed = types.count("turn/started"), types.count("turn/completed")
    counts = f"replay {started} started/{completed} completed, recording {plan.started}/{plan.completed}"
    ok = started == plan.started and completed == plan.completed and started == completed
    results.append((passed if ok else failed)(rule + "turn-lifecycle", counts))
    if plan.events and not events:
        results.append(failed(rule + "not-empty", f"the recording assembled {plan.events} events, the replay none"))
    else:
        results.append(passed(rule + "not-empty", f"replay {len(events)} events, recording {plan.events}"))
    return results


def _schema(rule: str, log: list[Entry]) -> Result:
    index = 0
    for entry in log:
        if entry.kind == "invalid-delta":
            return failed(rule, f"a thread/delta before event {index} is invalid: {entry.reason}")
        if entry.kind != "event":
            continue
        try:
            msgspec.json.decode(encode_event(entry.event), type=ThreadEvent)
        except msgspec.ValidationError as exc:
            return failed(rule, f"event {index} ({entry.event['type']}) is not a ThreadEvent: {exc}")
        index += 1
    return passed(rule, f"{index} replayed events parse as ThreadEvent")


async def replay_cell(
    command: Sequence[str], cell: Path, fixture: Fixture, limiter: trio.CapacityLimiter
) -> list[Result]:
    provider = cell.parent.name
    plan = plan_cell(cell, provider)
    argv = [a.replace("{cell}", str(cell)).replace("{provider}", provider) for a in command]
    env = {CELL_ENV: str(cell), PROVIDER_ENV: provider}
    async with limiter:
        with tempfile.TemporaryDirectory(prefix="bbridge-replay-") as workspace:
            replayer = Replayer(plan, fixture, workspace)

            async def body(client: Client) -> list[Entry]:
                await replayer.run(client)
                return client.log

            log = await with_client(argv, body, provider_id=provider, env=env, on_request=replayer.answer)
    return check_replay(cell.name, plan, replayer.stalls, log)
