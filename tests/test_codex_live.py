"""`bridges.codex` end to end: the REAL `codex app-server`, the real bridge, the real daemon, a scripted model.

The pinned codex CLI (`make live-agents`, skipped only when the npm registry is unreachable) runs fully offline
against `tests.live.openai.ScriptedResponses` on 127.0.0.1 (its CODEX_HOME `config.toml` names the scripted
provider, see `tests/live/CODEX_NOTES.md`), spawned by `python -m bridges.codex`, spawned by a `Daemon` on a Unix
socket, driven by a `TestClient` with the request shapes of the recorded cells
(`../shared/recordings/codex/*/runtime→bridge.ndjson`), with model `gpt-5.5` instead of the recorded `gpt-5.6-sol`,
which codex drives in code mode (a `custom_tool_call` `exec` wrapping its tools): `gpt-5.5` gets plain
`exec_command` and `apply_patch` tools the scripted model can call. The bridge finds codex through its launch seam
`BB_CODEX_BRIDGE_APP_SERVER_COMMAND`/`_ARGS` (spec §1.3): the exact pinned binary, whatever else is on PATH; only
the conformance run, which strips inherited `BB_*` variables, finds it on PATH. Every wait is bounded; each test
checks that no process it started (bridge, codex, codex's shells) outlives its daemon.

Where codex-bridge.md and protocol.md disagree on interrupts, the bridge follows protocol.md §3.3.10: a
`thread/stop` interrupt is answered once codex's own `turn/completed interrupted` has settled the turn (the
reference answered when codex answered `turn/interrupt`, codex-bridge.md §2.8). The item codex leaves open stays
open, as in the recorded `stop-interrupt` cell (the boundary forgets it, assembler.md §7.6), so events keep parity.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from bridges.codex import launch
from tests.live import openai
from tests.live.codex import installed_cli, offline_env
from tests.live.processes import Watch, leftovers, no_leftovers
from tests.live.runner import bridge_provider, conformance
from tests.live.scenarios import (
    STEER_WORDS,
    approve,
    first_turn,
    interrupt,
    recorded_options,
    resumed_turn,
    steer_while_a_command_runs,
    turn_request,
)
from tests.support import ASK, FULL, connect, running

PROVIDER = "codex"
THREAD = "thr_codex_live"
MODEL = "gpt-5.5"
INSTRUCTIONS = "You are working inside bb, an agentic IDE."
# The recorded cells' option shapes: turn-tools/steer/stop-interrupt/resume use FULL, approval-* ASK.

# The recorded constructions' dynamic tool (served by the runtime, offered to the model by codex).
DYNAMIC_TOOL = {
    "name": "update_environment_directory",
    "description": "Move this bb thread to a different working directory for subsequent turns.",
    "inputSchema": {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "Absolute path to an existing directory."}},
        "required": ["path"],
        "additionalProperties": False,
    },
}

WATCH = Watch("a codex app-server or bridge")


@pytest.fixture(scope="module")
def codex() -> Iterator[Path]:
    with WATCH.module():
        yield installed_cli()


@pytest.fixture
def api() -> Iterator[openai.ScriptedResponses]:
    with openai.ScriptedResponses() as server:
        yield server


class Live:
    """One test's world: a workspace, a HOME with codex's config, the provider entry for the daemon."""

    def __init__(self, tmp_path: Path, api: openai.ScriptedResponses, codex: Path) -> None:
        self.root = tmp_path
        self.ws = tmp_path / "ws"
        self.storage = tmp_path / "storage"  # the recorded `additionalWorkspaceWriteRoots` (thread storage)
        self.ws.mkdir(exist_ok=True)
        self.storage.mkdir(exist_ok=True)
        self.api = api
        env = offline_env(tmp_path, api.base_url)
        env[launch.COMMAND_ENV] = str(codex)
        env[launch.ARGS_ENV] = json.dumps(["app-server"])
        self.provider = bridge_provider("bridges.codex", env, self.ws)

    def options(self, policy: dict[str, Any]) -> dict[str, Any]:
        provider_options = {
            "additionalWorkspaceWriteRoots": [str(self.storage)],
            "workflowsEnabled": False,
            "memoryEnabled": True,
            "providerSubagentsEnabled": True,
        }
        return recorded_options(MODEL, INSTRUCTIONS, policy, provider_options)

    def start(self, policy: dict[str, Any] = FULL) -> dict[str, Any]:
        return {
            "providerId": PROVIDER,
            "threadId": THREAD,
            "cwd": str(self.ws),
            "options": self.options(policy),
            "dynamicTools": [DYNAMIC_TOOL],
            "instructionMode": "append",
        }

    def turn(self, ptid: str, words: str, policy: dict[str, Any] = FULL, n: int = 1) -> dict[str, Any]:
        return turn_request(PROVIDER, THREAD, ptid, words, self.options(policy), n)

    def codex_processes(self) -> dict[int, list[str]]:
        """The running `codex app-server` children started in this test's folder."""
        return {pid: argv for pid, argv in leftovers([self.root]).items() if argv[1:2] == ["app-server"]}

    def inputs(self, post: openai.Request) -> str:
        """Everything a model request carried as conversation (the stateless Responses `input`)."""
        return json.dumps(post.body["input"])


