"""`bridges.pi` end to end: the REAL pi 0.84.0, the real bridge, the real daemon, a scripted model.

pi (`make live-agents`, skipped only when the npm registry is unreachable) runs fully offline against
`tests.live.openai_chat.ScriptedChat` on 127.0.0.1 (a custom `openai-completions` provider in pi's `models.json`,
`PI_OFFLINE=1`), spawned by `python -m bridges.pi`, spawned by a `Daemon` on a Unix socket, driven by a
`TestClient` with the request shapes of the recorded cells. Every wait is bounded; each test checks that no pi
process it started outlives its daemon.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from bbridge.wire import rpc
from tests.live import openai_chat as chat
from tests.live.pi import MODEL, PROVIDER, Pi, ensure_pi, offline_env
from tests.live.processes import Watch
from tests.live.runner import bridge_provider, conformance
from tests.live.scenarios import turn_request
from tests.support import FULL, connect, creq, running

THREAD = "thr_pi_live"
PI = "pi"
OPTIONS = {"model": f"{PROVIDER}/{MODEL}", "serviceTier": "default", "reasoningLevel": "medium",
           "instructions": "You are working inside bb.", "envVars": {}, **FULL}  # fmt: skip


def ours(argv: list[str]) -> bool:
    """A pi (it sets its process title, so its argv reads `pi`) or a pi bridge."""
    return argv[0] == "pi" or any(part.endswith("cli.js") for part in argv) or "bridges.pi" in argv


WATCH = Watch("a pi or its bridge", ours)


@pytest.fixture(scope="module")
def pi() -> Iterator[Pi]:
    with WATCH.module():
        yield ensure_pi()


@pytest.fixture
def api() -> Iterator[chat.ScriptedChat]:
    with chat.ScriptedChat() as server:
        yield server


class Live:
    """One test's world: a workspace, a HOME with pi's agent dir, the provider entry for the daemon."""

    def __init__(self, tmp_path: Path, api: chat.ScriptedChat, pi: Pi) -> None:
        self.root, self.api = tmp_path, api
        self.ws = tmp_path / "ws"
        self.ws.mkdir(exist_ok=True)
        self.home = tmp_path / "home"
        env = offline_env(api.base_url, self.home, extra={"BB_PI_NODE": str(pi.node), "BB_PI_CLI": str(pi.cli)})
        self.sessions = self.home / ".bb" / "pi-bridge-sessions"
        self.provider = bridge_provider("bridges.pi", env, self.ws)

    def start(self, thread: str = THREAD, **extra: Any) -> dict[str, Any]:
        return {"providerId": PI, "threadId": thread, "cwd": str(self.ws), "options": OPTIONS, **extra}

    def turn(self, ptid: str, words: str, n: int = 1, thread: str = THREAD) -> dict[str, Any]:
        return turn_request(PI, thread, ptid, words, OPTIONS, n)


@pytest.fixture
def live(tmp_path: Path, api: chat.ScriptedChat, pi: Pi) -> Iterator[Live]:
    with WATCH.test(tmp_path):
        yield Live(tmp_path, api, pi)


async def test_streamed_thinking_and_text_reach_the_client(live: Live) -> None:
    live.api.push(chat.text("Hello there!", thinking="Weighing a greeting."))
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        started = await client.request("thread/start", live.start())
        assert started == {"providerThreadId": THREAD, "sessionRestorable": True}
        assert await client.request("turn/start", live.turn(THREAD, "Say hello.")) == {"threadId": THREAD}
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
    types = client.types(THREAD)
    assert types[:2] == ["turn/started", "turn/input/accepted"], types
    done = {e["item"]["type"]: e["item"] for e in client.of(THREAD, "item/completed")}
    assert done["agentMessage"]["text"] == "Hello there!"
    assert done["reasoning"]["content"] == ["Weighing a greeting."]
    assert [e["status"] for e in client.of(THREAD, "turn/completed")] == ["completed"]
    (request,) = live.api.posts()
    assert "You are working inside bb." in json.dumps(request.body["messages"][0])
    assert (live.sessions / f"{THREAD}.jsonl").is_file()


def commands(client: Any) -> list[dict[str, Any]]:
    return [e["item"] for e in client.of(THREAD, "item/completed") if e["item"]["type"] == "commandExecution"]


async def test_a_command_runs_and_one_that_fails_is_failed(live: Live) -> None:
    live.api.push(chat.bash("echo one; echo two"), chat.bash("echo oops; exit 3"), chat.text("ran both"))
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        await client.request("thread/start", live.start())
        await client.request("turn/start", live.turn(THREAD, "Run them."))
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
    first, second = commands(client)
    assert (first["command"], first["status"], first["exitCode"]) == ("echo one; echo two", "completed", 0)
    assert first["aggregatedOutput"] == "one\ntwo\n"
    assert (second["status"], second["exitCode"]) == ("failed", 1)  # pi reports isError, not the exit status
    assert "Command exited with code 3" in second["aggregatedOutput"]
    assert client.text(THREAD) == "ran both"
    assert [e["status"] for e in client.of(THREAD, "turn/completed")] == ["completed"]


async def test_write_then_edit_are_file_changes(live: Live) -> None:
    edit = {"path": "notes.txt", "edits": [{"oldText": "alpha", "newText": "beta"}]}
    live.api.push(
        chat.tool_call("write", {"path": "notes.txt", "content": "alpha\n"}),
        chat.tool_call("edit", edit),
        chat.text("edited"),
    )
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        await client.request("thread/start", live.start())
        await client.request("turn/start", live.turn(THREAD, "Write, then edit."))
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
    changes = [e["item"] for e in client.of(THREAD, "item/completed") if e["item"]["type"] == "fileChange"]
    assert [c["status"] for c in changes] == ["completed", "completed"]
    assert [ch["path"] for c in changes for ch in c["changes"]] == ["notes.txt", "notes.txt"]
    assert (live.ws / "notes.txt").read_text() == "beta\n"


async def test_an_interrupt_during_a_tool_settles_interrupted(live: Live) -> None:
    live.api.push(chat.bash("echo start; sleep 30"))
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        await client.request("thread/start", live.start())
        await client.request("turn/start", live.turn(THREAD, "Sleep."))
        await client.wait_for(lambda: bool(client.of(THREAD, "item/started")), timeout=30)
        stop = {"providerId": PI, "threadId": THREAD, "providerThreadId": THREAD, "intent": "interrupt",
                "activeTurnId": client.of(THREAD, "turn/started")[0]["scope"]["turnId"]}  # fmt: skip
        with trio.fail_after(10):
            result = await client.request("thread/stop", stop)
        assert result["ok"] is True and isinstance(result["providerCheckpointId"], str)
        await client.wait_for(lambda: client.settled(THREAD), timeout=10)
    assert [e["status"] for e in client.of(THREAD, "turn/completed")] == ["interrupted"]


async def test_a_steer_joins_the_running_turn(live: Live) -> None:
    live.api.push(chat.bash("sleep 1"), chat.text("steered"))
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        await client.request("thread/start", live.start())
        await client.request("turn/start", live.turn(THREAD, "Sleep a second."))
        await client.wait_for(lambda: bool(client.of(THREAD, "item/started")), timeout=30)
        turn_id = client.of(THREAD, "turn/started")[0]["scope"]["turnId"]
        steer = {**live.turn(THREAD, "Then say steered.", n=2), "expectedTurnId": turn_id}
        assert await client.request("turn/steer", steer) == {"threadId": THREAD}
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
    assert [e["clientRequestId"] for e in client.of(THREAD, "turn/input/accepted")] == [creq(1), creq(2)]
    assert len(client.of(THREAD, "turn/started")) == 1  # one turn: the steer joined it
    assert client.text(THREAD) == "steered"
    assert "Then say steered." in json.dumps(live.api.posts()[1].body["messages"])


async def test_a_401_fails_the_turn_legibly_without_retry(live: Live) -> None:
    live.api.push(chat.http_error(401))
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        await client.request("thread/start", live.start())
        await client.request("turn/start", live.turn(THREAD, "Hi."))
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
    (done,) = client.of(THREAD, "turn/completed")
    assert done["status"] == "failed"
    (error,) = client.of(THREAD, "provider/error")
    assert error["detail"].startswith("401: ") and "Incorrect API key" in error["detail"]
    assert len(live.api.posts()) == 1


async def test_a_500_is_retried_then_fails_legibly(live: Live) -> None:
    live.api.push(chat.http_error(500), chat.http_error(500), chat.http_error(500))
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        await client.request("thread/start", live.start())
        await client.request("turn/start", live.turn(THREAD, "Hi."))
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
    assert len(live.api.posts()) == 3  # pi's own retries (maxRetries 2)
    retrying = [e for e in client.of(THREAD, "provider/error") if e.get("willRetry")]
    assert len(retrying) == 2 and all("500" in json.dumps(e) for e in retrying)
    (done,) = client.of(THREAD, "turn/completed")
    assert done["status"] == "failed"
    (final,) = [e for e in client.of(THREAD, "provider/error") if not e.get("willRetry")]
    assert final["message"] == "Provider error" and "server had an error" in final["detail"]


async def test_resume_in_a_new_bridge_process_keeps_the_history(live: Live) -> None:
    live.api.push(chat.text("first answer"), chat.text("second answer"))
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        await client.request("thread/start", live.start())
        await client.request("turn/start", live.turn(THREAD, "Remember 42."))
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
        stop = {"providerId": PI, "threadId": THREAD, "providerThreadId": THREAD, "intent": "release", "activeTurnId": None}  # fmt: skip
        released = await client.request("thread/stop", stop)
        boundary = client.of(THREAD, "turn/completed")[0]
    assert released["providerCheckpointId"]
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        resumed = await client.request("thread/resume", {**live.start(), "providerThreadId": THREAD})
        assert resumed == {"providerThreadId": THREAD, "sessionRestorable": True}
        await client.request("turn/start", live.turn(THREAD, "What was it?", n=2))
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
    assert boundary["status"] == "completed"
    history = json.dumps(live.api.posts()[1].body["messages"])
    assert "Remember 42." in history and "first answer" in history


async def test_a_fork_copies_the_history_into_the_new_thread(live: Live) -> None:
    live.api.push(chat.text("the source answer"), chat.text("the fork answer"))
    fork_thread = "thr_pi_fork"
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        await client.request("thread/start", live.start())
        await client.request("turn/start", live.turn(THREAD, "Source question."))
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
        fork = {**live.start(fork_thread), "sourceProviderThreadId": THREAD}
        assert await client.request("thread/fork", fork) == {"providerThreadId": fork_thread, "sessionRestorable": True}
        await client.request("turn/start", live.turn(fork_thread, "Fork question.", n=2, thread=fork_thread))
        await client.wait_for(lambda: client.settled(fork_thread), timeout=30)
    history = json.dumps(live.api.posts()[1].body["messages"])
    assert "Source question." in history and "the source answer" in history and "Fork question." in history
    assert (live.sessions / f"{fork_thread}.jsonl").is_file()
    assert client.text(fork_thread) == "the fork answer"


COMPACT = {"kind": "command", "trigger": "/", "name": "compact", "source": "command", "origin": "builtin",
           "label": "Compact", "argumentHint": None}  # fmt: skip


async def test_compact_of_a_tiny_session_is_skipped_and_settles(live: Live) -> None:
    live.api.push(chat.text("short"))
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        await client.request("thread/start", live.start())
        await client.request("turn/start", live.turn(THREAD, "Hi."))
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
        compact = live.turn(THREAD, "/compact", n=2)
        compact["input"][0]["mentions"] = [{"start": 0, "end": 8, "resource": COMPACT}]
        assert await client.request("turn/start", compact) == {"threadId": THREAD}
        await client.wait_for(lambda: client.settled(THREAD, 2), timeout=30)
    (warning,) = client.of(THREAD, "provider/warning")
    assert warning["summary"] == "Context compaction skipped" and "Nothing to compact" in warning["details"]
    assert [e["status"] for e in client.of(THREAD, "turn/completed")] == ["completed", "completed"]
    assert len(live.api.posts()) == 1


async def test_model_list_comes_from_pi(live: Live) -> None:
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        listed = await client.request("model/list", {"providerId": PI, "cwd": str(live.ws)})
    (model,) = listed["models"]
    assert model["id"] == f"{PROVIDER}/{MODEL}" and model["isDefault"] is True
    assert model["description"] == "Scripted reasoning model via Pi"
    assert [e["reasoningEffort"] for e in model["supportedReasoningEfforts"]] == ["none", "low", "medium", "high"]
    assert listed["selectedOnlyModels"] == []


LOOKUP = {
    "name": "lookup",
    "description": "Looks a word up",
    "inputSchema": {"type": "object", "properties": {"q": {"type": "string", "minLength": 2}}, "required": ["q"]},
}
QUESTION_TOOL = {
    "name": "AskUserQuestion",
    "description": "Ask the user a question",
    "inputSchema": {"type": "object", "properties": {"questions": {"type": "array", "items": {"type": "object"}}}},
}


def answering(request: Any) -> Any:
    """The client: answers every relayed `item/tool/call` with what it was asked."""
    params = json.loads(bytes(request.params))
    if params["tool"] == "AskUserQuestion":
        answer = {"questions": params["arguments"]["questions"], "answers": {"Tabs or spaces?": "spaces"}}
        return {"success": True, "contentItems": [{"type": "inputText", "text": json.dumps(answer)}]}
    return {"success": True, "contentItems": [{"type": "inputText", "text": f"{params['arguments']['q']} = 42"}]}


async def test_a_client_tool_is_called_once_validly_and_once_invalidly(live: Live) -> None:
    live.api.push(
        chat.tool_call("lookup", {"q": "answer"}),
        chat.tool_call("lookup", {"q": "x"}),  # minLength 2: pi's schema drops it, the daemon does not
        chat.text("done looking"),
    )
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path, answer=answering) as client:
        await client.request("thread/start", live.start(dynamicTools=[LOOKUP]))
        await client.request("turn/start", live.turn(THREAD, "Look it up."))
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
    (call,) = client.requests  # exactly one call reached the client: the invalid one was refused by the daemon
    assert call.method == "item/tool/call" and json.loads(bytes(call.params))["arguments"] == {"q": "answer"}
    first, second = live.api.posts()[1:]
    results = [m for m in second.body["messages"] if m.get("role") == "tool"]
    assert "answer = 42" in json.dumps(first.body["messages"][-1])
    assert "arguments are invalid" in json.dumps(results[-1]) and "/q" in json.dumps(results[-1])
    tools = [e["item"] for e in client.of(THREAD, "item/completed") if e["item"]["type"] == "toolCall"]
    assert [t["status"] for t in tools] == ["completed", "failed"]
    assert [e["status"] for e in client.of(THREAD, "turn/completed")] == ["completed"]


async def test_a_user_question_is_answered_by_the_client(live: Live) -> None:
    questions = [
        {"question": "Tabs or spaces?", "header": "Indent", "options": [{"label": "tabs"}, {"label": "spaces"}]}
    ]
    live.api.push(chat.tool_call("AskUserQuestion", {"questions": questions}), chat.text("spaces it is"))
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path, answer=answering) as client:
        await client.request("thread/start", live.start(dynamicTools=[QUESTION_TOOL]))
        await client.request("turn/start", live.turn(THREAD, "Ask me."))
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
    (call,) = client.requests
    params = json.loads(bytes(call.params))
    assert (params["tool"], params["turnId"], params["callId"]) == ("AskUserQuestion", None, "call-1")
    (result,) = [m for m in live.api.posts()[1].body["messages"] if m.get("role") == "tool"]
    assert json.loads(result["content"])["answers"] == {"Tabs or spaces?": "spaces"}  # the model read the answer
    assert client.text(THREAD) == "spaces it is"


def test_conformance_with_the_real_pi(tmp_path: Path, api: chat.ScriptedChat, pi: Pi) -> None:
    """`bbridge conformance` over the bridge and the real pi: every rule passes. The fixture is the default one
    with skills declared (the bridge serves `skills/configure`, [M17]) and a known cwd; the interrupt prompt gets
    a slow answer so the turn still runs when the stop is sent. Conformance strips inherited `BB_*` variables:
    the bridge finds pi and node in the `make live-agents` cache."""
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()

    def answer(request: chat.Request) -> chat.Reply:
        slow = "hold Write" in json.dumps(request.body.get("messages"))
        return chat.text(" ".join(f"word{i}" for i in range(400)), delay=0.05) if slow else chat.text("ok")

    api.default = answer
    env = offline_env(api.base_url, home)
    with WATCH.test(tmp_path, "the conformance run"):
        result = conformance("bridges.pi", tmp_path, ws, env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.splitlines()[-1] == "20 passed, 0 failed", result.stdout
        assert "PASS turn/interrupt-settles-before-response" in result.stdout


async def test_a_provider_without_credentials_is_a_legible_failure(live: Live) -> None:
    """A model whose provider pi has no key for (a failed login): pi refuses the prompt (after the transient-auth
    retries, [S7]); `turn/start` fails with pi's words, and the thread sees the error."""
    options = {**OPTIONS, "model": "anthropic/claude-opus-4-8"}
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        await client.request("thread/start", {**live.start(), "options": options})
        with pytest.raises(rpc.RpcError) as refused:
            await client.request("turn/start", {**live.turn(THREAD, "Hi."), "options": options})
        assert refused.value.message.startswith("No API key found for anthropic")
        await client.wait_for(lambda: bool(client.of(THREAD, "provider/error")), timeout=10)
    assert live.api.posts() == []
    # pi's advice kept word for word, and how to follow it through bbridge after it (issue 31, item 2)
    (error,) = client.of(THREAD, "provider/error")
    for text in (refused.value.message, error["detail"]):
        advice, bbridge_way = text.split("\n\nThrough bbridge ")
        assert "Use /login to log into a provider via OAuth or API key." in advice
        assert "run `pi`, then /login" in bbridge_way and "$PI_CODING_AGENT_DIR, default ~/.pi/agent" in bbridge_way
        assert 'env_passthrough = ["ANTHROPIC_API_KEY"]' in bbridge_way


