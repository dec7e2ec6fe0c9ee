"""The replay profiles of protocol.md §6.2 and the fake provider child's dialects (§6.4), without a bridge.

Every claude-code and codex cell is played by this test acting as a perfect bridge: it spawns the fake child
as its profile says (claude: the wrapper script, with the flags a bridge adds; codex: the app-server command and
arguments of the environment), writes each segment's recorded `bridge→provider` lines with fresh request ids
(and, for claude, fresh hook callback ids), and reads the `provider→bridge` lines back in recorded order,
re-addressed to the live ids. The profiles' environment is checked by the function that builds it and, end to
end, by a stand-in bridge that reports what it was given. Needs ../shared for the recordings (skips without).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from bbridge.replay import driver
from bbridge.replay.claude_cli import ClaudeCli
from bbridge.replay.driver import Pacing, Plan, Step
from bbridge.wire.lanes import BRIDGE_TO_PROVIDER, PROVIDER_TO_BRIDGE, lane_path, read_lane
from tests.conftest import missing_reason, shared_path

CLAUDE = shared_path("recordings", "claude-code")
needs_claude = pytest.mark.skipif(CLAUDE is None, reason=missing_reason("recordings", "claude-code"))
# what the claude-code bridge passes the CLI (claude-code-bridge.md §1.4); the fake CLI must ignore it
CLI_FLAGS = ["--output-format", "stream-json", "--verbose", "--input-format", "stream-json", "--permission-prompt-tool"]
CLI_FLAGS += ["stdio", "--setting-sources=user,project,local", "--session-id", str(uuid.uuid4()), "--settings", "{}"]
READ_S = 10.0  # bound on every line the fake child owes
FAST = ["--lookahead-ms", "100", "--stall-ms", "300"]


def played_cells(provider: str, name: str | None = None) -> list[Any]:
    """The provider's cells with provider lanes (or the one named), or one skipped parameter naming what is missing."""
    where = ("recordings", provider) if name is None else ("recordings", provider, name)
    root = shared_path(*where)
    if root is None:
        return [pytest.param(None, marks=pytest.mark.skip(reason=missing_reason(*where)))]
    cells = [root] if name else sorted(p for p in root.iterdir() if lane_path(p, BRIDGE_TO_PROVIDER).exists())
    return [pytest.param(cell, id=f"{provider}/{cell.name}") for cell in cells]


# -- a fake provider child and a perfect bridge ------------------------------------------------


class Child:
    """The fake child's pipes: JSON lines in, JSON lines out, every read bounded."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.buffer = b""

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def read(self, timeout: float = READ_S) -> dict[str, Any]:
        assert self.process.stdout is not None
        with trio.fail_after(timeout):
            while b"\n" not in self.buffer:
                data = await self.process.stdout.receive_some()
                assert data, "the fake child closed its stdout"
                self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    async def close(self) -> int:
        """Close stdin (the child's cue to exit, §7.2 item 7) and return its exit code."""
        assert self.process.stdin is not None
        await self.process.stdin.aclose()
        with trio.fail_after(READ_S):
            return await self.process.wait()


@asynccontextmanager
async def spawned(argv: list[str], workspace: Path, stderr: Path) -> AsyncIterator[Child]:
    """The fake child run as a bridge runs its provider (in the workspace); killed whatever happens."""
    with stderr.open("ab") as log:
        process = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=workspace
        )
    try:
        yield Child(process)
    finally:
        with trio.CancelScope(shield=True):
            process.kill()
            await process.wait()


def recorded_segments(cell: Path) -> list[list[tuple[str, dict[str, Any]]]]:
    """The provider lanes in wire order, cut at every bridge `initialize` request (written here, not imported)."""
    entries = [e for d in (PROVIDER_TO_BRIDGE, BRIDGE_TO_PROVIDER) for e in read_lane(lane_path(cell, d), d)]
    entries.sort(key=lambda e: (e.run, e.seq))
    cut: list[list[tuple[str, dict[str, Any]]]] = []
    for entry in entries:
        message = json.loads(entry.line)
        initialize = _subtype(message, "control_request") == "initialize" or message.get("method") == "initialize"
        if not cut or (entry.dir == BRIDGE_TO_PROVIDER and initialize):
            cut.append([])
        cut[-1].append((entry.dir, message))
    return cut


def _subtype(message: dict[str, Any], kind: str) -> str | None:
    return message["request"]["subtype"] if message.get("type") == kind else None


