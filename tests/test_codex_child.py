"""The codex child endpoint (spec §1.3–§1.6, §5.2) against a tiny fake app-server, and once against the real codex."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from bridges.codex import launch
from bridges.codex.child import MISSING_CLI, ChildError, CodexChild, CodexNotification, ServerRequest
from tests.live import openai
from tests.live.codex import FULL_ACCESS, MODEL, installed_cli, offline_env, text_input

FAKE = r"""
import json, sys

def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if method == "echo":
        send({"jsonrpc": "2.0", "id": ident, "result": message.get("params")})
    elif method == "fail":
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32000, "message": "boom"}})
    elif method == "ask":
        send({"jsonrpc": "2.0", "id": "s1", "method": "item/tool/call", "params": {"tool": "t"}})
        answer = json.loads(sys.stdin.readline())
        send({"jsonrpc": "2.0", "id": ident, "result": answer})
    elif method == "ordered":  # one write: a notification, the response, then another notification
        sys.stdout.write(
            json.dumps({"jsonrpc": "2.0", "method": "before", "params": {}}) + "\n"
            + json.dumps({"jsonrpc": "2.0", "id": ident, "result": "ok"}) + "\n"
            + json.dumps({"jsonrpc": "2.0", "method": "after", "params": {}, "emittedAtMs": 1}) + "\n"
        )
        sys.stdout.flush()
    elif method == "crash":
        sys.stderr.write("first\nlast words\n")
        sys.stderr.flush()
        sys.exit(3)
