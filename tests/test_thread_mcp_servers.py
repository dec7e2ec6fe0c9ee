"""MCP servers a construction brings for its thread alone (issue 36, `options.tools.mcpServers`): started by the
real tool host for that thread, its tools offered and callable there only, stopped when the thread is released
or the host stops, refused unless the daemon allows clients' servers; a server that does not start leaves the
construction without its tools, said in `daemon/status`.

The server is the standard-library one of tests/mcp_server.py, run in the thread's `cwd` (a folder of the test's
own, so its processes can be counted); the bridge is tests/fakes/fake_bridge.py in its `tool` mode.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from bbridge.toolhost.catalog import Catalog
from bbridge.toolhost.host import Host
from bbridge.wire import rpc
from tests.live.processes import leftovers
from tests.support import connect, fake_provider, running
from tests.test_hosting_daemon import bridge_saw, offered_names, run_call, start, until

SERVER = str(Path(__file__).with_name("mcp_server.py"))
TINY = {"name": "editor tools", "command": [sys.executable, SERVER], "env": {"TINY_MARK": "1"}}  # → editor_tools


def ours(argv: list[str]) -> bool:
    return SERVER in argv


@asynccontextmanager
async def daemon_with(tmp_path: Path, host: Host) -> AsyncIterator[tuple[Any, Path]]:
    async with host.serving():
        async with running(
            tmp_path, {"fake": fake_provider("tool")}, tool_host=host, record_dir=tmp_path / "rec"
        ) as running_daemon:
            yield running_daemon


def thread_start(thread: str, cwd: Path, servers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {**start(thread, tools=None if servers is None else {"mcpServers": servers}), "cwd": str(cwd)}


async def test_a_thread_calls_its_own_server_another_sees_nothing_and_release_stops_it(tmp_path: Path) -> None:
    host = Host(Catalog([], [], [], []), client_servers=True)
    (tmp_path / "one").mkdir()
    async with daemon_with(tmp_path, host) as (daemon, path), connect(path) as client:
        await client.request("thread/start", thread_start("thr_one", tmp_path / "one", [TINY]))
        await client.request("thread/start", thread_start("thr_two", tmp_path))
        (sent,) = bridge_saw(tmp_path / "rec", "thr_one", "thread/start")
        assert "editor_tools__echo" in offered_names(sent) and sent["options"] == {}
        (other,) = bridge_saw(tmp_path / "rec", "thr_two", "thread/start")
        assert offered_names(other) == []  # another thread is offered none of them
        assert len(leftovers([tmp_path / "one"], ours)) == 1

        got = await run_call(client, {"tool": "editor_tools__echo", "arguments": {"text": "hi"}}, thread="thr_one")
        assert got["success"] and "hi" in str(got["contentItems"])
        assert client.requests == []  # policy allow: no approval, no relayed call
        refused = await run_call(client, {"tool": "editor_tools__echo", "arguments": {"text": "x"}}, thread="thr_two")
        assert not refused["success"]  # the other thread cannot call it (an undeclared tool)

        [entry] = (await client.request("daemon/status", {}))["hostedTools"]["threads"]
        assert (entry["threadId"], entry["servers"]) == ("thr_one", ["editor_tools"])
        assert "editor_tools__echo" in entry["tools"]
        assert [refusal["key"] for refusal in entry["refused"]] == [f"tool {'x' * 70!r}"]  # the unmappable name

        await client.request("thread/stop", {"threadId": "thr_one", "intent": "release", "activeTurnId": None})
        await until(lambda: not leftovers([tmp_path / "one"], ours))
        assert (await client.request("daemon/status", {}))["hostedTools"]["threads"] == []


async def test_the_host_stopping_stops_every_thread_server(tmp_path: Path) -> None:
    host = Host(Catalog([], [], [], []), client_servers=True)
    async with daemon_with(tmp_path, host) as (_daemon, path), connect(path) as client:
        for thread in ("thr_a", "thr_b"):
            await client.request("thread/start", thread_start(thread, tmp_path, [TINY]))
        assert len(leftovers([tmp_path], ours)) == 2
    assert leftovers([tmp_path], ours) == {}  # the host's exit waited for them


@pytest.mark.parametrize("hosting", ["none", "not allowed"])
async def test_a_clients_server_is_refused_unless_the_daemon_allows_it(tmp_path: Path, hosting: str) -> None:
    options: dict[str, Any] = {} if hosting == "none" else {"tool_host": Host(Catalog([], [], [], []))}
    async with running(tmp_path, {"fake": fake_provider("tool")}, **options) as (daemon, path):
        async with connect(path) as client:
            with pytest.raises(rpc.RpcError) as refused:
                await client.request("thread/start", thread_start("thr_one", tmp_path, [TINY]))
            assert refused.value.code == rpc.INVALID_PARAMS
            assert "--allow-client-mcp-servers" in refused.value.message
            assert daemon.registry.provider_of("thr_one") is None  # nothing constructed
    assert leftovers([tmp_path], ours) == {}


async def test_a_server_that_does_not_start_leaves_the_thread_without_its_tools(tmp_path: Path) -> None:
    host = Host(Catalog([], [], [], []), client_servers=True)
    broken = {"name": "broken", "command": [sys.executable, SERVER, "--broken"]}
    async with daemon_with(tmp_path, host) as (_daemon, path), connect(path) as client:
        await client.request("thread/start", thread_start("thr_one", tmp_path, [broken, TINY]))
        (sent,) = bridge_saw(tmp_path / "rec", "thr_one", "thread/start")
        names = offered_names(sent)
        assert "editor_tools__echo" in names and not any(name.startswith("broken__") for name in names)
        [entry] = (await client.request("daemon/status", {}))["hostedTools"]["threads"]
        [refusal] = [r for r in entry["refused"] if r["section"] == "mcp_servers.broken"]
        assert "did not start" in refusal["error"] and "cannot open the database" in refusal["error"]


async def test_a_malformed_entry_is_refused_before_anything_starts(tmp_path: Path) -> None:
    host = Host(Catalog([], [], [], []), client_servers=True)
    async with daemon_with(tmp_path, host) as (_daemon, path), connect(path) as client:
        for bad in ({"name": "x", "command": []}, {"name": "x", "command": ["y"], "shell": True}):
            with pytest.raises(rpc.RpcError) as refused:
                await client.request("thread/start", thread_start("thr_one", tmp_path, [bad]))
            assert refused.value.code == rpc.INVALID_PARAMS and "mcpServers" in refused.value.message
        with pytest.raises(rpc.RpcError) as twice:
            await client.request(
                "thread/start", thread_start("thr_one", tmp_path, [TINY, {**TINY, "name": "editor_tools"}])
            )
        assert "distinct names" in twice.value.message
        await trio.sleep(0)
    assert leftovers([tmp_path], ours) == {}
