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
presentation where the bridge stamps one. Every wait is bounded; the daemon stops every process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bbridge.toolhost.host import Host, load_host
from tests.live.agents import AGENTS, Agent, run_turn, tool_items, world

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
    if agent.shows_presentation:
        assert item["presentation"]["label"] == LABEL
