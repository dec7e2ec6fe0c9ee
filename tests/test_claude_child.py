"""The Claude Code CLI endpoint (`bridges/claude_code/child.py`): control responses settle by id, the rest is handed on."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from bbridge.wire import rpc
from bridges.claude_code.child import ClaudeChild

# A stand-in CLI: reads the bridge's two control requests, then answers them in reverse order around the lines a
# real CLI interleaves (junk, a keep-alive, its own request, an SDK message, a cancel) and exits.
CLI = r"""
import json, sys
ids = [json.loads(sys.stdin.readline())["request_id"] for _ in range(2)]
out = [
    "not json",
    {"type": "keep_alive"},
    {"type": "control_request", "request_id": "cli-1", "request": {"subtype": "can_use_tool"}},
    {"type": "control_response", "response": {"subtype": "success", "request_id": ids[1], "response": {"ok": 2}}},
    {"type": "assistant", "message": {"content": []}},
    {"type": "control_response", "response": {"subtype": "error", "request_id": ids[0], "error": "no"}},
    {"type": "control_cancel_request", "request_id": "cli-1"},
]
for line in out:
    print(line if isinstance(line, str) else json.dumps(line), flush=True)
"""


async def test_responses_settle_by_request_id_and_the_cli_lines_are_handed_on(tmp_path: Path) -> None:
    child = ClaudeChild([sys.executable, "-c", CLI], env=dict(os.environ), cwd=str(tmp_path), thread_id="thr_1")
    await child.spawn()
    messages: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    cancels: list[Any] = []

    async def on_message(message: dict[str, Any]) -> None:
        messages.append(message)

    try:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(child.read, on_message, requests.append, cancels.append)
                first = await child.send({"subtype": "a"})
                second = await child.request({"subtype": "b"})
    finally:
        await child.stop()
    assert second == {"ok": 2}
    assert first.error == "no"
    with pytest.raises(rpc.RpcError, match="Claude SDK input stream is closed"):
        await child.request({"subtype": "c"})  # the child is gone
    assert [m["type"] for m in messages] == ["assistant"]
    assert [r["request_id"] for r in requests] == ["cli-1"] and cancels == ["cli-1"]


async def test_ending_fails_the_unanswered_requests_and_a_closed_input_refuses_writes(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    child = ClaudeChild(argv, env=dict(os.environ), cwd=str(tmp_path), thread_id="thr_1")
    await child.spawn()
    try:
        waiter = await child.send({"subtype": "interrupt"})
        child.fail_requests("gone")
        assert waiter.done.is_set() and waiter.error == "gone"
        await child.close_stdin()
        assert not child.input_open
        with pytest.raises(rpc.RpcError):
            await child.write({"type": "user"})
    finally:
        await child.stop()
