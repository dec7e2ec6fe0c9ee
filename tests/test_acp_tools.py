"""The ACP bridge offers a thread's declared tools to its agent through the `bb-bridge` MCP server.

* The bridge's end (`bbridge.kit.mcp_host`): MCP over the thread's Unix socket after the token hello —
  `initialize`, `ping`, `tools/list`, `tools/call` relayed and its answer mapped, `isError`, protocol errors,
  a wrong token refused, cancellation, and nothing left behind by `close`.
* The stdio relay (`bbridge/kit/mcp_relay.py`) as an agent runs it: MCP on its stdio, its exit when the bridge closes.
* The translation: a call of a declared tool is a `tool` item with `server: "bb"` and the declared presentation,
  whether the agent's title names it or only the relayed MCP call does.
* End to end: a small ACP agent (stdlib Python, written here) launches the server from `session/new`'s
  `mcpServers` exactly as a real agent would, calls the tool when prompted and reports the result as its text;
  the runtime sees exactly one `item/tool/call`.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from bbridge.core import grammar as g
from bbridge.core.assembler import Assembler
from bbridge.kit import mcp_relay
from bbridge.kit.mcp_host import PROTOCOL_VERSIONS, McpHost, Tool, tool_result
from bbridge.wire import rpc
from bridges.acp.bridge import AcpBridge
from bridges.acp.child import Launch
from bridges.acp.translate import Translator
from tests.support import FULL, INIT, in_process, turn_params

PRES = {"label": {"pending": "Looking up", "completed": "Looked up"}, "icon": {"glyph": "Search"}, "title": "Weather"}
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
LOOKUP = Tool("lookup", "Look something up", SCHEMA, msgspec.convert(PRES, g.Presentation))
LOOSE = Tool("loose", "A tool whose schema is no object schema", {"type": "string"})
THREAD = "thr_tools"


class Calls:
    """The session's side of the host: records relayed calls and answers them as scripted."""

    def __init__(self, answer: Any = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.answer: Any = answer
        self.release: trio.Event | None = None

    async def __call__(self, tool: str, arguments: Any) -> Any:
        self.calls.append((tool, arguments))
        if self.release is not None:
            await self.release.wait()
        if isinstance(self.answer, rpc.RpcError):
            raise self.answer
        return self.answer


@asynccontextmanager
async def hosting(calls: Calls) -> AsyncIterator[McpHost]:
    host = McpHost({"lookup": LOOKUP, "loose": LOOSE}, calls, thread_id=THREAD)
    await host.open()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.serve)
            try:
                yield host
            finally:
                host.close()


async def hello(host: McpHost, token: str | None = None) -> tuple[trio.SocketStream, bytes]:
    """Connect as the relay does; the bridge's answer to the hello line (b"" when it closed instead)."""
    assert host.path is not None
    stream = await trio.open_unix_socket(host.path)
    await stream.send_all(mcp_relay.HELLO + (host.token if token is None else token).encode() + b"\n")
    answer = b""
    while not answer.endswith(b"\n"):
        data = await stream.receive_some(64)
        if not data:
            break
        answer += data
    return stream, answer


@asynccontextmanager
async def client(host: McpHost) -> AsyncIterator[rpc.Connection]:
    """An MCP client connection through the token hello."""
    stream, answer = await hello(host)
    assert answer == b"ok\n"
    conn = rpc.Connection(stream, stream, name="mcp-client", default_timeout=10)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        yield conn
        await conn.aclose()


# -- the bridge's end -------------------------------------------------------------------


async def test_initialize_ping_and_tools_list() -> None:
    async with hosting(Calls()) as host, client(host) as conn:
        init = await conn.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
        assert init == {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "bb-bridge", "version": "1.0.0"},
        }
        later = await conn.request("initialize", {"protocolVersion": "2099-01-01"})
        assert later["protocolVersion"] == PROTOCOL_VERSIONS[0]  # an unknown version: our latest
        await conn.notify("notifications/initialized", {})  # a notification is never answered
        assert await conn.request("ping", {}) == {}
        listed = await conn.request("tools/list", {})
        assert listed == {
            "tools": [
                {"name": "lookup", "description": "Look something up", "inputSchema": SCHEMA},
                {
                    "name": "loose",
                    "description": "A tool whose schema is no object schema",
                    "inputSchema": {"type": "object"},
                },
            ]
        }