def pi_estimate(message: dict[str, Any]) -> int:
    """pi's `estimateTokens` for a tool result's text (⌈UTF-16 units / 4⌉), to check the usage independently."""
    units = sum(len(b["text"].encode("utf-16-le")) // 2 for b in message["content"] if b.get("type") == "text")
    return -(-units // 4)


async def test_context_usage_after_a_tool_does_not_count_a_steer_sent_during_it(live: Live) -> None:
    """The reference reads pi's context usage in-process at `turn_end`, before pi takes the queued steer in: the
    usage after the tool's turn is the tool call's usage plus its result, not the steer (issue 31, item 13)."""
    live.api.push(chat.bash("sleep 1"), chat.text("steered"))
    steer_text = "Then, once the sleep is over, say the single word steered and nothing else at all."
    async with running(live.root, {PI: live.provider}) as (_, path), connect(path) as client:
        await client.request("thread/start", live.start())
        await client.request("turn/start", live.turn(THREAD, "Sleep a second."))
        await client.wait_for(lambda: bool(client.of(THREAD, "item/started")), timeout=30)
        turn_id = client.of(THREAD, "turn/started")[0]["scope"]["turnId"]
        steer = {**live.turn(THREAD, steer_text, n=2), "expectedTurnId": turn_id}
        assert await client.request("turn/steer", steer) == {"threadId": THREAD}
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
    assert len(client.of(THREAD, "turn/started")) == 1 and client.text(THREAD) == "steered"
    entries = [json.loads(line) for line in (live.sessions / f"{THREAD}.jsonl").read_text().splitlines()]
    messages = [e["message"] for e in entries if e.get("type") == "message"]
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "toolResult", "user", "assistant"], roles
    call, result, steered = messages[1], messages[2], messages[3]
    before_steer = call["usage"]["totalTokens"] + pi_estimate(result)
    used = [e["contextWindowUsage"]["usedTokens"] for e in client.of(THREAD, "thread/contextWindowUsage/updated")]
    assert used[0] == before_steer, (used, before_steer, pi_estimate(steered))
    assert used[-1] == messages[4]["usage"]["totalTokens"]
