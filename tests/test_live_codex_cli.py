"""The REAL `codex app-server` (the pinned @openai/codex CLI), offline against a scripted Responses API.

No bridge yet: these smoke tests prove the live-test infrastructure the Codex bridge will be tested with —
`tests/live/openai.py` (the scripted server) and `tests/live/codex.py` (the offline environment and the JSON-RPC
driver) — and pin the app-server behaviour the bridge relies on (`tests/live/CODEX_NOTES.md`): a streamed turn
with reasoning, a command approval answered accept or decline, a 401 failing the turn, an interrupt.
`make live-agents` installs the CLI; the tests skip only when the npm registry is unreachable.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.live import openai
from tests.live.codex import ASK, MODEL, AppServer, CodexError, app_server, installed_cli, offline_env

WORKSPACE_WRITE = {
    "type": "workspaceWrite",
    "writableRoots": [],
    "networkAccess": False,
    "excludeTmpdirEnvVar": False,
    "excludeSlashTmp": False,
}


@pytest.fixture(scope="session")
def cli() -> Path:
    return installed_cli()


@asynccontextmanager
async def codex(cli: Path, root: Path, api: openai.ScriptedResponses) -> AsyncIterator[tuple[AppServer, Path]]:
    """An initialized app-server in an offline environment under `root`, and its workspace."""
    workspace = root / "ws"
    workspace.mkdir()
    env = offline_env(root, api.base_url)
    with trio.fail_after(60):  # the whole session, whatever a test awaits
        async with app_server(cli, env, workspace) as server:
            result = await server.initialize()
            assert result["codexHome"] == env["CODEX_HOME"]
            yield server, workspace
    warnings = [n["params"]["summary"] for n in server.notifications("configWarning")]
    assert all("bubblewrap" in w for w in warnings), warnings  # an invalid config.toml would fall back to defaults


def params(server: AppServer, method: str) -> list[dict[str, Any]]:
    return [n["params"] for n in server.notifications(method)]


def completed_items(server: AppServer, item_type: str) -> list[dict[str, Any]]:
    return [p["item"] for p in params(server, "item/completed") if p["item"]["type"] == item_type]


async def test_a_turn_streams_reasoning_and_text(cli: Path, tmp_path: Path) -> None:
    with openai.ScriptedResponses() as api:
        api.push(openai.reasoning_and_text("Weighing a greeting", "Hello from the scripted model!"))
        async with codex(cli, tmp_path, api) as (server, workspace):
            with pytest.raises(CodexError, match="authentication required to read rate limits"):
                await server.request("account/rateLimits/read")  # API-key auth has no ChatGPT rate limits
            thread = await server.start_thread(workspace)
            turn_id = await server.start_turn(thread, "Say hello.")
            turn = await server.turn_completed(turn_id)

        assert turn["status"] == "completed" and turn["error"] is None
        methods = server.methods()
        order = ["thread/started", "turn/started", "item/reasoning/summaryTextDelta", "item/agentMessage/delta"]
        assert [methods.index(m) for m in order] == sorted(methods.index(m) for m in order)
        assert methods.index("turn/completed") > methods.index("thread/tokenUsage/updated")
        summary = "".join(p["delta"] for p in params(server, "item/reasoning/summaryTextDelta"))
        assert summary == "Weighing a greeting" and completed_items(server, "reasoning")[0]["summary"] == [summary]
        deltas = [p["delta"] for p in params(server, "item/agentMessage/delta")]
        assert len(deltas) > 1 and "".join(deltas) == "Hello from the scripted model!"
        (message,) = completed_items(server, "agentMessage")
        assert message["text"] == "Hello from the scripted model!"
        assert completed_items(server, "userMessage")[0]["content"][0]["text"] == "Say hello."
        usage = params(server, "thread/tokenUsage/updated")[-1]["tokenUsage"]["total"]
        assert (
            usage["reasoningOutputTokens"] == 16
            and usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]
        )

        (post,) = api.posts()  # one model request, nothing else over HTTP
        assert api.requests == [post] and post.path == "/v1/responses"
        assert post.headers["authorization"] == "Bearer sk-dummy-offline" and post.body["stream"] is True
        assert post.body["model"] == MODEL and post.body["input"][-1]["content"][0]["text"] == "Say hello."
        assert {"exec_command", "apply_patch"} <= {tool.get("name") for tool in post.body["tools"]}


@pytest.mark.parametrize("decision", ["accept", "decline"])
async def test_a_shell_call_asks_for_approval(cli: Path, tmp_path: Path, decision: str) -> None:
    target = tmp_path / "home" / "outside.txt"
    call = {"cmd": f"touch {target}", "sandbox_permissions": "require_escalated", "justification": "Create it?"}
    with openai.ScriptedResponses() as api:
        api.push(openai.function_call("exec_command", call, call_id="call_touch", preamble="Touching it."))
        api.push(openai.text("Done."))
        async with codex(cli, tmp_path, api) as (server, workspace):
            server.decision = decision
            thread = await server.start_thread(workspace, ASK, sandbox="workspace-write")
            turn_id = await server.start_turn(thread, "Touch the file.", ASK, WORKSPACE_WRITE)
            turn = await server.turn_completed(turn_id)

        assert turn["status"] == "completed"
        (approval,) = server.server_requests("item/commandExecution/requestApproval")
        request = approval["params"]
        assert request["threadId"] == thread and request["turnId"] == turn_id and request["itemId"] == "call_touch"
        assert request["command"] == f"/bin/bash -lc 'touch {target}'" and request["reason"] == "Create it?"
        assert request["availableDecisions"][0] == "accept" and "cancel" in request["availableDecisions"]
        resolved = params(server, "serverRequest/resolved")
        assert resolved == [{"threadId": thread, "requestId": approval["id"]}]
        (command,) = completed_items(server, "commandExecution")
        first, second = api.wait_for_posts(2)
        (output,) = [item for item in second.body["input"] if item["type"] == "function_call_output"]
        assert output["call_id"] == "call_touch"
        if decision == "accept":
            assert command["status"] == "completed" and command["exitCode"] == 0 and target.exists()
            assert "Process exited with code 0" in output["output"]
        else:
            assert command["status"] == "declined" and command["exitCode"] is None and not target.exists()
            assert "rejected by user" in output["output"]
        assert completed_items(server, "agentMessage")[-1]["text"] == "Done."


async def test_a_401_fails_the_turn_at_once_and_legibly(cli: Path, tmp_path: Path) -> None:
    with openai.ScriptedResponses() as api:
        api.push(openai.http_error(401, "Incorrect API key provided: sk-dummy."))
        async with codex(cli, tmp_path, api) as (server, workspace):
            thread = await server.start_thread(workspace)
            started = time.monotonic()
            turn_id = await server.start_turn(thread, "Hello?")
            turn = await server.turn_completed(turn_id, timeout=10)
            elapsed = time.monotonic() - started

        assert turn["status"] == "failed" and elapsed < 5
        error = turn["error"]
        assert error["message"].startswith("unexpected status 401 Unauthorized: Incorrect API key provided: sk-dummy.")
        assert error["codexErrorInfo"] == {"httpConnectionFailed": {"httpStatusCode": 401}}
        (note,) = params(server, "error")  # request_max_retries = 0: no "Reconnecting... n/5"
        assert note["willRetry"] is False and note["error"] == error and note["turnId"] == turn_id
        assert {"type": "systemError"} in [p["status"] for p in params(server, "thread/status/changed")]
        assert len(api.posts()) == 1


async def test_an_interrupt_ends_a_stalled_turn(cli: Path, tmp_path: Path) -> None:
    with openai.ScriptedResponses() as api:
        api.push(openai.text("This answer stalls after its first words " * 4, delay=20))
        api.push(openai.text("Still here."))
        async with codex(cli, tmp_path, api) as (server, workspace):
            thread = await server.start_thread(workspace)
            turn_id = await server.start_turn(thread, "Write a long answer.")
            await server.wait_for("item/agentMessage/delta")
            started = time.monotonic()
            assert await server.request("turn/interrupt", {"threadId": thread, "turnId": turn_id}) == {}
            turn = await server.turn_completed(turn_id, timeout=10)
            elapsed = time.monotonic() - started
            # the thread goes on: a next turn on it completes
            next_turn = await server.start_turn(thread, "Are you there?")
            assert (await server.turn_completed(next_turn))["status"] == "completed"

        assert turn["status"] == "interrupted" and turn["error"] is None and elapsed < 5
        assert len(params(server, "item/agentMessage/delta")) >= 2  # the stalled one and the next turn's
        interrupted_items = [p["item"]["id"] for p in params(server, "item/started") if p["turnId"] == turn_id]
        closed = {p["item"]["id"] for p in params(server, "item/completed")}
        assert [i for i in interrupted_items if i not in closed]  # the stalled message is never completed
        assert completed_items(server, "agentMessage")[-1]["text"] == "Still here."
        assert len(api.posts()) == 2