"""


@asynccontextmanager
async def fake_child(tmp_path: Path, **kwargs: Any) -> AsyncIterator[CodexChild]:
    """A started child running the fake app-server; stopped (and its process reaped) on exit, all bounded."""
    script = tmp_path / "fake_app_server.py"
    script.write_text(FAKE)
    env = launch.child_env({"PATH": "/usr/bin:/bin"})
    child = CodexChild([sys.executable, str(script)], env=env, cwd=str(tmp_path), thread_id=None, **kwargs)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(child.run)
            try:
                yield child
            finally:
                child.stop()


async def test_request_and_error_answers(tmp_path: Path) -> None:
    async with fake_child(tmp_path) as child:
        assert await child.request("echo", {"a": [1, "é"]}) == {"a": [1, "é"]}
        with pytest.raises(ChildError, match=r"^boom$"):
            await child.request("fail")


async def test_server_request_is_answered(tmp_path: Path) -> None:
    seen: list[tuple[str, Any]] = []

    async def on_request(request: ServerRequest) -> None:
        seen.append((request.method, request.params))
        await request.respond({"ok": True})
        await request.respond({"twice": True})  # a responder answers at most once

    async with fake_child(tmp_path, on_request=on_request) as child:
        answer = await child.request("ask")
    assert seen == [("item/tool/call", {"tool": "t"})]
    assert answer == {"jsonrpc": "2.0", "id": "s1", "result": {"ok": True}}


async def test_unhandled_server_request_is_refused(tmp_path: Path) -> None:
    async with fake_child(tmp_path) as child:
        answer = await child.request("ask")
    assert answer["error"] == {"code": -32601, "message": 'Unhandled codex request "item/tool/call"'}


async def test_response_continuation_runs_before_the_next_line(tmp_path: Path) -> None:
    log: list[Any] = []

    async def on_notification(note: CodexNotification) -> None:
        log.append(note.message)

    async with fake_child(tmp_path, on_notification=on_notification) as child:
        async with child.exchange("ordered") as result:
            await trio.sleep(0.05)  # the reader must wait even when the continuation yields
            log.append(result)
        await trio.sleep(0.1)
    assert log == [{"method": "before", "params": {}}, "ok", {"method": "after", "params": {}}]


async def test_request_timeout(tmp_path: Path) -> None:
    async with fake_child(tmp_path, request_timeout=0.2) as child:
        with pytest.raises(ChildError, match=r"^codex app-server did not answer silent within 200ms$"):
            await child.request("silent")
        assert await child.request("echo", 1) == 1  # a late answer would be ignored; the child still serves


async def test_crash_runs_the_exit_hook_before_rejecting(tmp_path: Path) -> None:
    log: list[str] = []

    async def on_exit(child: CodexChild) -> None:
        await trio.sleep(0.05)  # the pending request must not resume while the hook waits
        log.append(child.exit_message("codex app-server exited unexpectedly"))

    async with fake_child(tmp_path, on_exit=on_exit) as child:
        with pytest.raises(ChildError) as failed:
            await child.request("crash")
        log.append(failed.value.message)
        with pytest.raises(ChildError, match=r"^codex app-server is not running$"):
            await child.request("echo")
    assert log == [
        "codex app-server exited unexpectedly (code 3, signal null): first\nlast words",
        "codex app-server exited (code 3, signal null): first\nlast words",
    ]
    assert not failed.value.spawn_failed


async def test_stop_ends_the_child(tmp_path: Path) -> None:
    exited = trio.Event()

    async def on_exit(child: CodexChild) -> None:
        exited.set()

    async with fake_child(tmp_path, on_exit=on_exit) as child:
        child.stop()
        with trio.fail_after(5):
            await exited.wait()
        assert child.finalized and (child.code, child.signal) in {(0, None), (None, "SIGTERM")}


async def test_missing_executable(tmp_path: Path) -> None:
    exits: list[str] = []

    async def on_exit(child: CodexChild) -> None:
        exits.append(child.exit_message("codex app-server exited unexpectedly"))

    missing = str(tmp_path / "no-codex")
    child = CodexChild([missing, "app-server"], env={}, cwd=str(tmp_path), thread_id=None, on_exit=on_exit)
    with trio.fail_after(5):
        await child.run()
    assert exits == [f"codex app-server exited unexpectedly (code null, signal null): spawn {missing} ENOENT"]
    with pytest.raises(ChildError, match=r"^codex app-server is not running$") as failed:
        await child.request("initialize", launch.INITIALIZE_PARAMS)
    assert failed.value.spawn_failed and failed.value.runtime_message == MISSING_CLI


async def test_real_codex_turn(tmp_path: Path) -> None:
    cli = installed_cli()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    notes: list[dict[str, Any]] = []
    completed = trio.Event()

    async def on_notification(note: CodexNotification) -> None:
        notes.append(note.message)
        if note.method == "turn/completed":
            completed.set()

    with openai.ScriptedResponses() as api:
        api.push(openai.text("Hello from the scripted model!"))
        env = offline_env(tmp_path, api.base_url)
        child = CodexChild(
            [str(cli), "app-server"], env=env, cwd=str(workspace), thread_id=None, on_notification=on_notification
        )
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                await nursery.start(child.run)
                try:
                    init = await child.request("initialize", launch.INITIALIZE_PARAMS)
                    assert init["codexHome"] == env["CODEX_HOME"]
                    params = {**FULL_ACCESS, "sandbox": "danger-full-access", "cwd": str(workspace), "model": MODEL}
                    started = await child.request("thread/start", params)
                    turn = {"threadId": started["thread"]["id"], "input": text_input("Say hello."), **FULL_ACCESS}
                    async with child.exchange("turn/start", turn) as result:
                        turn_id = result["turn"]["id"]
                        assert not any(n["method"] == "turn/started" for n in notes)  # codex answers first (§5.5)
                    await completed.wait()
                finally:
                    child.stop()
    deltas = [n["params"]["delta"] for n in notes if n["method"] == "item/agentMessage/delta"]
    assert "".join(deltas) == "Hello from the scripted model!"
    (done,) = [n["params"]["turn"] for n in notes if n["method"] == "turn/completed"]
    assert done["id"] == turn_id and done["status"] == "completed"