@pytest.fixture
def live(tmp_path: Path, api: openai.ScriptedResponses, codex: Path) -> Iterator[Live]:
    with WATCH.test(tmp_path):
        yield Live(tmp_path, api, codex)


def statuses(client: Any) -> list[str]:
    return [e["status"] for e in client.of(THREAD, "turn/completed")]


def completed(client: Any, item_type: str) -> list[dict[str, Any]]:
    return [e["item"] for e in client.of(THREAD, "item/completed") if e["item"]["type"] == item_type]


async def test_streamed_reasoning_and_text_reach_the_client(live: Live) -> None:
    live.api.push(openai.reasoning_and_text("Weighing a greeting", "Hello from the scripted model!"))
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        started = await client.request("thread/start", live.start())
        ptid = started["providerThreadId"]
        assert started["sessionRestorable"] is True
        assert await client.request("turn/start", live.turn(ptid, "Say hello.")) == {"threadId": THREAD}
        await client.wait_for(lambda: client.settled(THREAD), timeout=20)
        assert len(live.codex_processes()) == 1
    assert statuses(client) == ["completed"]
    reasoning = "".join(e["delta"] for e in client.of(THREAD, "item/reasoning/summaryTextDelta"))
    assert reasoning == "Weighing a greeting"
    assert client.text(THREAD) == "Hello from the scripted model!"
    assert len(client.of(THREAD, "item/agentMessage/delta")) > 1  # streamed, not one final blob
    (message,) = completed(client, "agentMessage")
    assert message["text"] == "Hello from the scripted model!"
    (post,) = live.api.posts()
    assert post.body["model"] == MODEL and post.body["stream"] is True
    assert INSTRUCTIONS in live.inputs(post) and "Say hello." in live.inputs(post)  # developer instructions
    assert DYNAMIC_TOOL["name"] in {tool.get("name") for tool in post.body["tools"]}


@pytest.mark.parametrize("decision", ["allow_once", "deny"])
async def test_an_escalated_command_is_asked_of_the_client(live: Live, decision: str) -> None:
    target = live.root / "outside" / "note.txt"
    target.parent.mkdir()
    call = {"cmd": f"touch {target}", "sandbox_permissions": "require_escalated", "justification": "Create it?"}
    live.api.push(openai.function_call("exec_command", call, call_id="call_touch", preamble="Touching it."))
    live.api.push(openai.text("Done."))
    async with (
        running(live.root, {PROVIDER: live.provider}) as (_, path),
        connect(path, answer=approve(decision)) as client,
    ):
        await first_turn(client, live, THREAD, "Touch the file.", timeout=20, policy=ASK)
    (asked,) = client.requests
    assert asked.method == "interaction/request" and asked.params is not None
    params = msgspec.json.decode(asked.params)
    assert params["threadId"] == THREAD and params["payload"]["kind"] == "approval"
    assert params["payload"]["availableDecisions"] == ["allow_once", "deny"]  # codex's `cancel` offered as deny
    assert params["payload"]["reason"] == "Create it?"
    subject = params["payload"]["subject"]
    assert subject["kind"] == "command" and subject["command"] == f"/bin/bash -lc 'touch {target}'"
    assert subject["cwd"] == str(live.ws) and subject["actions"] == [{"type": "unknown", "command": f"touch {target}"}]
    assert target.exists() is (decision == "allow_once")
    (command,) = completed(client, "commandExecution")
    _, second = live.api.posts()
    (output,) = [item for item in second.body["input"] if item["type"] == "function_call_output"]
    if decision == "allow_once":
        assert command["status"] == "completed" and command["exitCode"] == 0
        assert "Process exited with code 0" in output["output"]
    else:  # codex's `declined` is bb's interrupted-and-denied (codex-bridge.md §3.4 status map)
        assert command["status"] == "interrupted" and command["approvalStatus"] == "denied"
        assert "rejected by user" in output["output"] and "rejected by user" in command["aggregatedOutput"]
    assert statuses(client) == ["completed"]
    assert client.text(THREAD) == "Touching it.Done."