async def test_unknown_methods_and_tools_are_protocol_errors() -> None:
    calls = Calls()
    async with hosting(calls) as host, client(host) as conn:
        with pytest.raises(rpc.RpcError) as unknown:
            await conn.request("resources/list", {})
        assert (unknown.value.code, unknown.value.message) == (-32601, "Method not found: resources/list")
        with pytest.raises(rpc.RpcError) as undeclared:
            await conn.request("tools/call", {"name": "rm_rf", "arguments": {}})
        assert (undeclared.value.code, undeclared.value.message) == (-32602, "Unknown tool: rm_rf")
        with pytest.raises(rpc.RpcError) as bad_args:
            await conn.request("tools/call", {"name": "lookup", "arguments": [1]})
        assert bad_args.value.code == -32602
    assert calls.calls == []  # none of them reached the runtime


async def test_a_wrong_token_is_refused_and_the_socket_is_private() -> None:
    async with hosting(Calls()) as host:
        assert host.path is not None and host.directory is not None
        assert stat.S_IMODE(os.stat(host.directory).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(host.path).st_mode) == 0o600
        stream, answer = await hello(host, token="0" * 64)
        assert answer == b""  # closed without a word
        await stream.aclose()
        stream, answer = await hello(host, token=host.token[:-1])
        assert answer == b""
        await stream.aclose()
        async with client(host) as conn:  # the right token still gets in
            assert await conn.request("ping") == {}


async def test_a_call_is_relayed_and_its_answer_mapped_both_ways() -> None:
    answer = {
        "success": True,
        "contentItems": [
            {"type": "inputText", "text": "sunny"},
            {"type": "inputImage", "imageUrl": "data:image/png;base64,iVBORw0KGgo="},
            {"type": "inputImage", "imageUrl": "https://example.com/map.png"},
        ],
    }
    calls = Calls(answer)
    async with hosting(calls) as host, client(host) as conn:
        result = await conn.request("tools/call", {"name": "lookup", "arguments": {"query": "weather"}})
        assert calls.calls == [("lookup", {"query": "weather"})]
        assert result == {
            "content": [
                {"type": "text", "text": "sunny"},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                {"type": "text", "text": "https://example.com/map.png"},
            ],
            "isError": False,
        }
        await conn.request("tools/call", {"name": "loose"})  # absent arguments are {}
        assert calls.calls[-1] == ("loose", {})


async def test_failures_are_is_error_results() -> None:
    calls = Calls({"success": False, "contentItems": [{"type": "inputText", "text": "no such city"}]})
    async with hosting(calls) as host, client(host) as conn:
        call = {"name": "lookup", "arguments": {"query": "x"}}
        failed = await conn.request("tools/call", call)
        assert failed == {"content": [{"type": "text", "text": "no such city"}], "isError": True}
        calls.answer = rpc.RpcError(-32000, "Cannot route provider tool call")
        refused = await conn.request("tools/call", call)
        assert refused == {"content": [{"type": "text", "text": "Cannot route provider tool call"}], "isError": True}
        calls.answer = {"success": "yes"}
        invalid = await conn.request("tools/call", call)
        assert invalid["isError"] is True
        assert invalid["content"][0]["text"].startswith("The client answered the tool call with no valid tool result")


async def test_a_cancelled_call_ends_as_an_error_result() -> None:
    calls = Calls({"success": True, "contentItems": []})
    calls.release = trio.Event()  # the runtime never answers
    async with hosting(calls) as host, client(host) as conn:
        results: list[Any] = []

        async def call() -> None:
            results.append(await conn.request("tools/call", {"name": "lookup", "arguments": {"query": "q"}}, id=77))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            while not calls.calls:
                await trio.sleep(0.01)
            await conn.notify("notifications/cancelled", {"requestId": 77, "reason": "user"})
        assert results == [{"content": [{"type": "text", "text": "Tool call cancelled"}], "isError": True}]


async def test_close_ends_connections_and_removes_the_socket() -> None:
    async with hosting(Calls()) as host:
        stream, answer = await hello(host)
        assert answer == b"ok\n"
        assert host.path is not None and host.directory is not None
        path, directory = host.path, host.directory
        host.close()
        with trio.fail_after(5):
            assert await stream.receive_some() == b""  # the relay sees the end
        assert not os.path.exists(path) and not os.path.exists(directory)
        host.close()  # idempotent


