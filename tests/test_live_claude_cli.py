"""The REAL Claude Code CLI (pinned by `make live-agents`), headless on stream-json, fully offline.

Each test starts `tests.live.anthropic.AnthropicServer` (the scripted Messages API on 127.0.0.1) and drives one
CLI child through `tests.live.claude.Claude`, the way the reference bridge launches it (claude-code-bridge.md
§1.4, §2). No bridge is involved yet: these pin down what the CLI itself does, for the bridge to build on
(tests/live/NOTES.md). The first tests check the scripted server's own wire format and need no CLI.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.live.anthropic import AnthropicServer, failure, reply, text, thinking, tool_use
from tests.live.claude import API_KEY, CLAUDE_CODE_VERSION, MODEL, Claude, McpTool, Message, ensure_cli, launch_args


@pytest.fixture(scope="session")
def cli() -> Path:
    """The pinned CLI (runs `make -s live-agents`; skips only when the npm registry is unreachable)."""
    return ensure_cli()


@pytest.fixture
def api() -> Iterator[AnthropicServer]:
    with AnthropicServer() as server:
        yield server


def events(messages: list[Message]) -> list[str]:
    """The `stream_event`s as `event.type` (plus `:delta.type` for deltas, `:block.type` for block starts)."""
    out = []
    for m in messages:
        if m.get("type") == "stream_event":
            event = m["event"]
            kind = event["type"]
            if kind == "content_block_delta":
                kind += ":" + event["delta"]["type"]
            elif kind == "content_block_start":
                kind += ":" + event["content_block"]["type"]
            out.append(kind)
    return out


def of(messages: list[Message], kind: str, subtype: str | None = None) -> list[Message]:
    return [m for m in messages if m.get("type") == kind and (subtype is None or m.get("subtype") == subtype)]


def assert_offline(api: AnthropicServer) -> None:
    """Everything the CLI sent reached the scripted server on loopback, and nothing tried to go elsewhere."""
    seen = api.requests
    assert seen, "the CLI never reached the scripted API"
    assert not [r.target for r in seen if r.is_proxy_attempt], "the CLI tried to reach another host"
    assert {r.headers.get("host") for r in seen} == {f"127.0.0.1:{api.port}"}
    assert all(r.is_messages for r in seen), [f"{r.method} {r.path}" for r in seen]


# -- the scripted server alone -----------------------------------------------------------------------------------


def sse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) per SSE event."""
    found = []
    for chunk in raw.decode().split("\n\n"):
        if chunk.strip():
            fields = dict(line.split(": ", 1) for line in chunk.splitlines())
            found.append((fields["event"], json.loads(fields["data"])))
    return found


async def test_server_streams_sse_like_the_api_to_a_trio_client() -> None:
    with AnthropicServer() as server:
        server.script(reply(thinking("a", "b"), text("Hel", "lo"), tool_use("Bash", {"command": "ls"}, id="toolu_1")))
        body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
        head = f"POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        async with stream:
            await stream.send_all(head.encode() + body)
            raw = b""
            with trio.fail_after(5):
                while chunk := await stream.receive_some():
                    raw += chunk
        (seen,) = await server.wait_messages_async(1, finished=True)
    headers, _, chunked = raw.partition(b"\r\n\r\n")
    assert headers.startswith(b"HTTP/1.1 200") and b"text/event-stream" in headers
    payload = b""
    while True:  # de-chunk
        size_line, _, chunked = chunked.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        payload, chunked = payload + chunked[:size], chunked[size + 2 :]
    names = [(name, data.get("delta", {}).get("type") or data.get("content_block", {}).get("type")) for name, data in sse(payload)]  # fmt: skip
    assert names == [
        ("message_start", None),
        ("content_block_start", "thinking"), ("ping", None),
        ("content_block_delta", "thinking_delta"), ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"), ("content_block_stop", None),
        ("content_block_start", "text"),
        ("content_block_delta", "text_delta"), ("content_block_delta", "text_delta"), ("content_block_stop", None),
        ("content_block_start", "tool_use"),
        ("content_block_delta", "input_json_delta"), ("content_block_delta", "input_json_delta"),
        ("content_block_delta", "input_json_delta"), ("content_block_stop", None),
        ("message_delta", None), ("message_stop", None),
    ]  # fmt: skip
    data = [d for _, d in sse(payload)]
    partial = "".join(d["delta"].get("partial_json", "") for d in data if d["type"] == "content_block_delta")
    assert json.loads(partial) == {"command": "ls"}
    assert data[-2]["delta"]["stop_reason"] == "tool_use" and data[0]["message"]["model"] == "m"
    assert seen.scripted and seen.query == "beta=true" and seen.body["messages"][0]["content"] == "hi"


