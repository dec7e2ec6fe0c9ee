"""Every agent behind one shape, for the tests that run a tool call through a real `Daemon` on each of them.

An `Agent` is one provider's world: its daemon entry, its thread and turn requests, how its scripted model calls a
tool, and what its next request carried back. The REAL Claude Code CLI, the REAL `codex app-server` and the REAL pi
(pinned by `make live-agents`) run against their scripted model servers on 127.0.0.1; the ACP agent is the small
one of `tests/test_acp_tools.py`, which launches the bridge's `bb-bridge` MCP server from `session/new` as a real
ACP agent does. `world` opens the scripted server an agent needs and closes it after the test; `run_turn` runs one
turn through a real daemon and checks that no process of the run outlived it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from bbridge.daemon.config import ProviderConfig
from bbridge.wire import rpc
from bridges.codex import launch
from tests.live import anthropic, openai
from tests.live import openai_chat as chat
from tests.live import pi as pi_cli
from tests.live.claude import ensure_cli
from tests.live.claude import offline_env as claude_env
from tests.live.codex import installed_cli
from tests.live.codex import offline_env as codex_env
from tests.live.processes import no_leftovers
from tests.live.runner import bridge_provider
from tests.support import FULL, TestClient, connect, running
from tests.test_acp_tools import AGENT

THREAD = "thr_tools_live"
MCP_PREFIX = "mcp__bb-bridge__"  # how Claude Code and an ACP agent name a tool of the bridge's MCP server
AGENTS = ["claude-code", "codex", "pi", "acp"]


class Agent:
    """One provider's world: its daemon entry, how to start a thread and a turn, and what the model saw."""

    provider: str
    config: ProviderConfig
    cwd: Path  # the thread's working directory
    thread = THREAD  # the thread's id (one per agent when several share a daemon)

    def script(self, tool: str, arguments: dict[str, Any]) -> None:
        """The model's first answer calls `tool` (the daemon's name for it) with `arguments`; its second is text."""
        raise NotImplementedError

    def tool_result_text(self) -> str:
        """What the model's (or agent's) next request carried back for the tool call."""
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        return {**FULL, "envVars": {}}

    def start(self, tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """A `thread/start` declaring `tools` (no `dynamicTools` at all when none)."""
        start = {"providerId": self.provider, "threadId": self.thread, "cwd": str(self.cwd), "options": self.options()}
        return start | ({"dynamicTools": list(tools)} if tools else {})

    def prompt(self) -> str:
        return "Look the weather up."

    def turn(self, ptid: str) -> dict[str, Any]:
        return {
            "providerId": self.provider,
            "threadId": self.thread,
            "providerThreadId": ptid,
            "input": [{"type": "text", "text": self.prompt(), "mentions": []}],
            "clientRequestId": "creq_abcdefghjk",
            "options": self.options(),
        }


class Claude(Agent):
    provider = "claude-code"

    def __init__(self, root: Path, api: anthropic.AnthropicServer) -> None:
        home = root / "home"
        home.mkdir()
        env = claude_env(api.url, home, extra={"BB_CLAUDE_CODE_EXECUTABLE": str(ensure_cli())})
        self.config = bridge_provider("bridges.claude_code", env, root)
        self.api, self.cwd = api, root

    def script(self, tool: str, arguments: dict[str, Any]) -> None:
        call = anthropic.tool_use(MCP_PREFIX + tool, arguments)
        self.api.script(anthropic.reply(call), anthropic.reply(anthropic.text("Done.")))

    def tool_result_text(self) -> str:
        return json.dumps(self.api.messages()[-1].tool_results())


class Codex(Agent):
    provider = "codex"

    def __init__(self, root: Path, api: openai.ScriptedResponses) -> None:
        env = codex_env(root, api.base_url)
        env[launch.COMMAND_ENV] = str(installed_cli())
        env[launch.ARGS_ENV] = json.dumps(["app-server"])
        self.config = bridge_provider("bridges.codex", env, root)
        self.api, self.cwd = api, root

    def script(self, tool: str, arguments: dict[str, Any]) -> None:
        self.api.push(openai.function_call(tool, arguments, call_id="call_tool"), openai.text("Done."))

    def tool_result_text(self) -> str:
        outputs = [i for i in self.api.posts()[-1].body["input"] if i.get("type") == "function_call_output"]
        return json.dumps(outputs)


class Pi(Agent):
    provider = "pi"

    def __init__(self, root: Path, api: chat.ScriptedChat) -> None:
        pi = pi_cli.ensure_pi()
        self.cwd = root / "ws"
        self.cwd.mkdir()
        env = pi_cli.offline_env(
            api.base_url, root / "home", extra={"BB_PI_NODE": str(pi.node), "BB_PI_CLI": str(pi.cli)}
        )
        self.config = bridge_provider("bridges.pi", env, self.cwd)
        self.api = api

    def options(self) -> dict[str, Any]:
        return {**super().options(), "model": f"{pi_cli.PROVIDER}/{pi_cli.MODEL}"}

    def script(self, tool: str, arguments: dict[str, Any]) -> None:
        self.api.push(chat.tool_call(tool, arguments), chat.text("Done."))

    def tool_result_text(self) -> str:
        return json.dumps([m for m in self.api.posts()[-1].body["messages"] if m.get("role") == "tool"])


class Acp(Agent):
    provider = "acp-tools"

    def __init__(self, root: Path) -> None:
        script, self.log = root / "agent.py", root / "agent.log"
        script.write_text(AGENT)
        command = [sys.executable, "-m", "bridges.acp", "--", sys.executable, str(script), str(self.log)]
        self.config = ProviderConfig(command=command, cwd=str(root))
        self.cwd = root

    def script(self, tool: str, arguments: dict[str, Any]) -> None:
        self.call = f"call {MCP_PREFIX}{tool}|{json.dumps(arguments)}"

    def prompt(self) -> str:
        return self.call

    def tool_result_text(self) -> str:
        entries = [json.loads(line) for line in self.log.read_text().splitlines()]
        return json.dumps([e["toolResult"] for e in entries if "toolResult" in e])


@contextlib.contextmanager
def world(name: str, root: Path) -> Iterator[Agent]:
    """The agent `name` (one of AGENTS) in `root`, with the scripted model server it talks to while the test runs."""
    if name == "claude-code":
        with anthropic.AnthropicServer() as messages:
            yield Claude(root, messages)
    elif name == "codex":
        with openai.ScriptedResponses() as responses:
            yield Codex(root, responses)
    elif name == "pi":
        with chat.ScriptedChat() as completions:
            yield Pi(root, completions)
    else:
        yield Acp(root)


async def run_turn(
    agent: Agent,
    root: Path,
    *,
    tools: Sequence[dict[str, Any]] = (),
    answer: Callable[[rpc.Request], Any] | None = None,
    **daemon: Any,
) -> TestClient:
    """One thread (declaring `tools`) and one turn through a real daemon (`daemon`: its keyword options), the
    client answering requests with `answer`; returns the client once the daemon stopped and no process is left."""
    async with running(root, {agent.provider: agent.config}, **daemon) as (_, path), connect(path, answer) as client:
        await start_and_turn(client, agent, tools)
    no_leftovers([root], f"a process of the {agent.provider} run outlived its daemon")
    return client


async def start_and_turn(client: TestClient, agent: Agent, tools: Sequence[dict[str, Any]] = ()) -> None:
    """The agent's thread started (declaring `tools`) and one turn run to its end, through `client`'s daemon."""
    ptid = (await client.request("thread/start", agent.start(tools)))["providerThreadId"]
    await client.request("turn/start", agent.turn(ptid))
    await client.wait_for(lambda: client.settled(agent.thread), timeout=30)


def tool_calls(client: TestClient) -> list[Any]:
    """The `item/tool/call` requests relayed to the client."""
    return [msgspec.json.decode(r.params) for r in client.requests if r.method == "item/tool/call"]


def tool_items(client: TestClient, thread: str = THREAD) -> list[dict[str, Any]]:
    """The thread's completed `toolCall` items."""
    return [e["item"] for e in client.of(thread, "item/completed") if e["item"]["type"] == "toolCall"]