def test_tool_results_without_content_stay_empty() -> None:
    assert tool_result({"success": True, "contentItems": []}) == {"content": [], "isError": False}


# -- the stdio relay ----------------------------------------------------------------------


async def test_the_relay_speaks_mcp_on_stdio_and_exits_when_the_bridge_closes() -> None:
    async with hosting(Calls({"success": True, "contentItems": [{"type": "inputText", "text": "ok!"}]})) as host:
        spec = host.server_spec()
        assert spec["name"] == "bb-bridge" and spec["command"] == sys.executable and spec["args"][0] == "-I"
        env = {"PATH": os.environ.get("PATH", ""), **{e["name"]: e["value"] for e in spec["env"]}}
        proc = await trio.lowlevel.open_process(
            [spec["command"], *spec["args"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd="/"
        )
        assert proc.stdin is not None and proc.stdout is not None
        conn = rpc.Connection(proc.stdin, proc.stdout, name="agent-side", default_timeout=10)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run)
            init = await conn.request("initialize", {"protocolVersion": "2024-11-05", "capabilities": {}})
            assert init["serverInfo"]["name"] == "bb-bridge" and init["protocolVersion"] == "2024-11-05"
            await conn.notify("notifications/initialized")
            assert [t["name"] for t in (await conn.request("tools/list"))["tools"]] == ["lookup", "loose"]
            result = await conn.request("tools/call", {"name": "lookup", "arguments": {"query": "q"}})
            assert result == {"content": [{"type": "text", "text": "ok!"}], "isError": False}
            host.close()
            with trio.fail_after(5):
                assert await proc.wait() == 0
            nursery.cancel_scope.cancel()


async def test_the_relay_reports_a_refused_token() -> None:
    async with hosting(Calls()) as host:
        assert host.path is not None
        env = {mcp_relay.SOCKET_ENV: host.path, mcp_relay.TOKEN_ENV: "wrong"}
        result = await trio.run_process(
            [sys.executable, "-I", mcp_relay.__file__],
            env=env,
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert result.returncode == 1 and b"refused" in result.stderr and result.stdout == b""
        missing = await trio.run_process(
            [sys.executable, "-I", mcp_relay.__file__], env={}, capture_stderr=True, check=False
        )
        assert missing.returncode == 2 and mcp_relay.SOCKET_ENV.encode() in missing.stderr


async def test_the_relay_runs_from_its_kit_path_on_the_standard_library_alone() -> None:
    """The agent runs the relay as a script under `-I`; it lives in the kit's package but imports none of it (the
    package would pull in trio and structlog): without site packages it still starts and answers."""
    assert Path(mcp_relay.__file__).parent == Path(__file__).parents[1] / "bbridge" / "kit"
    bare = await trio.run_process(
        [sys.executable, "-I", "-S", mcp_relay.__file__], env={}, capture_stderr=True, check=False
    )
    assert bare.returncode == 2 and mcp_relay.SOCKET_ENV.encode() in bare.stderr


# -- the translation ------------------------------------------------------------------------


def _tools() -> dict[str, g.Presentation | None]:
    return {"lookup": LOOKUP.presentation, "plain": None}


def test_a_call_titled_as_a_bb_bridge_tool_is_the_declared_tool() -> None:
    translator = Translator(THREAD, _tools())
    translator.turn_started()
    call = {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "mcp__bb-bridge__lookup", "kind": "other", "status": "pending", "rawInput": {"query": "q"}}  # fmt: skip
    flush_thought, flush_message, opened = translator.update(call)
    assert isinstance(opened, g.ItemOpen)
    assert opened.item == g.ToolShape(tool="lookup", server="bb", args={"query": "q"})
    assert msgspec.to_builtins(opened.presentation) == PRES
    done = {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed", "content": [{"type": "content", "content": {"type": "text", "text": "sunny"}}]}  # fmt: skip
    (closed,) = translator.update(done)
    assert isinstance(closed, g.ItemClose)
    assert closed.item == g.ToolShape(tool="lookup", server="bb", args={"query": "q"}, result="sunny")
    assert msgspec.to_builtins(closed.presentation) == PRES
    gemini = {**call, "toolCallId": "c2", "title": "plain (bb-bridge MCP Server)", "rawInput": {}}
    (_, _, other) = translator.update(gemini)
    assert isinstance(other, g.ItemOpen) and other.item == g.ToolShape(tool="plain", server="bb")
    assert msgspec.to_builtins(other.presentation) == {"label": {"pending": "Running plain", "completed": "Ran plain"}, "icon": {"glyph": "Toolbox"}}  # fmt: skip


def test_an_undeclared_or_native_call_stays_what_it_was() -> None:
    translator = Translator(THREAD, _tools())
    translator.turn_started()
    undeclared = {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "mcp__bb-bridge__other", "kind": "other", "status": "pending"}  # fmt: skip
    (_, _, opened) = translator.update(undeclared)
    assert isinstance(opened, g.ItemOpen) and opened.item == g.ToolShape(tool="other")
    read = {"sessionUpdate": "tool_call", "toolCallId": "c2", "title": "lookup", "kind": "read", "status": "pending"}
    (_, _, native) = translator.update(read)
    assert isinstance(native, g.ItemOpen) and native.item == g.ToolShape(tool="read")  # a native kind is no MCP call
    translator.mcp_called("lookup", {"query": "q"})  # neither call has those arguments or mentions MCP
    assert translator.claimed == {}


def test_a_generic_call_is_claimed_by_the_mcp_call_the_bridge_relayed() -> None:
    """Cursor titles every MCP call "MCP: tool" with no arguments: the relayed call names it, before or after."""
    translator = Translator(THREAD, _tools())
    translator.turn_started()
    cursor = {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "MCP: tool", "kind": "other", "status": "pending", "rawInput": {}}  # fmt: skip
    (_, _, opened) = translator.update(cursor)
    assert isinstance(opened, g.ItemOpen) and opened.item == g.ToolShape(tool="other")  # not yet known
    translator.mcp_called("lookup", {"query": "q"})
    (closed,) = translator.update({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "failed"})
    assert isinstance(closed, g.ItemClose) and closed.status == "failed"
    assert closed.item == g.ToolShape(tool="lookup", server="bb", args={"query": "q"})
    assert msgspec.to_builtins(closed.presentation) == PRES
    # the other order: the MCP call first, its ACP call (same arguments) later
    translator.mcp_called("plain", {"x": 1})
    (_, _, late) = translator.update({**cursor, "toolCallId": "c2", "title": "Run", "rawInput": {"x": 1}})
    assert isinstance(late, g.ItemOpen) and late.item == g.ToolShape(tool="plain", server="bb", args={"x": 1})
    # and the assembler accepts the reshaped close of an item that opened generic
    assembler = Assembler("acp", entropy_prefix="E", text_delta_flush_ms=0)
    t2 = Translator(THREAD, _tools())
    deltas = [*t2.turn_started(), *t2.update(cursor)]
    t2.mcp_called("lookup", {"query": "q"})
    deltas += [*t2.update({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"}), *t2.turn_completed("end_turn")]  # fmt: skip
    events = msgspec.to_builtins(assembler.assemble(THREAD, deltas))
    (opened, done) = [e["item"] for e in events if e["type"] in ("item/started", "item/completed")]
    assert opened["tool"] == "other" and opened["presentation"]["label"]["pending"] == "Running tool"
    assert done["type"] == "toolCall" and done["tool"] == "lookup" and done["server"] == "bb"
    assert done["arguments"] == {"query": "q"} and done["presentation"] == PRES


# -- end to end: an ACP agent that launches the server and calls the tool ------------------

AGENT = r"""
import json, os, subprocess, sys, uuid

log = open(sys.argv[1], "a")
session_servers = {}
servers = {}


def record(entry):
    log.write(json.dumps(entry) + "\n")
    log.flush()


def send(message):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def update(session, body):
    send({"method": "session/update", "params": {"sessionId": session, "update": body}})


def mcp_launch(spec):
    # what an agent does with a stdio McpServer: spawn command + args with env, speak MCP on its stdio
    env = {**os.environ, **{e["name"]: e["value"] for e in spec["env"]}}
    proc = subprocess.Popen([spec["command"], *spec["args"]], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, start_new_session=True)
    record({"relayPid": proc.pid})
    server = {"proc": proc, "next": 0}
    rpc(server, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "test-agent", "version": "0"}})
    proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    proc.stdin.flush()
    server["tools"] = rpc(server, "tools/list", {})["result"]["tools"]
    record({"tools": server["tools"]})
    return server


def rpc(server, method, params):
    server["next"] += 1
    ident = server["next"]
    server["proc"].stdin.write((json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}) + "\n").encode())
    server["proc"].stdin.flush()
    while True:
        answer = json.loads(server["proc"].stdout.readline())
        if answer.get("id") == ident:
            return answer


for line in sys.stdin:
    message = json.loads(line)
    method, mid, params = message.get("method"), message.get("id"), message.get("params") or {}
    if method is None or mid is None:
        continue
    if method == "initialize":
        send({"id": mid, "result": {"protocolVersion": 1, "agentCapabilities": {"promptCapabilities": {}}}})
    elif method == "session/new":
        record({"sessionNew": params})
        session = f"sess-{uuid.uuid4().hex[:8]}"
        session_servers[session] = [s for s in params["mcpServers"] if s["name"] == "bb-bridge"]
        send({"id": mid, "result": {"sessionId": session}})
    elif method == "session/prompt":
        session = params["sessionId"]
        text = params["prompt"][-1]["text"]
        if text.startswith("call ") and session_servers[session]:
            title, args = text[5:].split("|", 1)
            if session not in servers:
                servers[session] = mcp_launch(session_servers[session][0])
            update(session, {"sessionUpdate": "tool_call", "toolCallId": "tc-1", "title": title, "kind": "other",
                             "status": "pending", "rawInput": {}})
            # the tool the title names (mcp__bb-bridge__NAME); a Cursor-like title ("MCP: tool") names none: lookup
            name = title.removeprefix("mcp__bb-bridge__") if title.startswith("mcp__bb-bridge__") else "lookup"
            answer = rpc(servers[session], "tools/call", {"name": name, "arguments": json.loads(args)})
            record({"toolResult": answer})
            result = answer["result"]
            said = "".join(c.get("text", "") for c in result["content"])
            update(session, {"sessionUpdate": "tool_call_update", "toolCallId": "tc-1",
                             "status": "failed" if result["isError"] else "completed",
                             "content": [{"type": "content", "content": {"type": "text", "text": said}}]})
            update(session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": f"tool said: {said}"}})
        else:
            update(session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "no tools"}})
        send({"id": mid, "result": {"stopReason": "end_turn"}})
    else:
        send({"id": mid, "error": {"code": -32601, "message": f"no {method}"}})
"""


@asynccontextmanager
async def acp_bridge(tmp_path: Path) -> AsyncIterator[tuple[Any, Path]]:
    script, log = tmp_path / "agent.py", tmp_path / "agent.log"
    script.write_text(AGENT)
    acp = AcpBridge(Launch(sys.executable, (str(script), str(log))), base_env={"PATH": os.environ.get("PATH", "")})
    with trio.fail_after(60):
        async with in_process(acp.bridge) as runtime:
            await runtime.call("initialize", INIT)
            yield runtime, log


def agent_log(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split(") ", 1)[1].startswith("Z")  # a zombie has exited


@pytest.mark.parametrize("title", ["mcp__bb-bridge__lookup", "MCP: tool"])
async def test_an_acp_agent_calls_a_declared_tool_end_to_end(tmp_path: Path, title: str) -> None:
    async with acp_bridge(tmp_path) as (runtime, log):
        tool = {"name": "lookup", "description": "Look something up", "inputSchema": SCHEMA, "presentation": PRES}
        started = await runtime.call(
            "thread/start", {"threadId": THREAD, "cwd": str(tmp_path), "options": FULL, "dynamicTools": [tool]}
        )
        session = started["providerThreadId"]
        (new,) = [e["sessionNew"] for e in agent_log(log) if "sessionNew" in e]
        (server,) = new["mcpServers"]
        assert server["name"] == "bb-bridge" and server["command"] == sys.executable
        assert [e["name"] for e in server["env"]] == [mcp_relay.SOCKET_ENV, mcp_relay.TOKEN_ENV]
        socket_path = server["env"][0]["value"]
        assert os.path.exists(socket_path)

        runtime.resolution = {"success": True, "contentItems": [{"type": "inputText", "text": "sunny, 21°C"}]}
        await runtime.call("turn/start", turn_params(THREAD, session, f'call {title}|{{"query": "weather"}}'))
        await runtime.wait_until(lambda: "turn/completed" in runtime.types(THREAD))

        ((method, params),) = runtime.requests  # exactly one item/tool/call
        assert method == "item/tool/call"
        assert params["callId"].startswith("acp-mcp-lookup-")
        assert {k: v for k, v in params.items() if k != "callId"} == {
            "providerThreadId": session,
            "threadId": THREAD,
            "turnId": None,
            "tool": "lookup",
            "arguments": {"query": "weather"},
        }
        logged = agent_log(log)
        (tools,) = [e["tools"] for e in logged if "tools" in e]
        assert tools == [{"name": "lookup", "description": "Look something up", "inputSchema": SCHEMA}]
        (answer,) = [e["toolResult"] for e in logged if "toolResult" in e]
        assert answer["result"] == {"content": [{"type": "text", "text": "sunny, 21°C"}], "isError": False}

        completed = [e["item"] for e in runtime.events[THREAD] if e["type"] == "item/completed"]
        (tool_item,) = [i for i in completed if i["type"] == "toolCall"]
        assert tool_item["tool"] == "lookup" and tool_item["server"] == "bb" and tool_item["status"] == "completed"
        assert tool_item["arguments"] == {"query": "weather"} and tool_item["result"] == "sunny, 21°C"
        assert tool_item["presentation"] == PRES
        assert any(i["type"] == "agentMessage" and i["text"] == "tool said: sunny, 21°C" for i in completed)

        (relay,) = [e["relayPid"] for e in logged if "relayPid" in e]
        await runtime.call(
            "thread/stop", {"threadId": THREAD, "providerThreadId": session, "intent": "release", "activeTurnId": None}
        )
        assert not os.path.exists(socket_path) and not os.path.exists(os.path.dirname(socket_path))
        with trio.fail_after(10):  # the relay (in its own session, out of the agent's group) ends with the socket
            while not _gone(relay):
                await trio.sleep(0.05)


async def test_a_failed_tool_call_reaches_the_agent_as_an_error(tmp_path: Path) -> None:
    async with acp_bridge(tmp_path) as (runtime, log):
        tool = {"name": "lookup", "description": "d", "inputSchema": SCHEMA}
        started = await runtime.call(
            "thread/start", {"threadId": THREAD, "cwd": str(tmp_path), "options": FULL, "dynamicTools": [tool]}
        )
        runtime.resolution = {"success": False, "contentItems": [{"type": "inputText", "text": "quota exceeded"}]}
        await runtime.call("turn/start", turn_params(THREAD, started["providerThreadId"], 'call bb-bridge/lookup|{"query": "q"}'))  # fmt: skip
        await runtime.wait_until(lambda: "turn/completed" in runtime.types(THREAD))
        (answer,) = [e["toolResult"] for e in agent_log(log) if "toolResult" in e]
        assert answer["result"] == {"content": [{"type": "text", "text": "quota exceeded"}], "isError": True}
        (tool_item,) = [e["item"] for e in runtime.events[THREAD] if e["type"] == "item/completed" and e["item"]["type"] == "toolCall"]  # fmt: skip
        assert (
            tool_item["error"] == "quota exceeded" and tool_item["server"] == "bb" and tool_item["status"] == "failed"
        )
        assert tool_item["presentation"] == {"label": {"pending": "Running lookup", "completed": "Ran lookup"}, "icon": {"glyph": "Toolbox"}}  # fmt: skip


async def test_a_thread_without_tools_offers_no_server(tmp_path: Path) -> None:
    async with acp_bridge(tmp_path) as (runtime, log):
        await runtime.call("thread/start", {"threadId": THREAD, "cwd": str(tmp_path), "options": FULL})
        (new,) = [e["sessionNew"] for e in agent_log(log) if "sessionNew" in e]
        assert new["mcpServers"] == []


async def test_a_long_tmpdir_puts_the_hosts_socket_under_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A socket's path has room for ~100 bytes: under a TMPDIR too deep for that (an agent's own home in a test's
    temporary directory), the host's socket goes to /tmp instead of failing the thread's construction."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    async with hosting(Calls()) as host:
        assert host.path is not None and host.path.startswith("/tmp/") and len(host.path.encode()) <= 100
        stream, answer = await hello(host)
        assert answer == b"ok\n"
        await stream.aclose()
    assert not list(deep.iterdir())  # nothing was left in the deep TMPDIR
