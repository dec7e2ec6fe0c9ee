"""`bridges.claude_code` end to end against a scripted fake `claude` (spec §1–§3, §5, §6).

The fake CLI is a small Python script written per test: it answers `initialize`, and for each user line plays a
script keyed by the prompt (plain text, an approval round trip, a long stream the test interrupts). The bridge
runs in-process with a runtime on its stdio that assembles what it emits and answers interaction requests.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog.testing
import trio
import trio.testing
from msgspec import UNSET

from bbridge.core import grammar as g
from bbridge.wire import protocol, rpc
from bridges.claude_code import fork, launch
from bridges.claude_code.bridge import ClaudeCodeBridge, prompt_text
from tests.support import ASK, FULL, INIT, Runtime, capabilities, spawned, turn_params

THREAD = "thr_claude"
SESSION = "11111111-2222-3333-4444-555555555555"
FAKE_CLI = r"""
import json, sys, time

SESSION = "11111111-2222-3333-4444-555555555555"
SCRIPTED = ("touch", "tool", "agent", "cancel", "login", "essay", "crash", "plan", "plan-refused")
MODE_REQUESTS = []  # set_permission_mode requests held unanswered until the plan's allow is in (issue 21)


def out(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer():
    return json.loads(sys.stdin.readline())


def assistant(content, uuid):
    out({"type": "assistant", "message": {"role": "assistant", "content": content, "usage": {"input_tokens": 3}},
         "parent_tool_use_id": None, "session_id": SESSION, "uuid": uuid})


def result():
    out({"type": "result", "subtype": "success", "is_error": False, "session_id": SESSION,
         "usage": {"input_tokens": 3, "output_tokens": 2}, "modelUsage": {"m": {"contextWindow": 200000}}})


def control_answer(request_id, error=None):
    body = {"subtype": "error", "request_id": request_id, "error": error} if error else {"subtype": "success", "request_id": request_id, "response": {}}
    out({"type": "control_response", "response": body})


def permission(request_id, tool, tool_input, tool_use_id):
    # A `can_use_tool` round trip; the mode changes written meanwhile are held, answered only after the decision.
    out({"type": "control_request", "request_id": request_id, "request": {"subtype": "can_use_tool", "tool_name": tool, "input": tool_input, "blocked_path": "/home/x", "tool_use_id": tool_use_id}})
    while True:
        reply = answer()
        if reply.get("type") == "control_request" and reply["request"]["subtype"] == "set_permission_mode":
            MODE_REQUESTS.append(reply)
            continue
        return reply["response"]["response"]


for line in sys.stdin:
    message = json.loads(line)
    if message.get("type") == "control_request" and message["request"]["subtype"] in ("initialize", "set_permission_mode"):
        control_answer(message["request_id"])
        continue
    if message.get("type") != "user":
        continue
    prompt = message["message"]["content"]
    out({"type": "system", "subtype": "init", "session_id": SESSION})
    if prompt not in SCRIPTED:  # any other prompt: a plain answer
        out({"type": "stream_event", "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}, "session_id": SESSION})
        assistant([{"type": "text", "text": "Hi there"}], "a-1")
        result()
    elif prompt == "touch":
        assistant([{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "touch ~/x"}}], "a-2")
        out({"type": "control_request", "request_id": "hook-1", "request": {"subtype": "hook_callback", "callback_id": "hook_4", "input": {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "toolu_1"}, "tool_use_id": "toolu_1"}})
        hook = answer()
        out({"type": "control_request", "request_id": "perm-1", "request": {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "touch ~/x"}, "blocked_path": "/home/x", "tool_use_id": "toolu_1"}})
        decision = answer()
        body = decision["response"]["response"]
        out({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": body.get("message", "done"), "is_error": body["behavior"] == "deny"}]}, "session_id": SESSION, "hook": hook["response"]["response"]})
        result()
    elif prompt in ("tool", "agent", "cancel"):
        if prompt == "tool":
            request = {"subtype": "mcp_message", "server_name": "bb-bridge", "message": {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": {"x": 1}}}}
        elif prompt == "agent":
            request = {"subtype": "hook_callback", "callback_id": "hook_4", "input": {"hook_event_name": "PreToolUse", "tool_name": "Agent", "tool_use_id": "toolu_a"}}
        else:
            request = {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "rm x"}, "decision_reason": "why", "tool_use_id": "toolu_c"}
        out({"type": "control_request", "request_id": "req-1", "request": request})
        if prompt == "cancel":
            time.sleep(0.2)  # the bridge is waiting on the runtime by now
            out({"type": "control_cancel_request", "request_id": "req-1"})
        reply = answer()
        assistant([{"type": "text", "text": json.dumps(reply["response"]["response"])}], "a-4")
        result()
    elif prompt == "login":
        out({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "Not logged in"}]}, "session_id": SESSION, "uuid": "a-3", "error": "authentication_failed"})
        out({"type": "result", "subtype": "success", "is_error": True, "result": "Not logged in", "session_id": SESSION})
    elif prompt == "essay":
        for _ in range(3):
            out({"type": "stream_event", "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "word "}}, "session_id": SESSION})
    elif prompt in ("plan", "plan-refused"):
        plan = {"plan": "# Plan\n1. touch x"}
        assistant([{"type": "tool_use", "id": "toolu_p", "name": "ExitPlanMode", "input": plan}], "a-5")
        decision = permission("perm-p", "ExitPlanMode", plan, "toolu_p")
        for held in MODE_REQUESTS:  # the mode change is answered only now, after the allow
            control_answer(held["request_id"], "mode change refused" if prompt == "plan-refused" else None)
        modes = [held["request"]["mode"] for held in MODE_REQUESTS]
        MODE_REQUESTS.clear()
        out({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_p", "content": "ok"}]}, "session_id": SESSION})
        assistant([{"type": "tool_use", "id": "toolu_b", "name": "Bash", "input": {"command": "touch ~/x"}}], "a-6")
        bash = permission("perm-b", "Bash", {"command": "touch ~/x"}, "toolu_b")
        out({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_b", "content": bash.get("message", "done"), "is_error": bash["behavior"] == "deny"}]}, "session_id": SESSION})
        assistant([{"type": "text", "text": json.dumps([decision["behavior"], modes])}], "a-7")
        result()
    elif prompt == "crash":
        out({"type": "stream_event", "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "so"}}, "session_id": SESSION})
        sys.stderr.write("boom\n")
        sys.exit(3)
"""


@pytest.fixture
def fake_cli(tmp_path: Path) -> Path:
    path = tmp_path / "claude"
    path.write_text(f"#!{sys.executable}\n{FAKE_CLI}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


class _Runtime(Runtime):
    """The test runtime, answering the bridge's `interaction/request`s with a scripted resolution."""

    def __init__(self, send: trio.abc.SendStream, receive: trio.abc.ReceiveStream) -> None:
        super().__init__(send, receive)
        self.resolution: Any = {"decision": "deny"}
        self.resolutions: list[Any] = []  # answered first, in order; then `resolution`
        self.delay = 0.0
        self.requests: list[tuple[str, Any]] = []
        self.conn = rpc.Connection(
            send, receive, name="runtime", on_request=self._on_request, on_notifications=self._on_notes
        )

    async def _on_request(self, request: rpc.Request) -> Any:
        self.requests.append((request.method, msgspec.json.decode(request.params or b"null")))
        await trio.sleep(self.delay)
        return self.resolutions.pop(0) if self.resolutions else self.resolution


@asynccontextmanager
async def running(env: dict[str, str]) -> AsyncIterator[_Runtime]:
    bridge = ClaudeCodeBridge(env).bridge
    ours, theirs = trio.testing.memory_stream_pair()
    runtime = _Runtime(ours.send_stream, ours.receive_stream)
    with trio.fail_after(30):  # a stuck bridge fails the test instead of hanging it
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bridge.serve, theirs.send_stream, theirs.receive_stream)
            nursery.start_soon(runtime.conn.run)
            await runtime.call("initialize", INIT)
            yield runtime
            runtime.check()
            nursery.cancel_scope.cancel()


def env_for(fake_cli: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(fake_cli.parent), launch.EXECUTABLE_ENV: str(fake_cli)}


def start(cwd: Path, options: dict[str, Any] = FULL) -> dict[str, Any]:
    return {"threadId": THREAD, "cwd": str(cwd), "options": options}


def turn(text: str, creq: str = "creq_2222222223", options: dict[str, Any] = FULL) -> dict[str, Any]:
    return turn_params(THREAD, SESSION, text, creq, options)


async def test_handshake_capabilities(fake_cli: Path) -> None:
    async with running(env_for(fake_cli)) as runtime:
        answer = next(result for what, name, result in runtime.log if name == "initialize")
        caps = capabilities(sessionRestore=True, fork="checkpoint", approvalEnforcedBy="provider", steerMode="inject")
        assert answer == {"protocolVersion": 2, "capabilities": caps}


async def test_refusals_use_the_reference_wording_and_log_one_prefixed_line() -> None:
    """§3.0/§1.1: `Unknown method: <m>` and `Invalid params for <m>: params.<path>: <message>` without `data`, each
    also a `claude-code bridge: ` line on stderr (the kit's default wording would say `Method not found`)."""
    async with spawned([sys.executable, "-m", "bridges.claude_code"]) as child:
        err = await child.runtime.error("thread/name/set", {"threadId": THREAD, "name": "x"})
        assert (err.code, err.message, err.data) == (rpc.METHOD_NOT_FOUND, "Unknown method: thread/name/set", None)
        stop = {"threadId": THREAD, "providerThreadId": SESSION, "intent": "pause", "activeTurnId": None}
        err = await child.runtime.error("thread/stop", stop)
        invalid = "Invalid params for thread/stop: params.intent: Invalid enum value 'pause'"
        assert (err.code, err.message, err.data) == (rpc.INVALID_PARAMS, invalid, None)
        assert await child.finish() == 0
    lines = child.stderr.decode().splitlines()
    assert "claude-code bridge: Unknown method: thread/name/set" in lines
    assert f"claude-code bridge: {invalid}" in lines


async def test_a_turn_adopts_the_cli_session_and_settles(fake_cli: Path) -> None:
    async with running(env_for(fake_cli)) as runtime:
        started = await runtime.call("thread/start", start(fake_cli.parent))
        minted = started["providerThreadId"]
        assert started == {"providerThreadId": minted, "sessionRestorable": True}
        assert runtime.methods()[-3:] == ["note:thread/identity", "note:thread/delta", "answer:thread/start"]
        assert await runtime.call("turn/start", turn("hello")) == {"threadId": THREAD}
        await runtime.wait_until(lambda: "turn/completed" in runtime.types(THREAD))
        identities = [n["providerThreadId"] for n in runtime.notes("thread/identity")]
        assert identities == [minted, SESSION]
        assert runtime.kinds(THREAD)[:2] == ["session.reset", "input.accepted"]
        messages = [e for e in runtime.events[THREAD] if e["type"] == "item/completed"]
        assert messages[-1]["item"]["text"] == "Hi there"
        assert await runtime.call(
            "thread/stop", {"threadId": THREAD, "providerThreadId": SESSION, "intent": "release", "activeTurnId": None}
        ) == {"ok": True}


async def test_an_approval_is_asked_and_its_denial_answers_the_cli(fake_cli: Path) -> None:
    async with running(env_for(fake_cli)) as runtime:
        await runtime.call("thread/start", start(fake_cli.parent, ASK))
        await runtime.call("turn/start", turn("touch", options=ASK))
        await runtime.wait_until(lambda: "turn/completed" in runtime.types(THREAD))
        ((method, params),) = runtime.requests
        assert method == "interaction/request"
        assert params["payload"]["subject"]["kind"] == "command" and params["providerNativeIds"] is True
        closes = [d for d in runtime.deltas[THREAD] if isinstance(d, g.ItemClose)]
        assert closes[0].status == "failed" and closes[0].aggregatedOutput == "Permission request denied"


PLAN = {**ASK, "providerOptions": {"claudeCodePermissionMode": "plan"}}


@pytest.mark.parametrize("prompt", ["plan", "plan-refused"])
async def test_a_plan_approval_is_answered_before_the_mode_change_is(fake_cli: Path, prompt: str) -> None:
    """Issue 21: leaving Plan mode is fire-and-forget; a CLI answering it only after the allow still completes."""
    with structlog.testing.capture_logs() as logs:
        await plan_turn(fake_cli, prompt)
    refused = [e["event"] for e in logs if "Plan mode" in e["event"]]
    assert refused == (["Failed to leave Plan mode: mode change refused"] if prompt == "plan-refused" else [])


async def plan_turn(fake_cli: Path, prompt: str) -> None:
    async with running(env_for(fake_cli)) as runtime:
        await runtime.call("thread/start", start(fake_cli.parent, ASK))
        runtime.resolutions = [{"decision": "allow_once"}]  # the plan; the later Bash is denied
        await runtime.call("turn/start", turn(prompt, options=PLAN))
        await runtime.wait_until(lambda: "turn/completed" in runtime.types(THREAD))
        subjects = [params["payload"]["subject"]["kind"] for _, params in runtime.requests]
        assert subjects == ["plan", "command"]
        closes = [d for d in runtime.deltas[THREAD] if isinstance(d, g.ItemClose)]
        outputs = [c.aggregatedOutput for c in closes if c.aggregatedOutput is not UNSET]
        assert outputs == ["Permission request denied"]
        texts = [
            e["item"]["text"] for e in runtime.events[THREAD] if e["type"] == "item/completed" and "text" in e["item"]
        ]
        assert json.loads(texts[-1]) == ["allow", ["acceptEdits"]]  # the allow, then the restored mode, both in


async def test_interrupt_settles_the_turn_and_drops_later_output(fake_cli: Path) -> None:
    async with running(env_for(fake_cli)) as runtime:
        await runtime.call("thread/start", start(fake_cli.parent))
        await runtime.call("turn/start", turn("essay"))
        await runtime.wait_until(lambda: runtime.kinds(THREAD).count("item.textDelta") == 3)
        stop = {"threadId": THREAD, "providerThreadId": SESSION, "intent": "interrupt", "activeTurnId": None}
        assert await runtime.call("thread/stop", stop) == {"ok": True}
        assert runtime.kinds(THREAD)[-1] == "session.ended"
        assert (await runtime.error("turn/start", turn("hello"))).message == "No active session"


async def test_a_crashed_child_fails_the_turn_and_reports_the_error(fake_cli: Path) -> None:
    async with running(env_for(fake_cli)) as runtime:
        await runtime.call("thread/start", start(fake_cli.parent))
        await runtime.call("turn/start", turn("crash"))
        await runtime.wait_until(lambda: bool(runtime.notes("error")))
        (error,) = runtime.notes("error")
        assert error["message"] == "Claude Code process exited with code 3\n\nClaude Code stderr:\nboom"
        assert runtime.kinds(THREAD)[-1] == "provider.error"


async def test_a_missing_cli_fails_the_construction(tmp_path: Path) -> None:
    async with running({"PATH": str(tmp_path), "HOME": ""}) as runtime:
        error = await runtime.error("thread/start", start(tmp_path))
        assert (error.code, error.message) == (rpc.BRIDGE_ERROR, launch.MISSING_CLI)
        assert runtime.notes("thread/identity") == []


async def test_model_list_probes_the_cli(fake_cli: Path) -> None:
    async with running(env_for(fake_cli)) as runtime:
        result = await runtime.call("model/list", {})
        assert [m["model"] for m in result["models"] if m["isDefault"]] == ["claude-opus-5[1m]"]


async def test_fork_copies_the_transcript_and_resumes_it(fake_cli: Path, tmp_path: Path) -> None:
    env = {**env_for(fake_cli), "CLAUDE_CONFIG_DIR": str(tmp_path / "config")}
    project = tmp_path / "config" / "projects" / fork.sanitize(os.path.realpath(tmp_path))
    project.mkdir(parents=True)
    seeded = [{"type": "user", "uuid": SESSION, "message": {"role": "user", "content": "hi"}}]
    (project / f"{SESSION}.jsonl").write_text(json.dumps(seeded[0]) + "\n")
    async with running(env) as runtime:
        params = {**start(tmp_path), "sourceProviderThreadId": SESSION}
        forked = (await runtime.call("thread/fork", params))["providerThreadId"]
        assert (project / f"{forked}.jsonl").exists()
        assert [n["providerThreadId"] for n in runtime.notes("thread/identity")] == [forked]
        missing = await runtime.error("thread/fork", {**params, "sourceProviderThreadId": "c" * 8 + SESSION[8:]})
        assert missing.message.startswith("Session cccccccc-")


async def test_resume_keeps_a_live_unchanged_session(fake_cli: Path) -> None:
    async with running(env_for(fake_cli)) as runtime:
        await runtime.call("thread/start", start(fake_cli.parent))
        await runtime.call("turn/start", turn("hello"))
        await runtime.wait_until(lambda: "turn/completed" in runtime.types(THREAD))
        identities = len(runtime.notes("thread/identity"))
        resumed = await runtime.call("thread/resume", {**start(fake_cli.parent), "providerThreadId": SESSION})
        assert resumed == {"providerThreadId": SESSION, "sessionRestorable": True}
        assert len(runtime.notes("thread/identity")) == identities
        changed = {**start(fake_cli.parent), "providerThreadId": SESSION, "instructionMode": "replace"}
        await runtime.call("thread/resume", changed)
        (replaced,) = runtime.notes("session/replaced")
        assert replaced["reason"] == "Claude session restarted: construction-scoped settings changed"
        assert runtime.notes("thread/identity")[-1]["providerThreadId"] == SESSION


async def test_an_auth_failure_replaces_the_session_before_the_next_turn(fake_cli: Path) -> None:
    async with running(env_for(fake_cli)) as runtime:
        await runtime.call("thread/start", start(fake_cli.parent))
        await runtime.call("turn/start", turn("login"))
        await runtime.wait_until(lambda: "turn/completed" in runtime.types(THREAD))
        await runtime.call("turn/start", turn("hello", "creq_2222222224"))
        (replaced,) = runtime.notes("session/replaced")
        assert replaced == {
            "threadId": THREAD,
            "providerThreadId": SESSION,
            "reason": "Claude session restarted after authentication failed",
            "contextLost": False,
        }
        await runtime.wait_until(lambda: runtime.types(THREAD).count("turn/completed") == 2)


async def run_turn(runtime: _Runtime, text: str) -> Any:
    """One turn whose agent message is the fake CLI's echo of the bridge's control answer."""
    await runtime.call("turn/start", turn(text))
    await runtime.wait_until(lambda: "turn/completed" in runtime.types(THREAD))
    message = [e for e in runtime.events[THREAD] if e["type"] == "item/completed"][-1]
    return json.loads(message["item"]["text"])


async def test_a_dynamic_tool_runs_in_the_runtime(fake_cli: Path) -> None:
    async with running(env_for(fake_cli)) as runtime:
        tool = {"name": "echo", "description": "Echo", "inputSchema": {"type": "object"}}
        await runtime.call("thread/start", {**start(fake_cli.parent), "dynamicTools": [tool]})
        runtime.resolution = {"success": True, "contentItems": [{"type": "inputText", "text": "echoed"}]}
        reply = await run_turn(runtime, "tool")
        assert reply == {
            "mcp_response": {"result": {"content": [{"type": "text", "text": "echoed"}]}, "jsonrpc": "2.0", "id": 7}
        }
        ((method, params),) = runtime.requests
        assert method == "item/tool/call"
        assert params == {
            "threadId": THREAD,
            "providerThreadId": SESSION,
            "turnId": None,
            "callId": "call-1",
            "tool": "echo",
            "arguments": {"x": 1},
        }


async def test_disabled_subagents_are_denied_by_the_hook(fake_cli: Path) -> None:
    async with running(env_for(fake_cli)) as runtime:
        options = {**FULL, "providerOptions": {"providerSubagentsEnabled": False}}
        await runtime.call("thread/start", start(fake_cli.parent, options))
        reply = await run_turn(runtime, "agent")
        assert (
            reply["hookSpecificOutput"]["permissionDecisionReason"]
            == "bb has disabled Claude Code native subagents; use bb delegation instead."
        )


async def test_a_cancelled_permission_request_is_denied(fake_cli: Path) -> None:
    async with running(env_for(fake_cli)) as runtime:
        await runtime.call("thread/start", start(fake_cli.parent, ASK))
        runtime.delay = 2.0  # the user never answers in time
        reply = await run_turn(runtime, "cancel")
        assert reply == {"behavior": "deny", "message": "Interactive request cancelled", "toolUseID": "toolu_c"}


def test_the_fake_cli_is_valid_python() -> None:
    compile(FAKE_CLI, "fake_cli", "exec")
    assert json.loads(json.dumps(FULL)) == FULL


def test_prompt_text_joins_items_and_drops_plan_mentions() -> None:
    plan = {
        "trigger": "/",
        "name": "plan",
        "source": "command",
        "origin": "builtin",
        "label": "Plan",
        "argumentHint": None,
    }
    items = msgspec.convert(
        [
            {
                "type": "text",
                "text": "é /plan fix it",
                "mentions": [{"start": 2, "end": 7, "resource": {"kind": "command", **plan}}],
            },
            {"type": "image", "url": "https://x/i.png"},
            {"type": "localFile", "path": "/w/a.pdf", "name": "a.pdf", "mimeType": "application/pdf", "sizeBytes": 3},
            {"type": "localFile", "path": "/w/b"},
        ],
        list[protocol.PromptInput],
    )
    assert prompt_text(items, plan=True).split("\n") == [
        "é fix it",
        "[Attached image: https://x/i.png]",
        '[Attached file "a.pdf" (application/pdf, 3 bytes). It is on disk at /w/a.pdf — use the Read tool to view it.]',
        "[Attached file. It is on disk at /w/b — use the Read tool to view it.]",
    ]
    assert prompt_text(items[:1]) == "é /plan fix it"
