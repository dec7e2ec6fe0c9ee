"""The one §6.3 driver: replay a recorded cell's runtime lane into a live bridge, paced like the recording.

Both users of recorded traffic run it: `bbridge conformance --recordings` judges
the result by the §7.4 rules, `bbridge parity bridge` diffs it with the goldens.
They differ only in how the client assembles (`Lane`) and in the waits
(`Pacing`), so the plan, the pacing, the rewrites and the fake provider child
are written once, here.

The plan comes from the recording (current lane preferred): every recorded
runtime→bridge message, gated on the grammar-clean turn counts and event count
the recording had reached; the runtime's answers to bridge requests are served
back by method. Each replayed request waits for earlier answers, for the gate,
best-effort for the event count (or a quiet bridge), then for a short drain; the
end waits the same way for the recording's final event count, then settles.
After a `thread/stop` goes out, the fake provider is held (at most
`Pacing.react`) until the bridge has produced what the recording shows it
produced before the provider's next line: from its stop on, a bridge translates
nothing more the agent writes, so the recording pins which agent lines came
before the stop took hold, and a loaded machine must not move that line. The
runtime's per-machine rewrites apply (workspace `cwd`, `PATH`), and so does what
it would know live: the `providerThreadId` this bridge reported and its open
turn (`activeTurnId`/`expectedTurnId`).

Provider profiles (§6.2) point the bridge at the fake provider child of
`bbridge.replay.fake_agent`, which plays the cell's provider lanes, paced by
`<state>/cursor`: an `acp-*` cell's launch specs are rewritten to run it; the
codex bridge finds it in `BB_CODEX_BRIDGE_APP_SERVER_COMMAND`/`_ARGS`; the
claude-code bridge runs an executable wrapper named by
`BB_CLAUDE_CODE_EXECUTABLE` (the `claude-cli` dialect) with `CLAUDE_CONFIG_DIR`
in the state directory, where the transcript of every recorded fork's source
is seeded, since the fake CLI writes none; the pi bridge runs the fake `pi`
(the `pi` dialect) from `BB_PI_BRIDGE_COMMAND`/`_ARGS`, with its session files in
`BB_PI_BRIDGE_SESSION_DIR` under the state directory, fork sources seeded there. How any other bridge reaches its
provider is its own business: `{cell}` and `{provider}` in its arguments, and
the environment variables `BBRIDGE_CONFORMANCE_CELL` /
`BBRIDGE_CONFORMANCE_PROVIDER`, name the cell.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from bbridge.core import grammar
from bbridge.core.assembler import Assembler
from bbridge.core.guard import Guard
from bbridge.daemon.bridge import STDERR_TAIL_BYTES
from bbridge.replay.bridge_client import LIVE_LANE, BridgeClient, BridgeOutput, Lane, with_client
from bbridge.wire import rpc
from bbridge.wire.lanes import BRIDGE_TO_RUNTIME, PROVIDER_TO_BRIDGE, RUNTIME_TO_BRIDGE, read_cell

CELL_ENV = "BBRIDGE_CONFORMANCE_CELL"
PROVIDER_ENV = "BBRIDGE_CONFORMANCE_PROVIDER"
INITIALIZE_ID = "parity-initialize"
INITIALIZE = {"protocolVersion": 2, "client": {"name": "bb-parity", "version": "0"}}
CODEX_COMMAND_ENV = "BB_CODEX_BRIDGE_APP_SERVER_COMMAND"
CODEX_ARGS_ENV = "BB_CODEX_BRIDGE_APP_SERVER_ARGS"
CLAUDE_EXECUTABLE_ENV = "BB_CLAUDE_CODE_EXECUTABLE"
CLAUDE_CONFIG_ENV = "CLAUDE_CONFIG_DIR"
PI_COMMAND_ENV = "BB_PI_BRIDGE_COMMAND"
PI_ARGS_ENV = "BB_PI_BRIDGE_ARGS"
PI_SESSION_DIR_ENV = "BB_PI_BRIDGE_SESSION_DIR"


@dataclass(frozen=True)
class Pacing:
    """The bounds of a replay, in seconds (§6.3 defaults: 15 000 / 5 000 / 300 / 750 ms)."""

    wait: float = 15.0  # every wait, and the bridge's exit after stdin closes
    order: float = 5.0  # quiet that ends the best-effort wait for the recorded event count
    drain: float = 0.3  # quiet before each request
    settle: float = 0.75  # quiet after the last answer
    react: float = 1.0  # the longest the provider is held after a `thread/stop` for the bridge's recorded reaction


# -- plan ---------------------------------------------------------------------------


@dataclass
class Step:
    """A recorded runtime→bridge message, where it stood, and the recording's progress when it was sent."""

    message: dict[str, Any]
    run: int | float
    seq: int | float
    started: int
    completed: int
    events: int
    reaction: int = 0  # the recording's event count when the provider next wrote (or the next message went out)

    @property
    def is_request(self) -> bool:
        return "id" in self.message


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    answers: dict[str, deque[dict[str, Any]]] = field(default_factory=lambda: defaultdict(deque))
    started: int = 0
    completed: int = 0
    events: int = 0


