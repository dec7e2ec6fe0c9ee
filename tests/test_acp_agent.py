"""`bbridge acp` driven by an editor: the ACP Python SDK's client (`tests/acp_editor.py`, run under the SDK's venv
in `.cache/acp`) launches it on the echo bridge, with its own daemon or a running one's socket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from bbridge.client import Client
from bbridge.daemon.config import echo_provider
from bbridge.telemetry import tracer as build_tracer
from bbridge.telemetry.settings import load_telemetry
from tests.conftest import REPO
from tests.listen_support import TOKEN, listening
from tests.otlp import otlp_receiver
from tests.support import running
from tests.test_tracing import CLIENT_SPAN, CLIENT_TRACE, one

AGENT_PY = REPO / ".cache" / "acp" / "venv" / "bin" / "python"
EDITOR = REPO / "tests" / "acp_editor.py"
BBRIDGE_ACP = [sys.executable, "-m", "bbridge", "acp"]
RUN_S = 90
FULL_OPTIONS = {"permissionMode": "full", "permissionScope": "full", "approvalReviewer": None,
                "permissionEscalation": None, "envVars": {}}  # fmt: skip


@pytest.fixture(autouse=True)
def sdk() -> None:
    if not AGENT_PY.exists():
        pytest.skip("the ACP Python SDK's venv is not installed (make acp-agents installs it into .cache/acp)")


def editor(scenario: str, cwd: Path, *acp_args: str, session: str | None = None) -> dict[str, Any]:
    """One editor run to its end: its report."""
    head = [scenario, str(cwd), *([session] if session else [])]
    done = subprocess.run(
        [str(AGENT_PY), str(EDITOR), *head, "--", *BBRIDGE_ACP, *acp_args],
        capture_output=True, text=True, timeout=RUN_S, cwd=cwd, env=clean_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("BB_")}


def kinds(report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [u for u in report["updates"] if u["sessionUpdate"] == kind]


def text(updates: list[dict[str, Any]]) -> str:
    return "".join(u["content"]["text"] for u in updates)


def test_a_session_prompts_cancels_and_loads_in_a_new_process(tmp_path: Path) -> None:
    journal, cwd = tmp_path / "journal", tmp_path / "work"
    cwd.mkdir()
    config = tmp_path / "bbridge.toml"
    echo = json.dumps([sys.executable, "-m", "bridges.echo"])
    config.write_text(f'[acp]\ndefault_provider = "echo"\n\n[providers.echo2]\ncommand = {echo}\n', encoding="utf-8")
    first = editor("main", cwd, "--journal", str(journal), "--config", str(config))
    offered = {o["id"]: o for o in first["new"]["configOptions"]}
    assert offered["provider"]["currentValue"] == "echo"  # [acp] default_provider, not the first configured
    assert sorted(o["value"] for o in offered["provider"]["options"]) == ["echo", "echo2"]
    assert first["initialize"]["protocolVersion"] == 1
    assert first["initialize"]["agentCapabilities"]["loadSession"] is True
    options = {o["id"]: o for o in first["options"]["configOptions"]}
    assert options["provider"]["currentValue"] == "echo"
    assert [o["value"] for o in options["model"]["options"]] == ["echo"]
    assert options["reasoning"]["currentValue"] == "low"
    assert first["first"] == "end_turn"
    assert "runs on echo since its first prompt; start a new session" in first["refused"]
    assert text(kinds(first, "agent_message_chunk")).startswith("echo: hello there")
    assert first["cancelled"] == "cancelled"
    assert "word " * 40 not in text(kinds(first, "agent_message_chunk"))  # interrupted, not streamed to its end
    session = first["sessionId"]
    assert "nextCursor" not in first["list"]  # one page
    assert "not a nextCursor this agent gave" in first["badCursor"]
    assert first["list"]["sessions"] == [
        {
            "sessionId": session,
            "cwd": str(cwd),
            "title": "hello there",
            "updatedAt": first["list"]["sessions"][0]["updatedAt"],
        }
    ]

    again = editor("load", cwd, "--journal", str(journal), "--config", str(config), session=session)
    history = [u for u in again["updates"] if u["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk")]
    assert history[0] == {"sessionId": session, "sessionUpdate": "user_message_chunk",
                          "content": {"type": "text", "text": "hello there"}}  # fmt: skip
    assert text(history[1:3]) == "echo: hello there"
    assert history[3]["sessionUpdate"] == "user_message_chunk" and history[3]["content"]["text"].startswith("slow:300")
    assert again["again"] == "end_turn"  # the loaded thread was resumed on a new daemon
    assert text(kinds(again, "agent_message_chunk")).endswith("echo: again")
    assert [s["sessionId"] for s in again["list"]["sessions"]] == [session]


def test_a_prompt_while_one_runs_steers_its_turn_and_both_end_with_it(tmp_path: Path) -> None:
    report = editor("steer", tmp_path, "--config", os.devnull)
    assert (report["held"], report["steer"]) == ("end_turn", "end_turn")
    assert text(kinds(report, "agent_message_chunk")).endswith(" [steer] finish")


async def test_a_socket_client_sees_the_thread_and_answers_the_approval_first(tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    async with running(tmp_path, {"echo": echo_provider()}) as (_daemon, socket):
        argv = [str(AGENT_PY), str(EDITOR), "hold", str(cwd), "--", *BBRIDGE_ACP, "--socket", str(socket),
                "--sessions", str(tmp_path / "sessions.json")]  # fmt: skip
        log = (tmp_path / "acp.log").open("wb")
        process = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, stderr=log, env=clean_env())
        assert process.stdout is not None
        try:
            with trio.fail_after(RUN_S):
                out = b""
                while b"\n" not in out:
                    out += await process.stdout.receive_some()
                session = json.loads(out.split(b"\n")[0])["asked"]
                async with Client.connect(socket) as other:
                    rows = {t["threadId"]: t for t in (await other.status()).threads}
                    assert rows[session]["providerId"] == "echo"
                    (pending,) = (await other.pending(session)).pending
                    assert pending.kind == "approval"
                    await other.respond(pending.requestId, {"decision": "allow_once", "grantedPermissions": None})
                    while b"prompted" not in out:
                        out += await process.stdout.receive_some()
                    page = [{"type": "text", "text": "from the page", "mentions": []}]
                    await other.request("turn/start", {"providerId": "echo", "threadId": session, "input": page,
                                                       "options": FULL_OPTIONS})  # fmt: skip
                    while True:
                        data = await process.stdout.receive_some()
                        if not data:
                            break
                        out += data
                await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
            log.close()
    assert process.returncode == 0, (tmp_path / "acp.log").read_text()[-3000:]
    report = json.loads(out.splitlines()[-1])
    assert report["prompt"] == "end_turn"
    assert "echo: approve:command" in text(kinds(report, "agent_message_chunk"))  # allowed by the socket client
    assert report["cancelRequests"] == [{"requestId": report["askedIds"][0]}]
    assert report["permissions"][0]["options"][1]["kind"] == "allow_always"
    assert [s["sessionId"] for s in report["list"]["sessions"]] == [session]
    said = [u["content"]["text"] for u in kinds(report, "user_message_chunk")]
    assert said == ["from the page"]  # the other client's turn shows in the editor, its input as the user's


async def test_the_editors_trace_context_makes_the_turns_span_its_child(tmp_path: Path) -> None:
    """A prompt's `_meta` `traceparent` (and `tracestate`), as ACP's meta propagation carries W3C trace context, goes
    into the turn's `_meta`: with `[telemetry]`, the daemon's `bbridge.turn` span is in the editor's trace."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    with otlp_receiver() as receiver:
        config = tmp_path / "bbridge.toml"
        config.write_text(f'[telemetry]\notlp_endpoint = "{receiver.url}"\n', encoding="utf-8")
        settings, refused = load_telemetry(config)
        assert settings is not None and not refused, refused
        tracer = build_tracer(settings)
        try:
            async with running(tmp_path, {"echo": echo_provider()}, tracer=tracer) as (_daemon, socket):
                argv = [str(AGENT_PY), str(EDITOR), "traced", str(cwd), "--", *BBRIDGE_ACP, "--socket", str(socket),
                        "--sessions", str(tmp_path / "sessions.json")]  # fmt: skip
                with trio.fail_after(RUN_S):
                    done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, env=clean_env())
        finally:
            tracer.close()
        turn = one(receiver.named("bbridge.turn"))
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["traced"] == "end_turn"
    assert (turn.trace_id, turn.parent_span_id) == (CLIENT_TRACE, CLIENT_SPAN)
    assert turn.attributes["bbridge.thread_id"] == report["sessionId"]


