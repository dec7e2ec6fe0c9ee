"""A tool the daemon hosts, called live by every agent (issue 35): declared once in `bbridge.toml`, offered to
each thread with no client declaring it, answered by the daemon with no client asked.

Each agent of `tests.live.agents` — the REAL Claude Code CLI, the REAL `codex app-server` and the REAL pi
(pinned by `make live-agents`) against their scripted model servers on 127.0.0.1, and the small ACP agent of
`tests/test_acp_tools.py` — runs behind a real `Daemon` whose tool host (`bbridge.toolhost.host.load_host`) holds
one `[tools.where_is]` command tool with `policy = "allow"`: this Python interpreter running a script that prints
its argv and its working directory. The client starts the thread with no `dynamicTools` and answers nothing; the
scripted model calls the tool under the name its agent offers it by (Claude Code and the ACP agent:
`mcp__bb-bridge__where_is`; codex and pi: `where_is`). The tool's output, run in the thread's working directory,
is in the model's next request, no request reached the client, and the tool item carries the tool's
presentation.

And a real MCP server's tool (`@modelcontextprotocol/server-everything`, `make mcp-servers`) called by two
different agents, Claude Code and codex, each on its own thread of one daemon: `[mcp_servers.everything]`
started once, its `everything__echo` answering both. Every wait is bounded; nothing a test starts outlives it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bbridge.toolhost.host import Host, load_host
from bbridge.toolhost.mcp import mcp_servers
from tests.live.agents import AGENTS, Agent, run_turn, start_and_turn, tool_items, world
from tests.live.processes import leftovers, no_leftovers
from tests.live.runner import EVERYTHING, server_everything
from tests.support import connect, running

TOOL = "where_is"
LABEL = {"pending": "Locating", "completed": "Located"}
SCRIPT = 'import os, sys\nprint("hosted", *sys.argv[1:], "in", os.getcwd())\n'


def hosting(root: Path) -> Host:
    """The tool host of a `bbridge.toml` declaring TOOL: argv only, no shell, no environment."""
    script = root / "where_is.py"
    script.write_text(SCRIPT)
    config = root / "bbridge.toml"
    config.write_text(f"""\
[tools.{TOOL}]
description = "Says where a place is"
schema = {{ type = "object", properties = {{ place = {{ type = "string" }} }}, required = ["place"] }}
command = [{json.dumps(sys.executable)}, {json.dumps(str(script))}, "{{place}}"]
policy = "allow"
env = []
presentation = {{ label = {{ pending = "{LABEL["pending"]}", completed = "{LABEL["completed"]}" }}, icon = {{ glyph = "Map" }} }}
""")
    host = load_host(config, None, None)
    assert [tool.name for tool in host.offered()] == [TOOL] and host.refused == []
    return host


@pytest.fixture(params=AGENTS)
def agent(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Agent]:
    with world(request.param, tmp_path) as agent:
        yield agent


async def test_a_hosted_tool_runs_with_no_client_asked_and_its_output_reaches_the_model(
    agent: Agent, tmp_path: Path
) -> None:
    host = hosting(tmp_path)
    agent.script(TOOL, {"place": "Lisbon"})
    client = await run_turn(agent, tmp_path, tool_host=host)  # no dynamicTools declared, no request answered
    assert client.requests == []  # neither the tool call nor an approval reached the client
    assert f"hosted Lisbon in {agent.cwd}" in agent.tool_result_text()
    [item] = tool_items(client)
    assert (item["tool"], item["status"]) == (TOOL, "completed")
    assert item["presentation"]["label"] == LABEL


def everything_host(root: Path) -> Host:
    """The tool host of `[mcp_servers.everything]`: the real server-everything, run in `root` (so the leftover
    check sees it), every call allowed; its tools join the host once the server runs (`mcp_servers`)."""
    config = root / "bbridge.toml"
    config.write_text(f"""\
[mcp_servers.everything]
command = {json.dumps(server_everything())}
policy = "allow"
cwd = {json.dumps(str(root))}
""")
    host = load_host(config, None, None)
    assert [server.name for server in host.catalog.servers] == ["everything"] and host.refused == []
    return host


async def test_two_agents_call_one_real_mcp_server_tool_through_one_daemon(tmp_path: Path) -> None:
    """Claude Code and codex, each on its thread of one daemon, call `everything__echo`: one server process serves
    both calls, each echo reaches its own model, no client is asked, nothing outlives the daemon."""
    host = everything_host(tmp_path)
    (tmp_path / "claude").mkdir()
    (tmp_path / "codex").mkdir()
    with world("claude-code", tmp_path / "claude") as claude, world("codex", tmp_path / "codex") as codex:
        codex.thread = "thr_tools_live_codex"
        providers = {claude.provider: claude.config, codex.provider: codex.config}
        async with mcp_servers(host.catalog.servers) as served:
            assert host.extend(served.tools, served.refused) == [] and served.refused == []
            async with running(tmp_path, providers, tool_host=host) as (_, path), connect(path) as client:
                for agent in (claude, codex):
                    agent.script("everything__echo", {"message": f"hello from {agent.provider}"})
                    await start_and_turn(client, agent)
                assert len(leftovers([tmp_path], lambda argv: str(EVERYTHING) in argv)) == 1  # one server
        no_leftovers([tmp_path], "a process of the daemon or of its MCP server outlived them")
    assert client.requests == []
    for agent in (claude, codex):
        assert f"Echo: hello from {agent.provider}" in agent.tool_result_text()
        [item] = tool_items(client, agent.thread)
        assert (item["tool"], item["status"]) == ("everything__echo", "completed")