def plan_cell(cell: Path, provider: str, lane: Lane = LIVE_LANE) -> Plan:
    """The recording's own assembly (as the lane assembles, grammar-clean, cleared at release stops) and its steps."""
    assembler = Assembler(provider, lane.entropy, progress_throttle_ms=lane.progress_throttle_ms, text_delta_flush_ms=0)
    guard = Guard()
    plan = Plan()
    bridge_requests: dict[tuple[float, str], str] = {}  # (run, id) -> method of a bridge→runtime request
    reacting: list[Step] = []  # steps whose reaction count is still open
    for entry in read_cell(cell):
        if entry.dir == PROVIDER_TO_BRIDGE or (entry.dir == RUNTIME_TO_BRIDGE and reacting):
            for step in reacting:
                step.reaction = plan.events
            reacting.clear()
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
                if _released(message) is not None:
                    guard.clear()
                plan.steps.append(Step(message, entry.run, entry.seq, plan.started, plan.completed, plan.events))
                reacting.append(plan.steps[-1])
            elif key in bridge_requests:
                plan.answers[bridge_requests[key]].append(message)
    for step in reacting:
        step.reaction = plan.events
    return plan


def _assemble(plan: Plan, assembler: Assembler, guard: Guard, params: Any) -> None:
    try:
        batch = grammar.decode_params(msgspec.json.encode(params))
    except grammar.GrammarError:
        return
    for event in assembler.assemble(batch.threadId, batch.deltas, 0):
        if guard.observe(event) is None:
            plan.events += 1
            plan.started += event["type"] == "turn/started"
            plan.completed += event["type"] == "turn/completed"


def _released(message: dict[str, Any]) -> str | None:
    """The thread a recorded release stop detaches (its grammar state is forgotten, §7.5), else None."""
    params = message.get("params")
    if message.get("method") != "thread/stop" or not isinstance(params, dict) or params.get("intent") != "release":
        return None
    return str(params.get("threadId", ""))


# -- provider profiles --------------------------------------------------------------


def fake_agent(cell: Path, state: Path, dialect: str = "json-rpc") -> list[str]:
    """The fake provider child (§6.4) for this cell, claiming segments and reading the cursor in `state`."""
    return [
        sys.executable,
        "-m",
        "bbridge.replay.fake_agent",
        "--recording",
        str(cell.resolve()),
        "--dialect",
        dialect,
        "--state",
        str(state),
    ]


@dataclass(frozen=True)
class Profile:
    """How the bridge under test reaches the fake provider child (§6.2)."""

    env: dict[str, str] = field(default_factory=dict)  # added to the bridge's environment
    agent: list[str] | None = None  # what every `acpLaunchSpec` is pointed at


