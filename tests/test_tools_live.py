"""A client's tool, end to end, on every agent bridge: declared on `thread/start`, called by the model, checked by
the daemon, answered by the client, and the answer back in the model's next request (issue 13).

Four agents (`tests.live.agents`), each through a real `Daemon` on a Unix socket and a `TestClient`: the REAL
Claude Code CLI, the REAL `codex app-server` and the REAL pi (pinned by `make live-agents`) against their scripted
model servers on 127.0.0.1, and a small ACP agent (the one of `tests/test_acp_tools.py`) that launches the bridge's
`bb-bridge` MCP server from `session/new` as a real ACP agent does. For each: a call with valid arguments reaches
the client exactly once and its answer reaches the model; a call whose arguments fail the schema never reaches the
client, and the model's next request carries the daemon's refusal instead. Every wait is bounded; the daemon stops
every process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bbridge.wire import rpc
from tests.live.agents import AGENTS, THREAD, Agent, run_turn, tool_calls, tool_items, world

PRESENTATION = {"label": {"pending": "Looking up", "completed": "Looked up"}, "icon": {"glyph": "Search"}}
LOOKUP = {
    "name": "lookup",
    "description": "Looks a query up in the client's index",
    "inputSchema": {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": False,
    },
    "presentation": PRESENTATION,
}
ANSWER = "sunny, 21 degrees"
REFUSAL = "Tool \"lookup\" arguments are invalid at /query: 3 is not of type 'string'"


def answer(request: rpc.Request) -> Any:
    assert request.method == "item/tool/call"
    return {"success": True, "contentItems": [{"type": "inputText", "text": ANSWER}]}


@pytest.fixture(params=AGENTS)
def agent(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Agent]:
    with world(request.param, tmp_path) as agent:
        yield agent


async def test_a_valid_call_reaches_the_client_once_and_its_answer_the_model(agent: Agent, tmp_path: Path) -> None:
    agent.script("lookup", {"query": "weather"})
    client = await run_turn(agent, tmp_path, tools=[LOOKUP], answer=answer)
    [call] = tool_calls(client)
    assert (call["tool"], call["arguments"], call["threadId"]) == ("lookup", {"query": "weather"}, THREAD)
    assert ANSWER in agent.tool_result_text()
    [item] = tool_items(client)
    assert item["tool"] == "lookup" and item["status"] == "completed"
    assert item["presentation"]["label"] == PRESENTATION["label"]


# pi coerces `3` to `"3"` (its own schema conversion) before calling: its daemon-side refusal is in test_pi_live
@pytest.mark.parametrize("agent", [a for a in AGENTS if a != "pi"], indirect=True)
async def test_a_call_failing_the_schema_is_refused_to_the_model_and_never_reaches_the_client(
    agent: Agent, tmp_path: Path
) -> None:
    agent.script("lookup", {"query": 3})
    client = await run_turn(agent, tmp_path, tools=[LOOKUP], answer=answer)
    assert tool_calls(client) == []
    assert REFUSAL in agent.tool_result_text().replace('\\"', '"')
