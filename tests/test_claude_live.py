"""`bridges.claude_code` end to end: the REAL Claude Code CLI, the real bridge, the real daemon, a scripted model.

The pinned CLI (`make live-agents`, skipped only when the npm registry is unreachable) runs fully offline against
`tests.live.anthropic.AnthropicServer` on 127.0.0.1, spawned by `python -m bridges.claude_code` (found through
`BB_CLAUDE_CODE_EXECUTABLE`), spawned by a `Daemon` on a Unix socket, driven by a `TestClient` with the request
shapes of the recorded cells (`../shared/recordings/claude-code/*/runtime→bridge.ndjson`). Every wait is bounded;
each test checks that no `claude` process it started outlives its daemon.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from bridges.claude_code.models import CATALOG, SELECTED_ONLY
from tests.live.anthropic import AnthropicServer, Reply, Request, failure, reply, text, thinking, tool_use
from tests.live.claude import ensure_cli, offline_env
from tests.live.processes import Watch, leftovers
from tests.live.runner import bridge_provider, conformance
from tests.live.scenarios import (
    approve,
    first_turn,
    interrupt,
    recorded_options,
    resumed_turn,
    steer_while_a_command_runs,
    turn_request,
)
from tests.support import ASK, FULL, connect, running

PROVIDER = "claude-code"
THREAD = "thr_claude_live"
MODEL = "claude-opus-5[1m]"
INSTRUCTIONS = "You are working inside bb, an agentic IDE."
# The recorded cells' option shapes: steer/stop-interrupt use FULL, approval-* ASK.
PROVIDER_OPTIONS = {"workflowsEnabled": True, "memoryEnabled": True, "providerSubagentsEnabled": True}


def ours(argv: list[str]) -> bool:
    """A `claude` CLI or a claude-code bridge."""
    return argv[0].endswith("/claude") or "bridges.claude_code" in argv


WATCH = Watch("a claude CLI or bridge", ours)


@pytest.fixture(scope="module")
def claude() -> Iterator[Path]:
    with WATCH.module():
        yield ensure_cli()


@pytest.fixture
def api() -> Iterator[AnthropicServer]:
    with AnthropicServer() as server:
        yield server


def options(policy: dict[str, Any]) -> dict[str, Any]:
    return recorded_options(MODEL, INSTRUCTIONS, policy, PROVIDER_OPTIONS)


class Live:
    """One test's world: a workspace, a HOME, the provider entry for the daemon."""

    def __init__(self, tmp_path: Path, api: AnthropicServer, claude: Path) -> None:
        self.root = tmp_path
        self.ws = tmp_path / "ws"
        self.home = tmp_path / "home"
        self.ws.mkdir(exist_ok=True)
        self.home.mkdir(exist_ok=True)
        self.api = api
        env = offline_env(api.url, self.home, extra={"BB_CLAUDE_CODE_EXECUTABLE": str(claude)})
        self.provider = bridge_provider("bridges.claude_code", env, self.ws)

    def start(self, policy: dict[str, Any] = FULL, thread: str = THREAD) -> dict[str, Any]:
        return {"providerId": PROVIDER, "threadId": thread, "cwd": str(self.ws), "options": options(policy)}

    def turn(
        self, ptid: str, words: str, policy: dict[str, Any] = FULL, n: int = 1, thread: str = THREAD
    ) -> dict[str, Any]:
        return turn_request(PROVIDER, thread, ptid, words, options(policy), n)

    def processes(self) -> dict[int, list[str]]:
        """The running `claude` CLIs (not bridges) started in this test's folder."""
        return {pid: argv for pid, argv in leftovers([self.root], ours).items() if argv[0].endswith("/claude")}

    async def gone(self, pid: int, timeout: float) -> None:
        """Wait (bounded) until the CLI process `pid` has exited."""
        with trio.fail_after(timeout):
            while pid in self.processes():
                await trio.sleep(0.05)