def prepare_profile(provider: str, cell: Path, state: Path, workspace: Path, plan: Plan) -> Profile:
    """The provider's profile, its files written under `state`; an empty one for a provider with none."""
    if provider.startswith("acp-"):
        return Profile(agent=fake_agent(cell, state))
    if provider == "codex":
        command, *args = fake_agent(cell, state)
        return Profile({CODEX_COMMAND_ENV: command, CODEX_ARGS_ENV: json.dumps(args)})
    if provider == "claude-code":
        config = state / "claude-config"
        config.mkdir(parents=True, exist_ok=True)
        for params in _forks(plan):
            seed_fork(config, workspace, params)
        wrapper = write_wrapper(state / "replay-provider", fake_agent(cell, state, "claude-cli"))
        return Profile({CLAUDE_EXECUTABLE_ENV: str(wrapper), CLAUDE_CONFIG_ENV: str(config)})
    if provider == "pi":
        sessions = state / "pi-sessions"
        sessions.mkdir(parents=True, exist_ok=True)
        for params in _forks(plan):
            seed_pi_fork(sessions, workspace, params)
        command, *args = fake_agent(cell, state, "pi")
        return Profile({PI_COMMAND_ENV: command, PI_ARGS_ENV: json.dumps(args), PI_SESSION_DIR_ENV: str(sessions)})
    return Profile()


def _forks(plan: Plan) -> list[dict[str, Any]]:
    """The params of every recorded `thread/fork` (their sources are seeded, since no fake provider writes one)."""
    return [
        step.message["params"]
        for step in plan.steps
        if step.message.get("method") == "thread/fork" and isinstance(step.message.get("params"), dict)
    ]


def write_wrapper(path: Path, agent: Sequence[str]) -> Path:
    """An executable that runs `agent` with the arguments it is given appended (the CLI flags a bridge adds)."""
    path.write_text(f'#!/bin/sh\nexec {shlex.join(agent)} "$@"\n', encoding="utf-8")
    path.chmod(0o755)
    return path


def project_dir(config: Path, workspace: Path) -> Path:
    """Where the Claude CLI keeps a workspace's transcripts: every non-alphanumeric character of its path a `-`.

    (The CLI shortens names over 200 characters with a hash; a scratch workspace's path is never that long.)
    """
    return config / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(workspace))


