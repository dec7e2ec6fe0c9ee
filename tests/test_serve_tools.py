"""`bbridge serve` hosts the tools of its `bbridge.toml`: a `[tools.NAME]` command and an `[mcp_servers.NAME]`
server's tools, both offered to a thread of the built-in echo bridge and called through it with no client asked
(issue 35). The MCP server is the standard-library one of tests/mcp_server.py: started once by the daemon, stopped
with it. A hosted tool's argument checker dies with its daemon, even a SIGKILLed one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from bbridge.wire import rpc
from tests.live.processes import leftovers
from tests.support import FULL, TestClient, connect
from tests.test_declared_tools import checkers, gone

BBRIDGE = [sys.executable, "-m", "bbridge"]
THREAD = "thr_serve_tools"
SERVER = Path(__file__).with_name("mcp_server.py")


def config(tmp_path: Path) -> Path:
    path = tmp_path / "bbridge.toml"
    path.write_text(
        f"""
[tools.shout]
description = "Says its word in capitals"
schema = {{ type = "object", properties = {{ word = {{ type = "string" }} }}, required = ["word"] }}
command = [{json.dumps(sys.executable)}, "-c", "import sys; print(sys.argv[1].upper())", "{{word}}"]
policy = "allow"

[mcp_servers.mini]
command = [{json.dumps(sys.executable)}, {json.dumps(str(SERVER))}]
policy = "allow"
"""
    )
    return path


async def call(client: TestClient, text: str, request: str) -> None:
    turn = {"input": [{"type": "text", "text": text}], "clientRequestId": request, "options": FULL}
    await client.request("turn/start", {"threadId": THREAD, **turn})


@asynccontextmanager
async def serving(sock: Path, config_file: Path, *flags: str) -> AsyncIterator[TestClient]:
    """`bbridge serve` on `sock` and a client of it; the daemon is stopped (SIGTERM) and must exit cleanly."""
    command = [*BBRIDGE, "serve", "--socket", str(sock), "--config", str(config_file), *flags]
    proc = await trio.lowlevel.open_process(command, stderr=subprocess.DEVNULL)
    try:
        with trio.fail_after(60):
            while not sock.exists():
                await trio.sleep(0.05)
            async with connect(sock) as client:
                yield client
    finally:
        proc.terminate()
        with trio.fail_after(20):
            await proc.wait()
    assert proc.returncode == 0


async def test_serve_offers_and_runs_declared_and_mcp_tools(tmp_path: Path) -> None:
    async with serving(tmp_path / "d.sock", config(tmp_path)) as client:
        status = await client.request("daemon/status", {})
        hosted = {tool["name"]: tool for tool in status["hostedTools"]["tools"]}
        assert {"shout", "mini__echo"} <= set(hosted)
        assert "mcp_servers.mini" in hosted["mini__echo"]["source"]
        start = {"providerId": "echo", "threadId": THREAD, "cwd": str(tmp_path), "options": FULL}
        await client.request("thread/start", start)
        await call(client, 'tool:shout args:{"word":"$(id);x"}', "creq_abcdefghjm")
        await client.wait_for(lambda: client.settled(THREAD))
        await call(client, 'tool:mini__echo args:{"text":"hello"}', "creq_abcdefghjn")
        await client.wait_for(lambda: client.settled(THREAD, 2))
        tools = [e["item"] for e in client.of(THREAD, "item/completed") if e["item"]["type"] == "toolCall"]
        assert [tool["status"] for tool in tools] == ["completed", "completed"]
        assert tools[0]["result"].strip() == "$(ID);X"
        assert "hello" in tools[1]["result"]
        assert client.requests == []  # no client was asked


async def test_serve_starts_a_clients_mcp_server_only_when_allowed(tmp_path: Path) -> None:
    """`--allow-client-mcp-servers`: a thread's own server (`options.tools.mcpServers`) runs with no tool
    configured, its tool answers through the echo bridge, and stopping the daemon stops it; without the flag the
    construction is refused, saying the flag."""
    empty = tmp_path / "bbridge.toml"
    empty.write_text("")
    brought = {"mcpServers": [{"name": "mini", "command": [sys.executable, str(SERVER)]}]}
    start = {"providerId": "echo", "threadId": THREAD, "cwd": str(tmp_path), "options": {**FULL, "tools": brought}}
    for allowed in (False, True):
        flag = ["--allow-client-mcp-servers"] if allowed else []
        async with serving(tmp_path / f"d-{allowed}.sock", empty, *flag) as client:
            if not allowed:
                with pytest.raises(rpc.RpcError) as refused:
                    await client.request("thread/start", start)
                assert "--allow-client-mcp-servers" in refused.value.message
                continue
            await client.request("thread/start", start)
            assert len(leftovers([tmp_path], lambda argv: str(SERVER) in argv)) == 1
            await call(client, 'tool:mini__echo args:{"text":"hello"}', "creq_abcdefghjm")
            await client.wait_for(lambda: client.settled(THREAD))
            [tool] = [e["item"] for e in client.of(THREAD, "item/completed") if e["item"]["type"] == "toolCall"]
            assert tool["status"] == "completed" and "hello" in tool["result"]
    assert leftovers([tmp_path], lambda argv: str(SERVER) in argv) == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
async def test_a_checker_stuck_in_a_hostile_pattern_dies_with_its_killed_daemon(tmp_path: Path) -> None:
    """The checker process is forked from the daemon's event-loop thread, so `PR_SET_PDEATHSIG` kills it when the
    daemon dies, even by SIGKILL, mid-match: left alone, this match would run for a minute or so."""
    config_file = tmp_path / "bbridge.toml"
    config_file.write_text(
        f"""
[tools.match]
description = "A catastrophic-backtracking pattern"
schema = {{ type = "object", properties = {{ s = {{ type = "string", pattern = "^(a+)+$" }} }} }}
command = [{json.dumps(sys.executable)}, "-c", "pass"]
policy = "allow"
"""
    )
    sock = tmp_path / "d.sock"
    serve = [*BBRIDGE, "serve", "--socket", str(sock), "--config", str(config_file)]
    proc = await trio.lowlevel.open_process(serve, stderr=subprocess.DEVNULL)
    try:
        with trio.fail_after(60):
            while not sock.exists():
                await trio.sleep(0.05)
        async with connect(sock) as client:
            start = {"providerId": "echo", "threadId": THREAD, "cwd": str(tmp_path), "options": FULL}
            await client.request("thread/start", start)
            await call(client, 'tool:match args:{"s":"' + "a" * 31 + '!"}', "creq_abcdefghjm")
            with trio.fail_after(10):
                while not (found := checkers(proc.pid)):
                    await trio.sleep(0.01)
            await trio.sleep(0.3)  # it has the call by now, and its 2 s deadline is far off
            [checker] = found
            assert not gone(checker)
            proc.kill()
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    with trio.fail_after(5):
        while not gone(checker):
            await trio.sleep(0.02)