@pytest.fixture
def live(tmp_path: Path, api: AnthropicServer, claude: Path) -> Iterator[Live]:
    with WATCH.test(tmp_path):
        yield Live(tmp_path, api, claude)


async def test_streamed_thinking_and_text_reach_the_client(live: Live) -> None:
    live.api.script(reply(thinking("Let me ", "think."), text("Hel", "lo ", "there")))
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        started = await client.request("thread/start", live.start())
        ptid = started["providerThreadId"]
        assert started["sessionRestorable"] is True
        assert await client.request("turn/start", live.turn(ptid, "Say hello.")) == {"threadId": THREAD}
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
        (claude,) = live.processes().values()
        assert "--session-id" in claude and ptid in claude
    types = client.types(THREAD)
    assert types[:3] == ["turn/started", "turn/input/accepted", "item/started"]
    assert [e["delta"] for e in client.of(THREAD, "item/reasoning/textDelta")] == ["Let me ", "think."]
    assert [e["delta"] for e in client.of(THREAD, "item/agentMessage/delta")] == ["Hel", "lo ", "there"]
    done = {e["item"]["type"]: e["item"] for e in client.of(THREAD, "item/completed")}
    assert done["reasoning"]["content"] == ["Let me think."] and done["agentMessage"]["text"] == "Hello there"
    assert [e["status"] for e in client.of(THREAD, "turn/completed")] == ["completed"]
    (request,) = live.api.messages()
    assert request.body["stream"] is True and request.model == "claude-opus-5"
    assert INSTRUCTIONS in request.system_text
    assert not [r.target for r in live.api.requests if r.is_proxy_attempt]


@pytest.mark.parametrize("decision", ["allow_once", "deny"])
async def test_a_write_outside_the_workspace_is_asked_of_the_client(live: Live, decision: str) -> None:
    target = live.root / "outside" / "note.txt"
    target.parent.mkdir()
    live.api.script(
        reply(text("Writing it."), tool_use("Write", {"file_path": str(target), "content": "hello\n"})),
        text("finished"),
    )
    async with (
        running(live.root, {PROVIDER: live.provider}) as (_, path),
        connect(path, answer=approve(decision)) as client,
    ):
        await first_turn(client, live, THREAD, "Write the note.", timeout=30, policy=ASK)
    (asked,) = client.requests
    assert asked.method == "interaction/request"
    params = msgspec_decode(asked.params)
    assert params["threadId"] == THREAD and params["payload"]["kind"] == "approval"
    assert params["payload"]["subject"]["kind"] == "file_change"
    assert target.exists() is (decision == "allow_once")
    if target.exists():
        assert target.read_text() == "hello\n"
    (result,) = live.api.messages()[1].blocks("tool_result", last_only=False)
    assert result.get("is_error", False) is (decision == "deny")
    if decision == "deny":
        assert "Permission request denied" in str(result["content"])  # the bridge's denial reached the model
    assert [e["status"] for e in client.of(THREAD, "turn/completed")] == ["completed"]
    assert client.text(THREAD) == "Writing it.finished"


async def test_a_mutating_bash_command_is_asked_and_runs(live: Live) -> None:
    live.api.script(
        reply(tool_use("Bash", {"command": "echo hi | tee hi.txt", "description": "Write hi"})), text("ran")
    )
    async with (
        running(live.root, {PROVIDER: live.provider}) as (_, path),
        connect(path, answer=approve("allow_once")) as client,
    ):
        await first_turn(client, live, THREAD, "Run it.", timeout=30, policy=ASK)
    (asked,) = client.requests  # plain `echo hi` is read-only and never asks; the pipe into tee does
    subject = msgspec_decode(asked.params)["payload"]["subject"]
    assert subject["kind"] == "command" and subject["command"] == "echo hi | tee hi.txt"
    assert (live.ws / "hi.txt").read_text() == "hi\n"
    (command,) = [e["item"] for e in client.of(THREAD, "item/completed") if e["item"]["type"] == "commandExecution"]
    assert command["status"] == "completed" and command["exitCode"] == 0 and command["aggregatedOutput"] == "hi"
    (result,) = live.api.messages()[1].blocks("tool_result", last_only=False)
    assert not result.get("is_error", False)
    assert [e["status"] for e in client.of(THREAD, "turn/completed")] == ["completed"]