def seed_fork(config: Path, workspace: Path, params: dict[str, Any]) -> None:
    """The fork source's transcript (user, then assistant at the checkpoint), which the bridge copies to fork."""
    source, checkpoint = params.get("sourceProviderThreadId"), params.get("sourceProviderCheckpointId")
    if not isinstance(source, str) or not source:
        return
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    common = {"sessionId": source, "cwd": str(workspace), "isSidechain": False, "timestamp": now}
    user = {
        "type": "user",
        "uuid": str(uuid.uuid4()),
        "parentUuid": None,
        **common,
        "message": {"role": "user", "content": "replayed fork source"},
    }
    assistant = {
        "type": "assistant",
        "uuid": checkpoint if isinstance(checkpoint, str) and checkpoint else str(uuid.uuid4()),
        "parentUuid": user["uuid"],
        **common,
        "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    }
    path = project_dir(config, workspace) / f"{source}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(entry) + "\n" for entry in (user, assistant)), encoding="utf-8")


def seed_pi_fork(sessions: Path, workspace: Path, params: dict[str, Any]) -> None:
    """The fork source's pi session file (a header, a user message, an assistant message at the checkpoint)."""
    source, checkpoint = params.get("sourceProviderThreadId"), params.get("sourceProviderCheckpointId")
    if not isinstance(source, str) or not source:
        return
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    header = {"type": "session", "version": 3, "id": str(uuid.uuid4()), "timestamp": now, "cwd": str(workspace)}
    user = {"type": "message", "id": "00000001", "parentId": None, "timestamp": now,
            "message": {"role": "user", "content": [{"type": "text", "text": "replayed fork source"}]}}  # fmt: skip
    leaf = checkpoint if isinstance(checkpoint, str) and checkpoint else "00000002"
    assistant = {"type": "message", "id": leaf, "parentId": "00000001", "timestamp": now,
                 "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}}  # fmt: skip
    name = re.sub(r"[^A-Za-z0-9._-]", "_", source)
    (sessions / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (header, user, assistant)))


# -- rewriting recorded facts -------------------------------------------------------


def point_launch_spec(params: dict[str, Any], agent: Sequence[str]) -> dict[str, Any]:
    """The `acp-*` profile (§6.2): every `acpLaunchSpec` runs `agent` with an empty env and no `modelCli`."""
    options = params.get("options")
    if isinstance(options, dict):
        params = {**params, "options": point_launch_spec(options, agent)}
    holder = params.get("providerOptions")
    if isinstance(holder, dict) and isinstance(holder.get("acpLaunchSpec"), dict):
        spec = {k: v for k, v in holder["acpLaunchSpec"].items() if k != "modelCli"}
        spec.update(command=agent[0], args=list(agent[1:]), env={})
        params = {**params, "providerOptions": {**holder, "acpLaunchSpec": spec}}
    return params


def machine_facts(params: dict[str, Any], workspace: str) -> dict[str, Any]:
    """This machine's workspace and `PATH` in place of the recorded ones."""
    params = dict(params)
    if isinstance(params.get("cwd"), str):
        params["cwd"] = workspace
    options = params.get("options")
    env = options.get("envVars") if isinstance(options, dict) else None
    if isinstance(options, dict) and isinstance(env, dict) and isinstance(env.get("PATH"), str):
        params["options"] = {**options, "envVars": {**env, "PATH": os.environ.get("PATH", env["PATH"])}}
    return params


# -- replay -------------------------------------------------------------------------


@dataclass
class Driver:
    """Drives one cell's runtime lane into a live bridge and notes every stall."""

    plan: Plan
    pacing: Pacing
    workspace: str
    cursor: Path
    agent: list[str] | None = None  # the fake agent, for a provider whose launch spec names its agent
    stalls: list[str] = field(default_factory=list)
    provider_threads: dict[str, str] = field(default_factory=dict)  # recorded providerThreadId -> live

    async def answer(self, client: BridgeClient, request: dict[str, Any]) -> None:
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

    async def wait(self, client: BridgeClient, label: str, predicate: Callable[[], bool]) -> bool:
        if await client.wait_for(_when(predicate), self.pacing.wait):
            return True
        why = "bridge exited while waiting for" if client.exited else "timed out waiting for"
        self.stalls.append(f"{why} {label}")
        return False

    def move_cursor(self, after: int) -> None:
        """Let the fake agent play its provider lines up to the first request after step `after` (or all)."""
        later = next((s for s in self.plan.steps[after:] if s.is_request), None)
        self.cursor.write_text("end" if later is None else f"{later.run} {later.seq}", encoding="utf-8")

    async def run(self, client: BridgeClient) -> None:
        pacing = self.pacing
        await client.request("initialize", INITIALIZE, id=INITIALIZE_ID)
        await self.wait(client, "initialize", lambda: client.response_index(INITIALIZE_ID) is not None)
        sent: list[Any] = []
        for index, step in enumerate(self.plan.steps):
            message = step.message
            if step.is_request:
                method = message["method"]
                if not await self.wait(client, f"responses before {method}", lambda: _answered(client, sent)):
                    return
                gate = f"{step.started} turn/started and {step.completed} turn/completed before {method}"
                if not await self.wait(client, gate, _reached(client, step)):
                    return
                # best effort, no stall: the recording's event count, or a bridge quiet for `order`
                await client.quiet(pacing.order, pacing.wait, until=_at_least(client, step.events))
                await client.quiet(pacing.drain, pacing.wait)
                if (thread := _released(message)) is not None:
                    client.release(thread)
                sent.append(message["id"])
                client.sent_ids.add(message["id"])
            await client.send_line(msgspec.json.encode(self._rewrite(client, message)))
            if message["method"] == "thread/stop" and step.reaction > step.events:
                await client.wait_for(_when(_at_least(client, step.reaction)), pacing.react)
            self.move_cursor(index + 1)
        if await self.wait(client, "the last responses", lambda: _answered(client, sent)):
            # as before each request: the recording's final event count (or a quiet bridge), so a bridge slowed by
            # a loaded machine is not cut off by the short settle
            await client.quiet(pacing.order, pacing.wait, until=_at_least(client, self.plan.events))
            await client.quiet(pacing.settle, pacing.wait)
        await client.close_stdin()
        if not await client.wait_exit(pacing.wait):
            self.stalls.append("bridge did not exit after stdin closed; killed")

    def _rewrite(self, client: BridgeClient, message: dict[str, Any]) -> dict[str, Any]:
        """This machine's facts, the profile's launch spec, and what the runtime knows live, in place of the recorded."""
        params = message.get("params")
        if not isinstance(params, dict):
            return message
        params = machine_facts(params, self.workspace)
        if self.agent is not None:
            params = point_launch_spec(params, self.agent)
        self._learn(client)
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

    def _learn(self, client: BridgeClient) -> None:
        """Map recorded provider thread ids to the ones this bridge reported, thread by thread, latest wins."""
        for step in self.plan.steps:
            params = step.message.get("params") or {}
            recorded, thread = params.get("providerThreadId"), params.get("threadId")
            if isinstance(recorded, str) and thread in client.provider_threads:
                self.provider_threads[recorded] = client.provider_threads[thread]


def _answered(client: BridgeClient, ids: list[Any]) -> bool:
    return all(client.response_index(i) is not None for i in ids)


def _reached(client: BridgeClient, step: Step) -> Callable[[], bool]:
    """Whether the live grammar-clean turn counts have reached the step's recorded gate."""

    def reached() -> bool:
        clean = [event["type"] for event in client.events(clean=True)]
        return clean.count("turn/started") >= step.started and clean.count("turn/completed") >= step.completed

    return reached


def _when(predicate: Callable[[], bool]) -> Callable[[], bool | None]:
    """`predicate` as `BridgeClient.wait_for` takes it: True, or None to keep waiting."""
    return lambda: True if predicate() else None


def _at_least(client: BridgeClient, events: int) -> Callable[[], bool]:
    return lambda: len(client.events(clean=True)) >= events


def _last_turn(client: BridgeClient, thread: str) -> str | None:
    turns = [
        e.event["scope"]["turnId"]
        for e in client.log
        if e.kind == "event" and e.thread_id == thread and e.event["type"] == "turn/started"
    ]
    return turns[-1] if turns else None


@dataclass
class Replay:
    """One replay: the plan it followed, the client's log, the stalls, and the bridge's stderr."""

    plan: Plan
    log: list[BridgeOutput]
    stalls: list[str]
    stderr: str


async def replay_cell(
    command: Sequence[str],
    cell: Path,
    lane: Lane = LIVE_LANE,
    pacing: Pacing = Pacing(),
    *,
    stderr_limit: int | None = STDERR_TAIL_BYTES,
) -> Replay:
    """Spawn the bridge with a scratch workspace and fake-agent state, and replay the cell through it."""
    provider = cell.resolve().parent.name
    plan = plan_cell(cell, provider, lane)
    argv = [a.replace("{cell}", str(cell)).replace("{provider}", provider) for a in command]
    env = {CELL_ENV: str(cell), PROVIDER_ENV: provider}
    with tempfile.TemporaryDirectory(prefix="bbridge-replay-") as scratch:
        # resolved: the claude bridge finds a fork's source through the cwd's real path
        state, workspace = Path(scratch, "state").resolve(), Path(scratch, "workspace").resolve()
        state.mkdir()
        workspace.mkdir()
        profile = prepare_profile(provider, cell, state, workspace, plan)
        driver = Driver(plan, pacing, str(workspace), state / "cursor", profile.agent)
        driver.move_cursor(0)

        async def body(client: BridgeClient) -> BridgeClient:
            await driver.run(client)
            return client

        options = {"provider_id": provider, "env": env | profile.env, "lane": lane, "stderr_limit": stderr_limit}
        client = await with_client(argv, body, on_request=driver.answer, **options)
    return Replay(plan, client.log, driver.stalls, client.stderr_tail.decode("utf-8", errors="replace"))