def _request_id(message: dict[str, Any]) -> Any:
    """The id of a request (claude `control_request`, JSON-RPC id and method), else None."""
    if message.get("type") == "control_request":
        return message["request_id"]
    return message.get("id") if "method" in message else None


def _with_request_id(message: dict[str, Any], id: Any) -> dict[str, Any]:
    return {**message, "request_id" if message.get("type") == "control_request" else "id": id}


def _response_id(message: dict[str, Any]) -> Any:
    """The request a response answers (claude `control_response`, JSON-RPC id without method), else None."""
    if message.get("type") == "control_response":
        return message["response"]["request_id"]
    return message.get("id") if "method" not in message else None


def _with_response_id(message: dict[str, Any], id: Any) -> dict[str, Any]:
    if message.get("type") == "control_response":
        return {**message, "response": {**message["response"], "request_id": id}}
    return {**message, "id": id}


def live_hooks(hooks: dict[str, Any], renamed: dict[str, str]) -> dict[str, Any]:
    """The recorded hook registration with every callback id renamed, as another bridge could number them."""
    live: dict[str, Any] = {}
    for event, matchers in hooks.items():
        live[event] = []
        for matcher in matchers:
            ids = [renamed.setdefault(i, f"live-{event}-{i}") for i in matcher["hookCallbackIds"]]
            live[event].append({**matcher, "hookCallbackIds": ids})
    return live


async def play_as_bridge(child: Child, segment: list[tuple[str, dict[str, Any]]], prefix: str) -> int:
    """Write the segment's bridge lines (fresh ids), check every provider line against the recording; lines read."""
    live_ids: dict[Any, str] = {}  # recorded bridge request id -> the id written here
    hook_ids: dict[str, str] = {}
    read = 0
    for index, (direction, message) in enumerate(segment):
        if direction == BRIDGE_TO_PROVIDER:
            if (recorded := _request_id(message)) is not None:
                live_ids[recorded] = f"{prefix}-{index}"
                message = _with_request_id(message, live_ids[recorded])
            if _subtype(message, "control_request") == "initialize":
                hooks = live_hooks(message["request"]["hooks"], hook_ids)
                message = {**message, "request": {**message["request"], "hooks": hooks}}
            await child.send(message)
            continue
        expected = message
        if (answered := _response_id(message)) in live_ids:
            expected = _with_response_id(message, live_ids[answered])
        if _subtype(message, "control_request") == "hook_callback":
            request = {**message["request"], "callback_id": hook_ids[message["request"]["callback_id"]]}
            expected = {**message, "request": request}
        got = await child.read()
        assert json.dumps(got) == json.dumps(expected), f"provider line {index}: got {got}, expected {expected}"
        read += 1
    return read


def generic_answer(request_id: str) -> dict[str, Any]:
    return {"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": {}}}


def interrupt(request_id: str) -> dict[str, Any]:
    return {"request_id": request_id, "type": "control_request", "request": {"subtype": "interrupt"}}


def claude_profile(cell: Path, tmp: Path, *extra: str) -> tuple[driver.Profile, Path]:
    """The claude-code profile for `cell` under `tmp` (the fake child given `extra` args), and the workspace."""
    state, workspace = tmp / "state", tmp / "workspace"
    state.mkdir()
    workspace.mkdir()
    profile = driver.prepare_profile("claude-code", cell, state, workspace, driver.plan_cell(cell, "claude-code"))
    if extra:
        agent = driver.fake_agent(cell, state, "claude-cli") + list(extra)
        driver.write_wrapper(Path(profile.env[driver.CLAUDE_EXECUTABLE_ENV]), agent)
    return profile, workspace


# -- the dialects -----------------------------------------------------------------------------


