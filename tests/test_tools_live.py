"""A client's tool, end to end, on every agent bridge: declared on `thread/start`, called by the model, checked by
the daemon, answered by the client, and the answer back in the model's next request (issue 13).

Three agents, each through a real `Daemon` on a Unix socket and a `TestClient`: the REAL Claude Code CLI and the
REAL `codex app-server` (pinned by `make live-agents`) against their scripted model servers on 127.0.0.1, and a
small ACP agent (the one of `tests/test_acp_tools.py`) that launches the bridge's `bb-bridge` MCP server from
`session/new` as a real ACP agent does. For each: a call with valid arguments reaches the client exactly once and
its answer reaches the model; a call whose arguments fail the schema never reaches the client, and the model's
next request carries the daemon's refusal instead. Every wait is bounded; the daemon stops every process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bbridge.daemon.config import ProviderConfig
from bbridge.wire import rpc
from bridges.codex import launch
from tests.live import anthropic, openai
from tests.live.claude import ensure_cli
from tests.live.claude import offline_env as claude_env
from tests.live.codex import installed_cli
from tests.live.codex import offline_env as codex_env
from tests.live.processes import no_leftovers
from tests.live.runner import bridge_provider
from tests.support import FULL, connect, running
from tests.test_acp_tools import AGENT

THREAD = "thr_tools_live"
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


def calls(client: Any) -> list[Any]:
    return [msgspec.json.decode(r.params) for r in client.requests if r.method == "item/tool/call"]


def tool_items(client: Any) -> list[dict[str, Any]]:
    return [
        e["item"] for e in client.events(THREAD) if e["type"] == "item/completed" and e["item"]["type"] == "toolCall"
    ]


class Agent:
    """One provider's world: its daemon entry, how to start a thread and a turn, and what the model saw."""

    provider: str
    config: ProviderConfig

    def script(self, arguments: dict[str, Any]) -> None:
        raise NotImplementedError

    def tool_result_text(self) -> str:
        """What the model's (or agent's) next request carried back for the tool call."""
        raise NotImplementedError

    def start(self, cwd: Path) -> dict[str, Any]:
        return {
            "providerId": self.provider,
            "threadId": THREAD,
            "cwd": str(cwd),
            "options": {**FULL, "envVars": {}},
            "dynamicTools": [LOOKUP],
        }

    def prompt(self, arguments: dict[str, Any]) -> str:
        return "Look the weather up."

    def turn(self, ptid: str, text: str) -> dict[str, Any]:
        return {
            "providerId": self.provider,
            "threadId": THREAD,
            "providerThreadId": ptid,
            "input": [{"type": "text", "text": text, "mentions": []}],
            "clientRequestId": "creq_abcdefghjk",
            "options": {**FULL, "envVars": {}},
        }


class Claude(Agent):
    provider = "claude-code"

    def __init__(self, root: Path, api: anthropic.AnthropicServer) -> None:
        home = root / "home"
        home.mkdir()
        env = claude_env(api.url, home, extra={"BB_CLAUDE_CODE_EXECUTABLE": str(ensure_cli())})
        self.config = bridge_provider("bridges.claude_code", env, root)
        self.api = api

    def script(self, arguments: dict[str, Any]) -> None:
        call = anthropic.tool_use("mcp__bb-bridge__lookup", arguments)
        self.api.script(anthropic.reply(call), anthropic.reply(anthropic.text("Done.")))

    def tool_result_text(self) -> str:
        results = self.api.messages()[-1].tool_results()
        return json.dumps(results)


class Codex(Agent):
    provider = "codex"

    def __init__(self, root: Path, api: openai.ScriptedResponses) -> None:
        env = codex_env(root, api.base_url)
        env[launch.COMMAND_ENV] = str(installed_cli())
        env[launch.ARGS_ENV] = json.dumps(["app-server"])
        self.config = bridge_provider("bridges.codex", env, root)
        self.api = api

    def script(self, arguments: dict[str, Any]) -> None:
        self.api.push(openai.function_call("lookup", arguments, call_id="call_lookup"), openai.text("Done."))

    def tool_result_text(self) -> str:
        outputs = [i for i in self.api.posts()[-1].body["input"] if i.get("type") == "function_call_output"]
        return json.dumps(outputs)


class Acp(Agent):
    provider = "acp-tools"

    def __init__(self, root: Path) -> None:
        script, self.log = root / "agent.py", root / "agent.log"
        script.write_text(AGENT)
        command = [sys.executable, "-m", "bridges.acp", "--", sys.executable, str(script), str(self.log)]
        self.config = ProviderConfig(command=command, cwd=str(root))

    def script(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments

    def prompt(self, arguments: dict[str, Any]) -> str:
        return f"call mcp__bb-bridge__lookup|{json.dumps(arguments)}"

    def tool_result_text(self) -> str:
        entries = [json.loads(line) for line in self.log.read_text().splitlines()]
        return json.dumps([e["toolResult"] for e in entries if "toolResult" in e])


@pytest.fixture
def anthropic_api() -> Iterator[anthropic.AnthropicServer]:
    with anthropic.AnthropicServer() as server:
        yield server


@pytest.fixture
def openai_api() -> Iterator[openai.ScriptedResponses]:
    with openai.ScriptedResponses() as server:
        yield server


@pytest.fixture(params=["claude-code", "codex", "acp"])
def agent(request: pytest.FixtureRequest, tmp_path: Path, anthropic_api: Any, openai_api: Any) -> Agent:
    if request.param == "claude-code":
        return Claude(tmp_path, anthropic_api)
    if request.param == "codex":
        return Codex(tmp_path, openai_api)
    return Acp(tmp_path)


async def run_turn(agent: Agent, root: Path, arguments: dict[str, Any]) -> Any:
    agent.script(arguments)
    async with running(root, {agent.provider: agent.config}) as (_, path), connect(path, answer=answer) as client:
        ptid = (await client.request("thread/start", agent.start(root)))["providerThreadId"]
        await client.request("turn/start", agent.turn(ptid, agent.prompt(arguments)))
        await client.wait_for(lambda: client.settled(THREAD), timeout=30)
    no_leftovers([root], f"a process of the {agent.provider} run outlived its daemon")
    return client


async def test_a_valid_call_reaches_the_client_once_and_its_answer_the_model(agent: Agent, tmp_path: Path) -> None:
    client = await run_turn(agent, tmp_path, {"query": "weather"})
    [call] = calls(client)
    assert (call["tool"], call["arguments"], call["threadId"]) == ("lookup", {"query": "weather"}, THREAD)
    assert ANSWER in agent.tool_result_text()
    [item] = tool_items(client)
    assert item["tool"] == "lookup" and item["status"] == "completed"
    assert item["presentation"]["label"] == PRESENTATION["label"]


async def test_a_call_failing_the_schema_is_refused_to_the_model_and_never_reaches_the_client(
    agent: Agent, tmp_path: Path
) -> None:
    client = await run_turn(agent, tmp_path, {"query": 3})
    assert calls(client) == []
    assert REFUSAL in agent.tool_result_text().replace('\\"', '"')