async def test_a_file_change_is_written_and_reported(live: Live) -> None:
    patch = "*** Begin Patch\n*** Add File: notes.txt\n+hello from apply_patch\n*** End Patch\n"
    live.api.push(openai.custom_tool_call("apply_patch", patch, call_id="call_patch", preamble="Writing notes."))
    live.api.push(openai.text("Written."))
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        ptid = (await client.request("thread/start", live.start()))["providerThreadId"]
        await client.request("turn/start", live.turn(ptid, "Create notes.txt."))
        await client.wait_for(lambda: client.settled(THREAD), timeout=20)
    assert (live.ws / "notes.txt").read_text() == "hello from apply_patch\n"
    (change,) = completed(client, "fileChange")
    assert change["status"] == "completed"
    assert [c["path"] for c in change["changes"]] == [str(live.ws / "notes.txt")]
    first, second = live.api.posts()
    (tool,) = [t for t in first.body["tools"] if t.get("name") == "apply_patch"]
    assert tool["type"] == "custom" and tool["format"]["syntax"] == "lark"
    (output,) = [item for item in second.body["input"] if item["type"] == "custom_tool_call_output"]
    assert output["call_id"] == "call_patch"
    assert statuses(client) == ["completed"]
    assert client.text(THREAD) == "Writing notes.Written."


async def test_interrupt_settles_a_stalled_turn_as_interrupted(live: Live) -> None:
    words = "".join(f"word{i} " for i in range(100))
    live.api.push(openai.text(words, delay=0.5), openai.text("4"))
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        ptid = (await client.request("thread/start", live.start()))["providerThreadId"]
        await client.request("turn/start", live.turn(ptid, "Write an essay."))
        await client.wait_for(lambda: bool(client.of(THREAD, "item/agentMessage/delta")), timeout=20)
        stop = interrupt(client, PROVIDER, THREAD, ptid)
        asked = time.monotonic()
        with trio.fail_after(10):
            assert await client.request("thread/stop", stop) == {"ok": True}
        assert time.monotonic() - asked < 5
        # protocol.md §3.3.10: the bridge writes the settlement before the stop's answer (it waits for codex's own
        # `turn/completed interrupted`, which the reference let follow its answer, codex-bridge.md §2.8; the bridge
        # level order is asserted in test_codex_bridge). The daemon queues events and answers on separate paths, so
        # here the events may trail the answer by a moment.
        await client.wait_for(lambda: client.settled(THREAD), timeout=5)
        assert statuses(client) == ["interrupted"]
        assert len(live.codex_processes()) == 1  # the session's codex survives an interrupt
        # the stop-interrupt cell: the next turn on the same thread works
        await client.request("turn/start", live.turn(ptid, "What is 2 + 2?", n=2))
        await client.wait_for(lambda: client.settled(THREAD, 2), timeout=20)
    assert statuses(client) == ["interrupted", "completed"]
    assert len(client.text(THREAD)) < len(words)
    interrupted = client.of(THREAD, "turn/started")[0]["scope"]["turnId"]
    opened = {e["item"]["id"] for e in client.of(THREAD, "item/started") if e["scope"]["turnId"] == interrupted}
    closed = {e["item"]["id"] for e in client.of(THREAD, "item/completed") if e["scope"]["turnId"] == interrupted}
    # The streaming agentMessage gets no `item/completed` from codex, and codex-bridge.md §2.8 closes nothing codex
    # leaves open (the recorded `stop-interrupt` cell); the boundary forgets open items (assembler.md §7.6). This
    # differs from protocol.md §3.3.10 ("explicit closes of open provider items"): pinned, see the module docstring.
    assert len(opened) == 1 and closed == set()
    history = live.inputs(live.api.posts()[-1])  # the next turn's request carries the interrupted one
    assert "Write an essay." in history and "<turn_aborted>" in history and "What is 2 + 2?" in history


async def test_a_401_fails_the_turn_legibly(live: Live) -> None:
    live.api.push(openai.http_error(401, "Incorrect API key provided: sk-dummy."), openai.text("ready"))
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        ptid = await first_turn(client, live, THREAD, "Reply with ready.", timeout=20)
        await client.request("turn/start", live.turn(ptid, "Reply with ready.", n=2))
        await client.wait_for(lambda: client.settled(THREAD, 2), timeout=20)
    assert statuses(client) == ["failed", "completed"]
    failed = client.of(THREAD, "turn/completed")[0]
    (error,) = client.of(THREAD, "provider/error")
    assert error["scope"] == failed["scope"] and error["willRetry"] is False
    detail = (
        f"unexpected status 401 Unauthorized: Incorrect API key provided: sk-dummy., url: {live.api.base_url}/responses"
    )
    assert error["detail"] == detail and failed["error"] == {"message": detail}
    # codex reports `codexErrorInfo: {httpConnectionFailed: {httpStatusCode: 401}}`, mapped as codex-bridge.md §3.7 says
    assert error["errorInfo"] == {
        "category": "connection-failed",
        "providerCode": "httpConnectionFailed",
        "httpStatusCode": 401,
    }
    assert client.text(THREAD) == "ready"