@pytest.mark.parametrize("cell", played_cells("claude-code") + played_cells("codex"))
async def test_a_perfect_bridge_gets_every_provider_line_in_recorded_order(cell: Path, tmp_path: Path) -> None:
    if cell.parent.name == "claude-code":
        profile, workspace = claude_profile(cell, tmp_path)
        argv = [profile.env[driver.CLAUDE_EXECUTABLE_ENV], *CLI_FLAGS]
        after_end, answer = interrupt("after-end"), generic_answer("after-end")
    else:
        state, workspace = tmp_path / "state", tmp_path
        profile = driver.prepare_profile("codex", cell, state, workspace, driver.plan_cell(cell, "codex"))
        argv = [profile.env[driver.CODEX_COMMAND_ENV], *json.loads(profile.env[driver.CODEX_ARGS_ENV])]
        after_end = {"jsonrpc": "2.0", "id": "after-end", "method": "thread/read"}
        answer = {"jsonrpc": "2.0", "id": "after-end", "result": {}}
    segments = recorded_segments(cell)
    for number, segment in enumerate(segments):
        async with spawned(argv, workspace, tmp_path / "stderr") as child:
            read = await play_as_bridge(child, segment, f"live{number}")
            assert read == sum(d == PROVIDER_TO_BRIDGE for d, _ in segment)
            # past the end of its segment the child answers everything generically, at once
            await child.send(after_end)
            assert await child.read(timeout=2.0) == answer
            assert await child.close() == 0
    assert sorted(p.name for p in (tmp_path / "state").glob("segment-*")) == [
        f"segment-{n}" for n in range(len(segments))
    ]


@needs_claude
async def test_a_divergent_bridge_request_is_answered_generically_after_the_stall(tmp_path: Path) -> None:
    assert CLAUDE is not None
    cell = CLAUDE / "turn-tools"
    profile, workspace = claude_profile(cell, tmp_path, *FAST)
    segment = recorded_segments(cell)[0]
    initialize, user = segment[0][1], segment[1][1]
    argv = [profile.env[driver.CLAUDE_EXECUTABLE_ENV], *CLI_FLAGS]
    async with spawned(argv, workspace, tmp_path / "stderr") as child:
        await child.send({**initialize, "request_id": "live-init"})
        # the recording expects the `user` line next; a request it never saw must not hang the bridge
        await child.send({**interrupt("divergent"), "request": {"subtype": "set_model"}})
        await child.send({"type": "keep_alive"})  # an unmatched notification is dropped
        start = trio.current_time()
        assert await child.read(timeout=5.0) == generic_answer("divergent")
        assert 0.25 <= trio.current_time() - start < 3.0
        await child.send(user)
        first = await child.read()
        assert (first["type"], first["subtype"]) == ("system", "hook_started")
        assert await child.close() == 0


def test_claude_dialect_keys_ids_and_hook_remapping() -> None:
    cli = ClaudeCli()
    hooks = {"PreToolUse": [{"hookCallbackIds": ["hook_4"]}], "Stop": [{"hookCallbackIds": ["hook_9", "hook_10"]}]}
    recorded = {"request_id": "r1", "type": "control_request", "request": {"subtype": "initialize", "hooks": hooks}}
    registered = {"PreToolUse": [{"hookCallbackIds": ["h-a"]}], "Stop": [{"hookCallbackIds": ["h-b", "h-c"]}]}
    live = {**recorded, "request_id": "l1", "request": {"subtype": "initialize", "hooks": registered}}
    assert cli.classify(recorded) == ("request", "control_request:initialize", "r1")
    assert cli.classify({"type": "control_response", "response": {"request_id": "r1"}}) == (
        "response",
        "control_response",
        "r1",
    )
    assert cli.classify({"type": "system", "subtype": "init"}) == ("notification", "system:init", None)
    assert cli.classify({"type": "user", "message": {}}) == ("notification", "user", None)
    cli.learn(recorded, live)
    callback = {
        "type": "control_request",
        "request_id": "p1",
        "request": {"subtype": "hook_callback", "callback_id": "hook_10", "input": {}},
    }
    assert cli.rewrite(callback)["request"] == {"subtype": "hook_callback", "callback_id": "h-c", "input": {}}
    answer = {"type": "control_response", "response": {"subtype": "success", "request_id": "r1", "response": {"a": 1}}}
    assert json.dumps(cli.readdress(answer, "l1")) == json.dumps(
        {**answer, "response": {**answer["response"], "request_id": "l1"}}
    )


# -- the profiles ----------------------------------------------------------------------------


def _plan(*messages: dict[str, Any]) -> Plan:
    return Plan(steps=[Step(m, 1, n, 0, 0, 0) for n, m in enumerate(messages)])


