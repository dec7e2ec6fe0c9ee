"""An MCP server a client brings for its thread (issue 36, `options.tools.mcpServers`: what `bbridge acp` passes
from an editor's `session/new`) reaches a Codex thread and a pi thread as a callable tool.

The REAL `codex app-server` and the REAL pi (pinned by `make live-agents`), each against its scripted model server
on 127.0.0.1, behind one real `Daemon` whose tool host allows clients' servers and hosts nothing else. Each thread
brings its own real `@modelcontextprotocol/server-everything` (`make mcp-servers`), started in the thread's
working directory; the scripted model calls `editor__echo`, the server's echo reaches the model, no client is
asked, each thread ran its own server, and releasing a thread stops its server. Every wait is bounded; nothing the
test starts outlives it.
"""

from __future__ import annotations

from pathlib import Path

from bbridge.toolhost.catalog import Catalog
from bbridge.toolhost.host import Host
from tests.live.agents import tool_items, world
from tests.live.processes import leftovers, no_leftovers
from tests.live.runner import EVERYTHING, server_everything
from tests.support import connect, running
from tests.test_hosting_daemon import until


def everything(argv: list[str]) -> bool:
    return str(EVERYTHING) in argv


async def test_a_clients_mcp_server_reaches_a_codex_and_a_pi_thread_as_a_callable_tool(tmp_path: Path) -> None:
    server = {"name": "editor", "command": server_everything(), "env": {"LOG_LEVEL": "warn"}}
    host = Host(Catalog([], [], [], []), client_servers=True)
    (tmp_path / "codex").mkdir()
    (tmp_path / "pi").mkdir()
    with world("codex", tmp_path / "codex") as codex, world("pi", tmp_path / "pi") as pi:
        codex.thread, pi.thread = "thr_editor_codex", "thr_editor_pi"
        providers = {codex.provider: codex.config, pi.provider: pi.config}
        async with host.serving(), running(tmp_path, providers, tool_host=host) as (_, path):
            async with connect(path) as client:
                for agent in (codex, pi):
                    agent.script("editor__echo", {"message": f"hello from {agent.provider}"})
                    start = agent.start(())
                    start["options"]["tools"] = {"mcpServers": [server]}
                    ptid = (await client.request("thread/start", start))["providerThreadId"]
                    await client.request("turn/start", agent.turn(ptid))
                    await client.wait_for(lambda agent=agent: client.settled(agent.thread), timeout=60)
                for agent in (codex, pi):  # one server per thread, in its working directory
                    assert len(leftovers([agent.cwd], everything)) == 1
                await client.request(
                    "thread/stop", {"threadId": codex.thread, "intent": "release", "activeTurnId": None}
                )
                await until(lambda: not leftovers([codex.cwd], everything))
                assert len(leftovers([pi.cwd], everything)) == 1  # the other thread's server serves on
        no_leftovers([tmp_path], "a process of the daemon or of a thread's MCP server outlived them")
    assert client.requests == []
    for agent in (codex, pi):
        assert f"Echo: hello from {agent.provider}" in agent.tool_result_text()
        [item] = tool_items(client, agent.thread)
        assert (item["tool"], item["status"]) == ("editor__echo", "completed")