def test_every_event_kind_of_a_turn_becomes_updates_the_sdk_accepts(tmp_path: Path) -> None:
    report = editor("all", tmp_path, "--config", os.devnull)
    assert report["all"] == "end_turn"
    assert report["rawUpdates"] == len(report["updates"])  # none refused by the SDK's schema
    assert {u["sessionUpdate"] for u in report["updates"]} == {
        "session_info_update", "agent_thought_chunk", "plan", "tool_call", "tool_call_update", "agent_message_chunk",
        "usage_update",
    }  # fmt: skip
    calls = {u["toolCallId"]: u for u in kinds(report, "tool_call")}
    assert {c["kind"] for c in calls.values()} == {"execute", "edit", "other", "fetch", "read", "search", "think"}
    ends = [u for u in kinds(report, "tool_call_update") if u.get("status") == "completed"]
    assert {u["toolCallId"] for u in ends} == set(calls)  # every call that started ended
    (edit,) = [u for u in ends if calls[u["toolCallId"]]["kind"] == "edit"]
    assert edit["content"] == [{"type": "diff", "path": str(tmp_path / "echo.txt"), "newText": "echo\n"}]


async def test_over_a_websocket_url_with_a_token_the_editor_approves(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n", encoding="utf-8")
    async with listening({"echo": echo_provider()}) as live:
        argv = [str(AGENT_PY), str(EDITOR), "approve", str(tmp_path), "--", *BBRIDGE_ACP, "--url", live.url,
                "--token-file", str(token), "--sessions", str(tmp_path / "sessions.json")]  # fmt: skip
        with trio.fail_after(RUN_S):
            done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, env=clean_env(), check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["prompt"] == "end_turn"
    assert text(kinds(report, "agent_message_chunk")) == "echo: approve:command"  # the editor's allow_once
    assert report["permissions"][0]["toolCall"]["kind"] == "execute" and report["cancelRequests"] == []


def test_the_editors_mcp_server_reaches_the_agent_behind_the_session(tmp_path: Path, monkeypatch: Any) -> None:
    """`session/new`'s `mcpServers` reach the thread through the in-process daemon's tool host: the echo bridge calls
    the server's tool, and its answer is in the tool call's update (no editor request for it)."""
    server = REPO / "tests" / "mcp_server.py"
    monkeypatch.setenv("ACP_EDITOR_MCP", json.dumps([sys.executable, str(server)]))
    cwd = tmp_path / "work"
    cwd.mkdir()
    report = editor("mcp", cwd)
    assert report["mcp"] == "end_turn"
    calls = [u for u in report["updates"] if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    assert any("mini__echo" in json.dumps(u) for u in calls)
    assert any(
        "hi" in json.dumps(u.get("content") or u.get("rawOutput") or "")
        for u in calls
        if u.get("status") == "completed"
    )
    assert report["permissions"] == []