def test_profiles_per_provider(tmp_path: Path) -> None:
    cell, state, workspace = tmp_path / "rec" / "codex" / "c", tmp_path / "state", tmp_path / "ws"
    codex = driver.prepare_profile("codex", cell, state, workspace, _plan())
    args = json.loads(codex.env[driver.CODEX_ARGS_ENV])
    assert codex.agent is None and codex.env[driver.CODEX_COMMAND_ENV] == sys.executable
    assert args == [
        "-m",
        "bbridge.replay.fake_agent",
        "--recording",
        str(cell.resolve()),
        "--dialect",
        "json-rpc",
        "--state",
        str(state),
    ]
    acp = driver.prepare_profile("acp-cursor", cell, state, workspace, _plan())
    assert acp.env == {} and acp.agent == [codex.env[driver.CODEX_COMMAND_ENV], *args]
    assert driver.prepare_profile("echo", cell, state, workspace, _plan()) == driver.Profile()

    claude = driver.prepare_profile("claude-code", cell, state, workspace, _plan())
    wrapper = Path(claude.env[driver.CLAUDE_EXECUTABLE_ENV])
    assert claude.agent is None and claude.env[driver.CLAUDE_CONFIG_ENV] == str(state / "claude-config")
    assert wrapper.parent == state and os.access(wrapper, os.X_OK)
    text = wrapper.read_text()
    assert text.startswith("#!/bin/sh\nexec ") and "--dialect claude-cli" in text and text.endswith(' "$@"\n')


def test_fork_seeding_writes_the_source_transcript_where_the_cli_looks(tmp_path: Path) -> None:
    workspace = tmp_path / "work space.1"
    source, checkpoint = str(uuid.uuid4()), str(uuid.uuid4())
    fork = {"method": "thread/fork", "id": 3, "params": {"sourceProviderThreadId": source, "cwd": "/tmp/x"}}
    at_checkpoint = {**fork, "params": {**fork["params"], "sourceProviderCheckpointId": checkpoint}}
    other = str(uuid.uuid4())
    plain = {**fork, "params": {"sourceProviderThreadId": other}}
    profile = driver.prepare_profile(
        "claude-code", tmp_path / "cell", tmp_path / "state", workspace, _plan(at_checkpoint, plain)
    )
    projects = Path(profile.env[driver.CLAUDE_CONFIG_ENV]) / "projects"
    folder = projects / re.sub(r"[^A-Za-z0-9]", "-", str(workspace))
    assert folder.name.endswith("-work-space-1") and sorted(p.name for p in projects.iterdir()) == [folder.name]
    for session, want in ((source, checkpoint), (other, None)):
        user, assistant = [json.loads(line) for line in (folder / f"{session}.jsonl").read_text().splitlines()]
        assert (user["type"], assistant["type"]) == ("user", "assistant")
        assert user["sessionId"] == assistant["sessionId"] == session and assistant["parentUuid"] == user["uuid"]
        assert assistant["uuid"] == (want or str(uuid.UUID(assistant["uuid"])))
        assert str(uuid.UUID(user["uuid"])) != assistant["uuid"]


# -- end to end: the environment a bridge under replay is given -------------------------------

REPORT = """
import json, os, pathlib, sys
env = os.environ
config = env.get("CLAUDE_CONFIG_DIR")
exe = env.get("BB_CLAUDE_CODE_EXECUTABLE")
report = {k: env.get(k) for k in ("BB_CODEX_BRIDGE_APP_SERVER_COMMAND", "BB_CODEX_BRIDGE_APP_SERVER_ARGS")}
report["executable"] = bool(exe) and os.access(exe, os.X_OK)
report["config"] = config
report["seeded"] = sorted(str(p.relative_to(config)) for p in pathlib.Path(config).rglob("*.jsonl")) if config else []
pathlib.Path(sys.argv[1]).write_text(json.dumps(report))
"""


@pytest.mark.parametrize("cell", played_cells("claude-code", "fork") + played_cells("codex", "fork"))
async def test_the_bridge_process_gets_the_profile_env(cell: Path, tmp_path: Path) -> None:
    provider = cell.parent.name
    out = tmp_path / "report.json"
    pacing = Pacing(wait=3.0, order=0.05, drain=0.05, settle=0.05)
    with trio.fail_after(30):
        replay = await driver.replay_cell([sys.executable, "-c", REPORT, str(out)], cell, pacing=pacing)
    assert replay.stalls  # the stand-in exits at once
    report = json.loads(out.read_text())
    if provider == "codex":
        args = json.loads(report["BB_CODEX_BRIDGE_APP_SERVER_ARGS"])
        assert report["BB_CODEX_BRIDGE_APP_SERVER_COMMAND"] == sys.executable
        assert args[:4] == ["-m", "bbridge.replay.fake_agent", "--recording", str(cell.resolve())]
        assert args[4:6] == ["--dialect", "json-rpc"] and args[6] == "--state"
        return
    config = Path(report["config"])
    workspace = config.parents[1] / "workspace"  # the scratch directory holds state/ and workspace/
    assert report["executable"] and config.name == "claude-config"
    sanitized = re.sub(r"[^A-Za-z0-9]", "-", str(workspace))
    assert report["seeded"] == [f"projects/{sanitized}/76c6be36-671c-432c-b8da-a3861b489499.jsonl"]