PLAN_COMMAND = {"trigger": "/", "name": "plan", "source": "command", "origin": "builtin", "label": "Plan", "argumentHint": None}  # fmt: skip


async def test_a_plan_mode_turn_is_approved_then_runs_to_its_end(live: Live) -> None:
    """Issue 21: `/plan`; the model calls ExitPlanMode, the client allows once, a later Write is denied, the turn
    completes (leaving Plan mode is written before the allow and never awaited)."""
    target = live.root / "outside" / "plan.txt"
    target.parent.mkdir()
    plan = "# Plan\n1. Write plan.txt\n"

    def write_the_plan_file(request: Request) -> Reply:
        """The CLI names a fresh plan file in its system prompt; ExitPlanMode (input `{}`) then reads it."""
        found = re.search(r"create your plan at ([^\s\"\\]+\.md)", json.dumps(request.body))
        assert found, "the CLI's plan-mode prompt names no plan file"
        return reply(text("Planning."), tool_use("Write", {"file_path": found[1], "content": plan}))

    live.api.script(
        write_the_plan_file,
        reply(text("Here is the plan."), tool_use("ExitPlanMode", {})),
        reply(tool_use("Write", {"file_path": str(target), "content": "planned\n"})),
        text("finished"),
    )

    def answer(request: Any) -> Any:
        kind = msgspec_decode(request.params)["payload"]["subject"]["kind"]
        return {"decision": "allow_once", "grantedPermissions": None} if kind == "plan" else {"decision": "deny"}

    mode = {**ASK, "providerOptions": {**PROVIDER_OPTIONS, "claudeCodePermissionMode": "plan"}}
    words = "/plan Write the plan file."
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path, answer=answer) as client:
        ptid = (await client.request("thread/start", live.start(ASK)))["providerThreadId"]
        turn = live.turn(ptid, words, ASK)
        turn["options"] = {**turn["options"], **mode}
        turn["input"][0]["mentions"] = [{"start": 0, "end": 5, "resource": {"kind": "command", **PLAN_COMMAND}}]
        await client.request("turn/start", turn)
        await client.wait_for(lambda: client.settled(THREAD), timeout=45)
    subjects = [msgspec_decode(r.params)["payload"]["subject"] for r in client.requests]
    assert [s["kind"] for s in subjects] == ["plan", "file_change"]
    assert subjects[0]["plan"] == plan
    assert not target.exists()
    first = live.api.messages()[0]
    sent = json.dumps(first.body["messages"])
    assert "Write the plan file." in sent and "/plan Write" not in sent  # the mention is the mode, not the prompt
    *earlier, result = live.api.messages()[3].blocks("tool_result", last_only=False)
    assert [r.get("is_error", False) for r in earlier] == [False, False]  # the plan file written, the plan allowed
    assert result.get("is_error") is True and "Permission request denied" in str(result["content"])
    assert [e["status"] for e in client.of(THREAD, "turn/completed")] == ["completed"]
    assert client.text(THREAD).endswith("finished")