def test_server_answers_errors_json_and_everything_else_without_hanging() -> None:
    with AnthropicServer(default=text("default")) as server:
        server.script(failure(401))

        def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            try:
                conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
                response = conn.getresponse()
                return response.status, json.loads(response.read())
            finally:
                conn.close()

        status, error = post("/v1/messages", {"model": "m", "messages": []})
        assert status == 401 and error["type"] == "error"
        assert error["error"] == {"type": "authentication_error", "message": "invalid x-api-key"}
        status, message = post("/v1/messages", {"model": "m", "messages": []})  # the queue is empty: the default
        assert status == 200 and message["content"] == [{"type": "text", "text": "default"}]
        assert message["stop_reason"] == "end_turn" and message["type"] == "message"
        assert post("/v1/messages/count_tokens", {"model": "m", "messages": []})[0] == 200
        status, missing = post("/api/anything", {})
        assert status == 404 and missing["error"]["type"] == "not_found_error"
        assert [r.status for r in server.requests] == [401, 200, 200, 404]
        assert [r.scripted for r in server.messages()] == [True, False]


# -- the real CLI ------------------------------------------------------------------------------------------------


def test_one_turn_with_thinking_and_streamed_text(cli: Path, api: AnthropicServer, tmp_path: Path) -> None:
    api.script(reply(thinking("Let me ", "think."), text("Hel", "lo ", "there")))
    session = "0b7a1d2e-3c4f-4a5b-8c6d-7e8f9a0b1c2d"
    with Claude.start(api.url, tmp_path, args=launch_args(effort="medium", session_id=session)) as claude:
        started = time.monotonic()
        init = claude.initialize()
        prompt = claude.user("Say hello.")
        result, before = claude.until_result()
        elapsed = time.monotonic() - started
        assert claude.close() == 0  # stdin ended after a successful result: a clean exit

    assert init["claude_code_version"] == CLAUDE_CODE_VERSION and "models" in init
    (system,) = of(before, "system", "init")
    assert system["session_id"] == session and system["model"] == MODEL and system["permissionMode"] == "default"
    assert system["cwd"] == str(claude.cwd) and system["apiKeySource"] == "ANTHROPIC_API_KEY"
    assert "Bash" in system["tools"] and system["claude_code_version"] == CLAUDE_CODE_VERSION
    assert [m["state"] for m in of(before, "command_lifecycle")] == ["queued", "started"]
    assert all(m["command_uuid"] == prompt for m in of(before, "command_lifecycle"))
    assert events(before) == [
        "message_start",
        "content_block_start:thinking",
        "content_block_delta:thinking_delta",
        "content_block_delta:thinking_delta",
        "content_block_delta:signature_delta",
        "content_block_stop",
        "content_block_start:text",
        "content_block_delta:text_delta",
        "content_block_delta:text_delta",
        "content_block_delta:text_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]  # (the API's `ping` is not forwarded)
    assistant = of(before, "assistant")  # one message per completed content block, same message id
    assert [m["message"]["content"] for m in assistant] == [
        [{"type": "thinking", "thinking": "Let me think.", "signature": "c2lnbmF0dXJlLWxpdmUtdGVzdA=="}],
        [{"type": "text", "text": "Hello there"}],
    ]
    assert len({m["message"]["id"] for m in assistant}) == 1
    assert result["subtype"] == "success" and result["is_error"] is False and result["result"] == "Hello there"
    assert result["session_id"] == session and result["num_turns"] == 1 and result["stop_reason"] == "end_turn"
    assert elapsed < 20

    (request,) = api.messages()
    assert request.stream and request.model == MODEL and request.headers["x-api-key"] == API_KEY
    assert request.user_text().endswith("Say hello.") and "Bash" in request.tool_names
    assert request.body["thinking"]["display"] == "summarized"  # `--thinking-display summarized`
    assert_offline(api)


@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_bash_tool_use_asks_can_use_tool_and_the_answer_reaches_the_model(
    cli: Path, api: AnthropicServer, tmp_path: Path, decision: str
) -> None:
    command = {"command": "echo hi | tee hi.txt", "description": "Write hi to a file"}
    api.script(reply(text("I'll run it."), tool_use("Bash", command)), text("done"))
    with Claude.start(api.url, tmp_path) as claude:
        claude.initialize()
        claude.user("Run the command.")
        asked, before = claude.until_control("can_use_tool")
        assert len(api.messages()) == 1  # the CLI waits for the answer before anything else
        if decision == "allow":
            claude.allow(asked)
        else:
            claude.deny(asked, "No, not now.")
        result, after = claude.until_result()

    (tool_call,) = [b for m in of(before, "assistant") for b in m["message"]["content"] if b["type"] == "tool_use"]
    request = asked["request"]
    assert request["tool_name"] == "Bash" and request["input"] == command
    assert request["tool_use_id"] == tool_call["id"] and request["permission_suggestions"]
    assert asked["request_id"]
    hooks = [m["request"]["input"]["hook_event_name"] for m in claude.auto_answered]
    assert hooks[0] == "PreToolUse" and "PermissionRequest" in hooks  # answered by the driver: {"continue":true}

    first, second = api.messages()
    assert first.finished and not first.tool_results()
    (tool_result,) = second.tool_results()
    assert tool_result["tool_use_id"] == tool_call["id"]
    (echoed,) = [b for m in of(after, "user") for b in m["message"]["content"]]  # the CLI echoes the tool result
    assert echoed["tool_use_id"] == tool_call["id"]
    assert result["subtype"] == "success" and result["result"] == "done"
    written = claude.cwd / "hi.txt"
    if decision == "allow":
        assert tool_result["is_error"] is False and tool_result["content"].startswith("hi")
        assert written.read_text() == "hi\n" and hooks[-1] == "PostToolUse"
        assert result["permission_denials"] == []
    else:
        assert tool_result["is_error"] is True and tool_result["content"].startswith("No, not now.")
        assert not written.exists() and "PostToolUse" not in hooks
        assert [d["tool_use_id"] for d in result["permission_denials"]] == [tool_call["id"]]
    assert_offline(api)


def test_401_gives_a_legible_error_result_at_once(cli: Path, api: AnthropicServer, tmp_path: Path) -> None:
    api.script(failure(401))
    with Claude.start(api.url, tmp_path) as claude:
        claude.initialize()
        asked_at = time.monotonic()
        claude.user("Reply with ready.")
        result, before = claude.until_result(timeout=20)
        took = time.monotonic() - asked_at
        status = claude.close()
    (assistant,) = of(before, "assistant")
    assert assistant["error"] == "authentication_failed" and assistant["message"]["model"] == "<synthetic>"
    assert assistant["api_error_status"] == 401
    assert result["is_error"] is True and result["api_error_status"] == 401
    assert result["terminal_reason"] == "api_error"
    assert "Invalid API key" in result["result"]
    assert took < 5, f"the error took {took:.1f}s: retries?"
    assert [r.status for r in api.messages()] == [401]  # no retry (CLAUDE_CODE_MAX_RETRIES=0)
    assert status == 1  # stdin ended after an error result
    assert_offline(api)


def test_interrupt_during_a_slow_stream_ends_the_turn(cli: Path, api: AnthropicServer, tmp_path: Path) -> None:
    api.script(reply(text(*[f"word{i} " for i in range(100)]), delay=0.1), text("after"))  # ~10 s of stream
    with Claude.start(api.url, tmp_path) as claude:
        claude.initialize()
        claude.user("Write an essay.")
        claude.wait_for(lambda m: "content_block_delta:text_delta" in events([m]))
        interrupted_at = time.monotonic()
        answer = claude.interrupt()
        result, before = claude.until_result(timeout=5)
        took = time.monotonic() - interrupted_at
        api.wait(lambda seen: seen[0].disconnected, timeout=5)
        slow = api.messages()[0]
        claude.user("Go on.")
        after, _ = claude.until_result()

    assert answer["subtype"] == "success"
    assert result["subtype"] == "error_during_execution" and result["is_error"] is True
    assert result["terminal_reason"] == "aborted_streaming"
    assert took < 3, f"the interrupt took {took:.1f}s"
    assert not slow.finished  # the CLI dropped the HTTP stream
    (partial,) = of(before, "assistant")
    assert partial["aborted"] is True and partial["message"]["content"][0]["text"].startswith("word0")
    assert [m["message"]["content"] for m in of(before, "user")] == [
        [{"type": "text", "text": "[Request interrupted by user]"}]
    ]
    assert events(before)[-2:] == ["message_delta", "message_stop"]  # synthesized on the abort
    assert after["subtype"] == "success" and after["result"] == "after"
    assert "[Request interrupted by user]" in api.messages()[-1].user_text()
    assert_offline(api)


def test_sdk_mcp_tool_is_served_over_the_control_channel(cli: Path, api: AnthropicServer, tmp_path: Path) -> None:
    """The `sdkMcpServers` of `initialize` (§2.6): the CLI calls the driver's MCP server via `mcp_message`."""
    schema = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}
    lookup = McpTool("lookup", "Look a word up.", schema, result="a greeting")
    api.script(tool_use("mcp__bb-bridge__lookup", {"word": "hi"}), text("It is a greeting."))
    args = launch_args(extra=["--allowedTools", "mcp__bb-bridge__lookup"])
    with Claude.start(api.url, tmp_path, args=args, mcp_tools=[lookup]) as claude:
        claude.initialize()
        claude.user("Look up hi.")
        result, before = claude.until_result()
    assert not of(before, "control_request")  # pre-approved by --allowedTools: no can_use_tool
    mcp = [m["request"] for m in claude.auto_answered if m["request"]["subtype"] == "mcp_message"]
    assert {r["server_name"] for r in mcp} == {"bb-bridge"}
    methods = [r["message"]["method"] for r in mcp]
    assert methods[:3] == ["initialize", "notifications/initialized", "tools/list"] and "tools/call" in methods
    assert result["result"] == "It is a greeting."
    (tool_result,) = api.messages()[1].tool_results()
    assert tool_result["content"][0]["text"].startswith("a greeting")
    assert_offline(api)
