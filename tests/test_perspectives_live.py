"""A Perspectives panel live (issue 48): the REAL Claude Code, codex and pi as its workers, its planner and
synthesis on codex, called from a REAL Claude Code thread; each CLI against its own scripted model server on
127.0.0.1.

The daemon serves the room in process beside it (`room_face`) and hosts its tools (`load_host(external=...)`), as
`tests/test_perspectives_runs.py` does on fake bridges. The calling thread's scripted model calls
`mcp__bb-bridge__gather_perspectives` (a hosted tool reaches Claude Code through the bridge's `bb-bridge` MCP
server) with three lenses and ends its turn; `[perspectives] panel` puts one lens on each CLI. The hidden threads
run concurrently, so the scripted models answer by what they are asked, not in order: the planner's request gets a
plan for the lenses it lists, a worker's (`Your lens: X`) a finding marked for its lens that names the worker's own
agent and model (as a model might), the synthesizer's a synthesis echoing every finding marker it was given.

What each model was sent is the evidence: the receipt as the caller's tool result; the one delivery, in a later
turn of the caller, reaching the caller's model; the synthesis prompt holding every finding and, `anonymous`, no
agent's or model's name. Then every hidden thread is released: its agent session ends, the caller's stays.

The CLIs are installed by `make live-agents` (skipped only when the npm registry is unreachable). Every wait is
bounded; no process the test started outlives it.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from bbridge.daemon import server
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.runtime import Daemon
from bbridge.perspectives.delivery import RESULT_HEAD
from bbridge.perspectives.prompts import WITHHELD
from bbridge.perspectives.room import Perspectives
from bbridge.perspectives.settings import load_perspectives
from bbridge.serving import room_face
from bbridge.toolhost.host import load_host
from bridges.codex import launch as codex_launch
from tests.live import anthropic, openai, openai_chat
from tests.live import claude as claude_cli
from tests.live import codex as codex_cli
from tests.live import pi as pi_cli
from tests.live.agents import MCP_PREFIX
from tests.live.processes import Watch, leftovers
from tests.live.runner import bridge_provider
from tests.live.scenarios import recorded_options
from tests.support import FULL, TestClient, connect, creq

CALLER = "thr_perspectives_live"
CLAUDE_MODEL = "claude-sonnet-4-5"
PROMPT = "Find the slow path of the importer; ask a panel."
LENSES = ["hot loops", "memory churn", "duplicate work"]
PANEL = ["claude-code", "codex", "pi"]  # lens i's worker
QUESTION = "Where is the slow path of the importer?"
CONTEXT = "It reads a large CSV of orders at start-up."
TABLE = """\
[perspectives]
planner = { provider = "codex" }
panel = ["claude-code", "codex", "pi"]
anonymous = true
planner_s = 20
wrapup_s = 30
hard_cap_s = 90
synthesis_s = 30
spawn_timeout_s = 30
"""
RUN_TIMEOUT = 90  # the hard cap: the run is over, delivered or not
TIMEOUT = 30  # any other wait (a run takes about 3 s)

PLANNER_MARK = "You plan the work of independent experts."
SYNTHESIS_MARK = "You synthesize the independent answers of a panel of experts"
LENS = re.compile(r"^Your lens: (.+)$", re.MULTILINE)
MARKER = re.compile(r"FINDING-[A-Z]+-\d")
MARKERS = {"hot loops": "FINDING-LOOPS-1", "memory churn": "FINDING-CHURN-2", "duplicate work": "FINDING-DUPES-3"}
AGENT_WORDS = re.compile(r"\b(claude|codex|pi)\b", re.IGNORECASE)

WATCH = Watch("an agent CLI or bridge")


@pytest.fixture(scope="module", autouse=True)
def watched() -> Iterator[None]:
    with WATCH.module():
        yield


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    with WATCH.test(tmp_path):
        (tmp_path / "ws").mkdir()
        yield tmp_path


# -- what the scripted models answer --------------------------------------------------------------------------------


def plan(asked: str) -> str:
    """The planner's answer: one prompt per lens its request lists (each a JSON string on a `- ` line)."""
    listed = asked.split("\nLenses (", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    lenses = [json.loads(line.removeprefix("- ")) for line in listed]
    return json.dumps({"prompts": [{"lens": lens, "prompt": f"Examine the importer for {lens}."} for lens in lenses]})


def hidden_answer(asked: str, myself: str) -> str | None:
    """What a hidden thread's model answers the prompt `asked` (None: not a hidden thread's): a plan, a synthesis
    of the finding markers it was given, or a finding for the worker's lens in which the model names itself
    (`myself`: its agent and model, as the delivery's table names them)."""
    if PLANNER_MARK in asked:
        return plan(asked)
    if SYNTHESIS_MARK in asked:
        return "Synthesis: " + ", ".join(sorted(set(MARKER.findall(asked)))) + "."
    lens = LENS.search(asked)
    if lens is None:
        return None
    return f"{MARKERS[lens[1]]}: speaking as {myself}, the importer's {lens[1]} is where the time goes."


def claude_first_text(request: anthropic.Request) -> str:
    """The text of a Claude Code request's first user message: its session's first prompt."""
    content = request.messages[0].get("content") if request.messages else ""
    if isinstance(content, str):
        return content
    return "\n".join(str(block.get("text", "")) for block in content or [] if isinstance(block, dict))


def claude_answer(request: anthropic.Request) -> anthropic.Answer:
    """The model of the calling thread and of the claude-code worker. The caller calls the tool on its prompt, ends
    its turn on the receipt, and acknowledges the delivery."""
    hidden = hidden_answer(claude_first_text(request), f"Claude Code on {request.model}")
    if hidden is not None:
        return anthropic.reply(anthropic.text(hidden))
    if request.tool_results():
        return anthropic.reply(anthropic.text("The panel is at work; its result will follow."))
    if RESULT_HEAD in request.user_text():
        return anthropic.reply(anthropic.text("The panel has answered."))
    if len(request.messages) == 1 and PROMPT in request.user_text():
        arguments = {"question": QUESTION, "context": CONTEXT, "lenses": LENSES}
        return anthropic.reply(anthropic.tool_use(MCP_PREFIX + "gather_perspectives", arguments))
    return anthropic.reply(anthropic.text("OK"))


def codex_user_texts(request: openai.Request) -> list[str]:
    """The texts of a Responses request's user messages (the prompt; codex's own context is its other items)."""
    items = [item for item in request.body.get("input", []) if item.get("role") == "user"]
    return [str(part.get("text", "")) for item in items for part in item.get("content", []) if isinstance(part, dict)]


def codex_answer(request: openai.Request) -> openai.Reply | None:
    hidden = hidden_answer("\n".join(codex_user_texts(request)), f"Codex ({request.body.get('model')})")
    return openai.text(hidden) if hidden is not None else None


def pi_answer(request: openai_chat.Request) -> openai_chat.Reply:
    # pi sends the bare model id; the member's model is pi's `provider/model`, the name the delivery's table shows
    # and the one the synthesis masks (the bare id alone is not masked).
    myself = f"pi on {pi_cli.PROVIDER}/{request.body.get('model')}"
    return openai_chat.text(hidden_answer(request.last_user_text(), myself) or "OK")


# -- the world ---------------------------------------------------------------------------------------------------


@dataclass
class Servers:
    claude: anthropic.AnthropicServer
    codex: openai.ScriptedResponses
    pi: openai_chat.ScriptedChat


def providers(root: Path, servers: Servers) -> dict[str, ProviderConfig]:
    """The three bridges, each on its CLI and scripted server, their HOMEs under `root`."""
    claude, codex, pi = claude_cli.ensure_cli(), codex_cli.installed_cli(), pi_cli.ensure_pi()
    (root / "claude").mkdir()
    claude_env = claude_cli.offline_env(
        servers.claude.url, root / "claude", extra={"BB_CLAUDE_CODE_EXECUTABLE": str(claude)}
    )
    codex_env = codex_cli.offline_env(root / "codex", servers.codex.base_url)
    codex_env[codex_launch.COMMAND_ENV] = str(codex)
    codex_env[codex_launch.ARGS_ENV] = json.dumps(["app-server"])
    pi_extra = {"BB_PI_NODE": str(pi.node), "BB_PI_CLI": str(pi.cli)}
    pi_env = pi_cli.offline_env(servers.pi.base_url, root / "pi" / "home", extra=pi_extra)
    return {
        "claude-code": bridge_provider("bridges.claude_code", claude_env, root / "ws"),
        "codex": bridge_provider("bridges.codex", codex_env, root / "ws"),
        "pi": bridge_provider("bridges.pi", pi_env, root / "ws"),
    }


@asynccontextmanager
async def panel_daemon(root: Path) -> AsyncIterator[tuple[Servers, Perspectives, TestClient]]:
    """The scripted servers, a daemon of the three providers serving the room of TABLE, and a client on it."""
    with ExitStack() as stack:
        servers = Servers(
            stack.enter_context(anthropic.AnthropicServer()),
            stack.enter_context(openai.ScriptedResponses()),
            stack.enter_context(openai_chat.ScriptedChat()),
        )
        servers.claude.default = claude_answer
        servers.codex.route = codex_answer
        servers.pi.default = pi_answer
        every = providers(root, servers)
        config = root / "bbridge.toml"
        config.write_text(TABLE)
        settings, refused = load_perspectives(config)
        assert settings is not None and not refused, refused
        room = Perspectives(settings)
        daemon = Daemon(
            every, text_delta_flush_ms=0, tool_host=load_host(None, None, None, external=room.tools), services=[room]
        )
        async with trio.open_nursery() as nursery:
            sock = root / "bbridge.sock"
            await nursery.start(server.serve, daemon, [server.socket_face(sock), room_face(room)])
            try:
                async with connect(sock) as client:
                    yield servers, room, client
            finally:
                daemon.request_shutdown()
                with trio.fail_after(TIMEOUT):
                    await daemon.stopped.wait()


async def threads_by_provider(client: TestClient) -> dict[str, int]:
    """How many threads each provider's bridge serves (a released thread is no longer one of them)."""
    status = await client.request("daemon/status", {})
    return {row["providerId"]: row.get("threads", 0) for row in status["providers"]}


def agent_of(argv: list[str]) -> str | None:
    """The agent CLI a process runs, by its provider's name (None: another process)."""
    if argv[0].endswith("/claude"):
        return "claude-code"
    if argv[0].endswith("/codex"):
        return "codex"
    return "pi" if len(argv) > 1 and argv[1].endswith("/cli.js") else None


def agents_running(root: Path) -> list[str]:
    """The agent CLIs running under `root`: a Claude Code or a pi per session, one codex app-server for all."""
    return sorted(name for argv in leftovers([root]).values() if (name := agent_of(argv)) is not None)


# -- the test ----------------------------------------------------------------------------------------------------


async def test_a_panel_of_claude_code_codex_and_pi_answers_a_claude_code_thread(root: Path) -> None:
    async with panel_daemon(root) as (servers, room, client):
        options = recorded_options(CLAUDE_MODEL, "", FULL, {})
        start = {"providerId": "claude-code", "threadId": CALLER, "cwd": str(root / "ws"), "options": options}
        ptid = (await client.request("thread/start", start))["providerThreadId"]
        turn = {
            "providerId": "claude-code",
            "threadId": CALLER,
            "providerThreadId": ptid,
            "input": [{"type": "text", "text": PROMPT, "mentions": []}],
            "clientRequestId": creq(1),
            "options": options,
        }
        await client.request("turn/start", turn)
        await client.wait_for(lambda: client.settled(CALLER), TIMEOUT)  # the tool answered, the turn ended
        assert len(room.runs) == 1, "the caller's model did not launch a panel"
        with trio.fail_after(RUN_TIMEOUT):
            while any(run.phase != "done" for run in room.runs.values()):
                await trio.sleep(0.05)
        # the delivery started the caller's second turn (its first had ended on the receipt); it ends on the answer
        await client.wait_for(lambda: client.settled(CALLER, 2), TIMEOUT)
        inputs = (await client.request("thread/inputs", {"threadId": CALLER}))["inputs"]
        (run,) = (await client.request("perspectives/runs", {"threadId": CALLER}))["runs"]
        listed = (await client.request("daemon/status", {}))["threads"]
        every = (await client.request("daemon/status", {"includeHidden": True}))["threads"]
        # every hidden thread released: its bridge serves it no more, its session has ended (the claude-code and pi
        # workers' CLIs exited); the caller's Claude Code and the codex app-server run on
        want = {"claude-code": 1, "codex": 0, "pi": 0}, ["claude-code", "codex"]
        with trio.move_on_after(TIMEOUT):
            while (await threads_by_provider(client), agents_running(root)) != want:
                await trio.sleep(0.05)
        assert (await threads_by_provider(client), agents_running(root)) == want
    assert [e["status"] for e in client.of(CALLER, "turn/completed")] == ["completed", "completed"]

    # the run: a planner, a worker per lens on its panel provider, the synthesis on the planner's provider
    assert [m["role"] for m in run["members"]] == ["planner", "worker", "worker", "worker", "synthesis"]
    workers = [m for m in run["members"] if m["role"] == "worker"]
    assert [(m["lens"], m["providerId"], m["status"]) for m in workers] == list(
        zip(LENSES, PANEL, ["completed"] * 3, strict=True)
    )
    planner, synthesis = run["members"][0], run["members"][-1]
    assert (planner["providerId"], synthesis["providerId"], synthesis["status"]) == ("codex", "codex", "completed")
    assert run["outcome"] == "delivered" and run["phase"] == "done"
    hidden = {m["threadId"] for m in run["members"]}
    assert not hidden & {row["threadId"] for row in listed}  # not listed by default
    assert {row["threadId"] for row in every if row.get("hidden")} == hidden

    # the receipt was the tool's result in the caller's model's next request
    caller_requests = [r for r in servers.claude.messages() if PROMPT in claude_first_text(r)]
    (result,) = [block for r in caller_requests for block in r.tool_results()]
    receipt = json.loads(result["content"][0]["text"])
    assert receipt == {"runId": run["runId"], "lenses": LENSES, "status": "launched"}

    # one delivery into the calling thread, and the caller's model was sent it
    texts = [part["text"] for record in inputs for part in record["input"] if part.get("type") == "text"]
    (delivered,) = [text for text in texts if text.startswith("Perspectives panel")]
    assert delivered.startswith(f"{RESULT_HEAD} (run {run['runId']})")
    assert [r for r in caller_requests if delivered.strip() in r.user_text()], "the delivery did not reach the model"
    assert "Synthesis: " + ", ".join(sorted(MARKERS.values())) + "." in delivered  # every lens reached the synthesis
    for member, lens in zip(workers, LENSES, strict=True):  # the table says who answered what
        assert f"| {lens} | {member['providerId']} ({member['model']}) | completed |" in delivered
    assert f"Synthesis thread: `{synthesis['threadId']}`" in delivered
    assert not [m["threadId"] for m in run["members"][:-1] if m["threadId"] in delivered]

    # anonymous: what the synthesizer was asked names no agent and no model. Only the prompt bbridge sent is read:
    # the rest of codex's request is codex's own (its base instructions call it Codex), not what the panel wrote.
    (asked,) = [t for r in servers.codex.posts() for t in codex_user_texts(r) if t.startswith(SYNTHESIS_MARK)]
    assert all(marker in asked for marker in MARKERS.values())
    assert asked.count(f"speaking as {WITHHELD}") == 3  # each finding named its agent, and it was masked
    assert AGENT_WORDS.search(asked) is None, AGENT_WORDS.search(asked)
    models = {m["model"] for m in run["members"] if m["model"]}
    assert models and not [model for model in models if model.lower() in asked.lower()]