async def test_interrupt_settles_a_streaming_turn_as_interrupted(live: Live) -> None:
    words = [f"word{i} " for i in range(400)]
    live.api.script(reply(text(*words), delay=0.05), text("4"))
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        ptid = (await client.request("thread/start", live.start()))["providerThreadId"]
        await client.request("turn/start", live.turn(ptid, "Write an essay."))
        await client.wait_for(lambda: bool(client.of(THREAD, "item/agentMessage/delta")), timeout=30)
        stop = interrupt(client, PROVIDER, THREAD, ptid)
        (child,) = live.processes()
        asked = time.monotonic()
        assert await client.request("thread/stop", stop) == {"ok": True}
        answered = time.monotonic() - asked
        assert [e["status"] for e in client.of(THREAD, "turn/completed")] == [
            "interrupted"
        ]  # settled before the answer
        assert answered < 5  # the graceful close waits ≤ 4 s (§1.9); the SIGTERM fallback runs afterwards
        await live.gone(child, timeout=5)  # stdin closed at 4 s, SIGTERM 2 s later (§1.9)
        # the stop-interrupt cell: resume, then a turn on the same session
        resume = {**live.start(), "providerThreadId": ptid}
        await client.request("thread/resume", resume)
        await client.request("turn/start", live.turn(ptid, "What is 2 + 2?", n=2))
        await client.wait_for(lambda: client.settled(THREAD, 2), timeout=30)
    assert [e["status"] for e in client.of(THREAD, "turn/completed")] == ["interrupted", "completed"]
    assert len(client.text(THREAD)) < len("".join(words))
    history = str(live.api.messages()[-1].messages)
    assert "Write an essay." in history and "What is 2 + 2?" in history


async def test_an_auth_failure_fails_the_turn_legibly(live: Live) -> None:
    live.api.script(failure(401), text("ready"))
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        ptid = await first_turn(client, live, THREAD, "Reply with ready.", timeout=30)
        await client.request("turn/start", live.turn(ptid, "Reply with ready.", n=2))  # on a restarted CLI
        await client.wait_for(lambda: client.settled(THREAD, 2), timeout=30)
    (failed, ok) = client.of(THREAD, "turn/completed")
    assert failed["status"] == "failed" and ok["status"] == "completed"
    (error,) = client.of(THREAD, "provider/error")
    assert error["scope"] == failed["scope"]
    assert error["detail"] == "Invalid API key · Fix external API key"
    assert error["errorInfo"] == {"category": "unauthorized", "providerCode": None, "httpStatusCode": 401}
    replaced = [params for method, params in client.notes if method == "session/replaced"]
    assert [r["reason"] for r in replaced] == ["Claude session restarted after authentication failed"]
    assert client.text(THREAD) == "ready"


async def test_resume_in_a_new_bridge_process(live: Live) -> None:
    live.api.script(text("ready"), text("ready, again"))
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        ptid = await first_turn(client, live, THREAD, "Reply with ready.", timeout=30)
        (first,) = live.processes()
    assert live.processes() == {}
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        await resumed_turn(client, live, THREAD, ptid, "What did you reply?", timeout=30)
        ((pid, argv),) = live.processes().items()
        assert pid != first and argv[argv.index("--resume") + 1] == ptid and "--session-id" not in argv
    assert [e["status"] for e in client.of(THREAD, "turn/completed")] == ["completed"]
    assert client.text(THREAD) == "ready, again"
    history = live.api.messages()[1].messages  # the transcript the resumed CLI reloaded
    assert "ready" in str(history[:-1]) and "Reply with ready." in str(history)


async def test_a_steer_joins_the_running_turn(live: Live) -> None:
    """The steer cell's shape: a steer while a tool runs reaches the model in the same turn (`steerMode: inject`)."""
    live.api.script(
        reply(text("Counting: 1"), tool_use("Bash", {"command": "sleep 2", "description": "Wait"})),
        text("main"),
    )
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        await steer_while_a_command_runs(client, live, THREAD, timeout=30, quiet=0.5)
    first, second = live.api.messages()
    assert "Stop counting" not in str(first.messages) and "Stop counting; tell me the branch." in str(second.messages)
    assert client.text(THREAD) == "Counting: 1main"


async def test_model_list_comes_from_the_cli(live: Live) -> None:
    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as client:
        models = await client.request("model/list", {"providerId": PROVIDER})
        again = await client.request("model/list", {"providerId": PROVIDER})  # memoized: no second probe
    assert again == models
    ids = [m["id"] for m in models["models"]]
    assert ids[: len(CATALOG)] == [row[0] for row in CATALOG]
    discovered = ids[len(CATALOG) :]
    assert discovered, "the CLI's own models (its initialize answer) are listed after the catalog"
    (default,) = [m["id"] for m in models["models"] if m["isDefault"]]
    assert default in discovered  # the CLI's `default` entry resolves to one of its own models
    selected = [m["id"] for m in models["selectedOnlyModels"]]
    assert selected and set(selected) <= {row[0] for row in SELECTED_ONLY}
    assert live.api.requests == []  # the probe child answers `initialize` and is closed before any model call