async def test_resume_in_a_new_bridge_process(live: Live) -> None:
    live.api.push(openai.text("ready"), openai.text("ready, again"))
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        ptid = await first_turn(client, live, THREAD, "Reply with ready.", timeout=20)
        (first,) = live.codex_processes()
    no_leftovers([live.root], "the first daemon's bridge or codex is still running")
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        await resumed_turn(client, live, THREAD, ptid, "What did you reply?", timeout=20)
        (second,) = live.codex_processes()
        assert second != first
    assert statuses(client) == ["completed"]
    assert client.text(THREAD) == "ready, again"
    _, post = live.api.posts()
    history = live.inputs(post)  # the conversation codex reloaded from its rollout
    assert "Reply with ready." in history and '"ready"' in history and "What did you reply?" in history
    assert post.body["prompt_cache_key"] == ptid


async def test_a_steer_joins_the_running_turn(live: Live) -> None:
    """The steer cell's shape: a steer while a command runs reaches the model in the same turn."""
    call = {"cmd": "sleep 1"}
    live.api.push(openai.function_call("exec_command", call, call_id="call_sleep", preamble="Counting: 1"))
    live.api.push(openai.text("main"))
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        await steer_while_a_command_runs(client, live, THREAD, timeout=20, quiet=0.3)
    first, second = live.api.posts()
    assert "Stop counting" not in live.inputs(first)
    assert STEER_WORDS in live.inputs(second)
    assert client.text(THREAD) == "Counting: 1main"


async def test_model_list_comes_from_codex(live: Live) -> None:
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        models = await client.request("model/list", {"providerId": PROVIDER})
        again = await client.request("model/list", {"providerId": PROVIDER})
    assert again == models
    # codex 0.171.0's bundled catalogue, as its `model/list` reports it offline (API-key auth, no network)
    assert [m["id"] for m in models["models"]] == [
        "gpt-6.2-sol", "gpt-6.2-astra", "gpt-6.1-terra", "gpt-6.1-sol", "gpt-6-astra", "gpt-6-sol", "gpt-6-luna",
        "gpt-5.6-sol", "gpt-5.6-terra", "gpt-5.6-luna", "gpt-5.5",
    ]  # fmt: skip
    assert [m["id"] for m in models["models"] if m["isDefault"]] == ["gpt-6.2-sol"]
    assert all(m["model"] == m["id"] and m["displayName"] for m in models["models"])
    (ours,) = [m for m in models["models"] if m["id"] == MODEL]
    assert [e["reasoningEffort"] for e in ours["supportedReasoningEfforts"]] == ["low", "medium", "high", "xhigh"]
    assert ours["defaultReasoningEffort"] == "medium" and models["selectedOnlyModels"] == []
    assert live.api.requests == []  # codex lists its bundled catalog offline: no model call


def test_conformance_with_the_real_cli(tmp_path: Path, api: openai.ScriptedResponses, codex: Path) -> None:
    """`bbridge conformance` over the bridge and the real codex: every rule passes. The fixture is the default one
    with skills declared (the bridge serves `skills/configure`) and a known cwd (for the leftover check); the
    interrupt prompt gets an answer held before its first event, so the turn runs, with no item open yet, when the
    stop is sent: an interrupt that lands mid-message leaves codex's agentMessage open (the pinned difference from
    protocol.md §3.3.10 in the module docstring, asserted in test_interrupt_settles_a_stalled_turn_as_interrupted),
    which this rule would fail by the timing of the race alone."""
    ws, bindir = tmp_path / "ws", tmp_path / "bin"
    for folder in (ws, bindir):
        folder.mkdir()
    (bindir / "codex").symlink_to(codex)  # conformance strips inherited BB_* variables: found on PATH (§1.3)
    stalled = dataclasses.replace(openai.text("never sent"), hold=60.0)
    api.route = lambda request: stalled if "hold Write" in json.dumps(request.body["input"][-1]) else None
    env = offline_env(tmp_path, api.base_url)
    env["PATH"] = f"{bindir}:{env['PATH']}"
    with WATCH.test(tmp_path, "the conformance run"):
        result = conformance("bridges.codex", tmp_path, ws, env, cwd=ws, timeout=120)
        lines = result.stdout.splitlines()
        assert [line for line in lines if line.startswith("FAIL")] == [], result.stdout + result.stderr
        assert lines[-1] == "20 passed, 0 failed" and result.returncode == 0
        assert api.posts(), "the conformance turns reached the scripted model"