# -- pacing ------------------------------------------------------------------------------------

LATE_DELTA = {
    "jsonrpc": "2.0",
    "method": "thread/delta",
    "params": {
        "threadId": "thr_1",
        "deltas": [
            {"kind": "input.accepted", "clientRequestId": "creq_2222222223"},
            {"kind": "turn.open"},
            {"kind": "turn.boundary", "status": "completed"},
        ],
    },
}
LATE_BRIDGE = r"""
import json, select, sys

def write(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    request = json.loads(line)
    result = {"protocolVersion": 2, "capabilities": {"grammarVersions": [3, 3]}} if request["method"] == "initialize" else {}
    write({"jsonrpc": "2.0", "id": request["id"], "result": result})
    if request["method"] != "initialize":
        # a loaded machine: the turn's deltas come well after the answer, and stdin EOF ends the session first
        if select.select([sys.stdin], [], [], 0.5)[0]:
            sys.exit(0)
        write(json.loads(sys.argv[1]))
"""


def _lane_entry(seq: int, direction: str, message: dict[str, Any]) -> str:
    return json.dumps({"ts": 0, "run": 1, "seq": seq, "dir": direction, "line": json.dumps(message)}) + "\n"


async def test_the_end_waits_for_the_recorded_events_before_settling(tmp_path: Path) -> None:
    """Output the recording has after the last answer is awaited (bounded by `order`), not cut off by a settle
    shorter than the bridge's pause: what keeps parity runs on a loaded machine whole."""
    cell = tmp_path / "rec" / "stand-in" / "late"
    cell.mkdir(parents=True)
    request = {"jsonrpc": "2.0", "method": "x/go", "params": {}, "id": 1}
    lane_path(cell, "runtime→bridge").write_text(_lane_entry(1, "runtime→bridge", request))
    answer = _lane_entry(2, "bridge→runtime", {"jsonrpc": "2.0", "id": 1, "result": {}})
    lane_path(cell, "bridge→runtime").write_text(answer + _lane_entry(3, "bridge→runtime", LATE_DELTA))
    pacing = Pacing(wait=5.0, order=3.0, drain=0.05, settle=0.05)
    with trio.fail_after(30):
        replay = await driver.replay_cell(
            [sys.executable, "-c", LATE_BRIDGE, json.dumps(LATE_DELTA)], cell, pacing=pacing
        )
    assert replay.stalls == []
    events = [e.event["type"] for e in replay.log if e.kind == "event"]
    assert len(events) == replay.plan.events and events[-1] == "turn/completed", events


def test_a_stop_holds_the_provider_until_the_recorded_settlement(tmp_path: Path) -> None:
    """The plan notes what the bridge produced after each message before the provider's next line (`reaction`)."""
    thread = "thr_r"
    delta = {"jsonrpc": "2.0", "method": "thread/delta"}
    lanes: dict[str, list[tuple[int, dict[str, Any]]]] = {
        "runtime→bridge": [
            (1, {"jsonrpc": "2.0", "id": 1, "method": "turn/start", "params": {"threadId": thread}}),
            (4, {"jsonrpc": "2.0", "id": 2, "method": "thread/stop", "params": {"threadId": thread}}),
        ],
        "bridge→runtime": [
            (2, {**delta, "params": {"threadId": thread, "deltas": [{"kind": "turn.open"}]}}),
            (
                5,
                {
                    **delta,
                    "params": {"threadId": thread, "deltas": [{"kind": "turn.boundary", "status": "interrupted"}]},
                },
            ),
        ],
        "provider→bridge": [(3, {"type": "stream_event"}), (6, {"type": "stream_event"})],
    }
    for direction, entries in lanes.items():
        rows = [{"ts": seq, "run": 1, "seq": seq, "dir": direction, "line": json.dumps(line)} for seq, line in entries]
        (tmp_path / f"{direction}.ndjson").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    start, stop = driver.plan_cell(tmp_path, "fake").steps
    assert (start.events, start.reaction) == (0, 1)  # turn/started came before the provider wrote
    assert (stop.events, stop.reaction) == (1, 2)  # and the stop's settlement before its next line