def msgspec_decode(raw: Any) -> Any:
    return msgspec.json.decode(raw)


def test_conformance_with_the_real_cli(tmp_path: Path, api: AnthropicServer, claude: Path) -> None:
    """`bbridge conformance` over the bridge and the real CLI: every rule passes. The fixture is the default one
    with skills declared and a known cwd (for the leftover check). The declaration is the fixture's (protocol.md
    §7.6), and the default one declares none, for bridges without skills: this bridge must serve
    `skills/configure` (protocol.md §2.1 step 4, spec §3.12), so with the default it rightly fails that one rule.
    The interrupt prompt gets a slow answer so the turn still runs when the stop is sent."""
    ws, home, bindir = tmp_path / "ws", tmp_path / "home", tmp_path / "bin"
    for folder in (ws, home, bindir):
        folder.mkdir()
    (bindir / "claude").symlink_to(claude)  # conformance strips inherited BB_* variables: found on PATH (§1.3)
    api.consumes = lambda request: "hold Write" in request.user_text()
    api.script(*[reply(text(*[f"word{i} " for i in range(600)]), delay=0.05)] * 2)
    env = offline_env(api.url, home)
    env["PATH"] = f"{bindir}:{env['PATH']}"
    with WATCH.test(tmp_path, "the conformance run"):
        result = conformance("bridges.claude_code", tmp_path, ws, env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.splitlines()[-1] == "20 passed, 0 failed"
        assert "PASS turn/interrupt-settles-before-response" in result.stdout
        assert not [r.target for r in api.requests if r.is_proxy_attempt]


async def test_a_pending_write_survives_its_clients_disconnect(live: Live) -> None:
    """Issue 23: the real CLI asks to Write; client A (the owner) leaves without answering; client B connects,
    finds the request in `thread/pending` and allows it; the file is written; B and an observer each get one
    `interaction/resolved`."""
    target = live.root / "outside" / "kept.txt"
    target.parent.mkdir()
    live.api.script(reply(tool_use("Write", {"file_path": str(target), "content": "kept\n"})), text("written"))

    async def away(request: Any) -> Any:
        await trio.sleep_forever()

    async with running(live.root, {PROVIDER: live.provider}) as (_, path), connect(path) as observer:
        async with connect(path, answer=away) as a:
            ptid = (await a.request("thread/start", live.start(ASK)))["providerThreadId"]
            await a.request("turn/start", live.turn(ptid, "Write it.", ASK))
            await observer.wait_for(lambda: any(m == "interaction/opened" for m, _ in observer.notes), timeout=30)
        async with connect(path) as b:
            (pending,) = (await b.request("thread/pending", {"threadId": THREAD}))["pending"]
            assert pending["kind"] == "approval" and pending["params"]["payload"]["subject"]["kind"] == "file_change"
            allow = {"decision": "allow_once", "grantedPermissions": None}
            assert await b.request("interaction/respond", {"requestId": pending["requestId"], "result": allow}) == {
                "ok": True
            }
            await observer.wait_for(lambda: observer.settled(THREAD), timeout=30)
            await b.wait_for(lambda: any(m == "interaction/resolved" for m, _ in b.notes))
            (resolved,) = [p for m, p in b.notes if m == "interaction/resolved"]
            assert resolved["resolvedBy"] == "socket-3"  # B: the third client (observer, A, B)
        assert len([m for m, _ in observer.notes if m == "interaction/resolved"]) == 1
    assert target.read_text() == "kept\n"
    assert [e["status"] for e in observer.of(THREAD, "turn/completed")] == ["completed"]
