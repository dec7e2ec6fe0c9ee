"""`bridges.acp` against real ACP agents that run offline, and `bbridge conformance` over them.

The agents are the examples shipped in the npm package `@agentclientprotocol/sdk` (message chunks, a read and an
edit tool call, a permission request, cancel; plus a dual v1/draft-v2 agent) and in the source distribution of
the PyPI package `agent-client-protocol` (an echo agent, an example agent). `make acp-agents` installs them under
`.cache/acp/`; these tests run it, and skip only when the npm registry cannot be reached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from bbridge.core import grammar
from bbridge.core.assembler import Assembler
from bbridge.core.events import Event
from bbridge.wire import rpc
from tests.conftest import REPO
from tests.support import ASK, FULL, make_or_skip

CACHE = REPO / ".cache" / "acp"
EXAMPLES_JS = CACHE / "npm" / "node_modules" / "@agentclientprotocol" / "sdk" / "dist" / "examples"
EXAMPLES_PY = CACHE / "sdist" / "agent_client_protocol-0.12.1" / "examples"
AGENT_PY = CACHE / "venv" / "bin" / "python"


@pytest.fixture(scope="session")
def agents() -> dict[str, list[str]]:
    """The agent command lines, installed by `make acp-agents` (skips when the registry is unreachable)."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed, so the ACP example agents cannot run")
    make_or_skip("acp-agents", "the ACP example agents")
    return {
        "js-example": ["node", str(EXAMPLES_JS / "agent.js")],
        "js-dual-version": ["node", str(EXAMPLES_JS / "dual-version-agent.js")],
        "py-echo": [str(AGENT_PY), str(EXAMPLES_PY / "echo_agent.py")],
        "py-example": [str(AGENT_PY), str(EXAMPLES_PY / "agent.py")],
    }


@dataclass
class Client:
    """The runtime side of one bridge process: requests, assembled events, scripted approvals."""

    conn: rpc.Connection
    decision: str = "allow_once"
    events: list[Event] = field(default_factory=list)
    interactions: list[dict[str, Any]] = field(default_factory=list)
    changed: trio.Event = field(default_factory=trio.Event)
    assembler: Assembler = field(default_factory=lambda: Assembler("acp-live", "da00000000", 500, 0))

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        return await self.conn.request(method, params, timeout=30)

    async def wait_for(self, predicate: Callable[[list[Event]], bool], timeout: float = 20) -> None:
        with trio.fail_after(timeout):
            while not predicate(self.events):
                await self.changed.wait()

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e["type"] == kind]

    def items(self, item_type: str) -> list[dict[str, Any]]:
        items = [msgspec.to_builtins(e["item"]) for e in self.of("item/completed")]
        return [item for item in items if item["type"] == item_type]

    async def start(self, cwd: Path, options: dict[str, Any], thread: str = "thr_live") -> str:
        await self.call(
            "initialize",
            {"protocolVersion": 2, "client": {"name": "bb", "version": "1.0.0"}, "grammarVersions": [3, 3]},
        )
        result = await self.call("thread/start", {"threadId": thread, "cwd": str(cwd), "options": options})
        return str(result["providerThreadId"])

    async def turn(self, ptid: str, text: str, options: dict[str, Any], thread: str = "thr_live") -> Any:
        turn = {"threadId": thread, "providerThreadId": ptid, "clientRequestId": "creq_2222222223", "options": options}
        return await self.call("turn/start", {**turn, "input": [{"type": "text", "text": text, "mentions": []}]})


@asynccontextmanager
async def bridge(agent: list[str], env: dict[str, str] | None = None) -> AsyncIterator[Client]:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "bridges.acp", "--", *agent],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    client: Client

    async def notifications(batch: list[rpc.Notification]) -> None:
        for note in batch:
            if note.method == "thread/delta" and note.params is not None:
                params = grammar.decode_params(note.params)
                client.events += client.assembler.assemble(params.threadId, params.deltas, 0)
        client.changed.set()
        client.changed = trio.Event()

    async def requests(request: rpc.Request) -> Any:
        assert request.method == "interaction/request" and request.params is not None
        client.interactions.append(msgspec.json.decode(request.params))
        return {"decision": client.decision}

    conn = rpc.Connection(proc.stdin, proc.stdout, name="live", on_notifications=notifications, on_request=requests)
    client = Client(conn)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        try:
            yield client
        finally:
            await trio.aclose_forcefully(proc.stdin)
            with trio.move_on_after(10):
                await proc.wait()
            proc.kill()
            nursery.cancel_scope.cancel()


def completed(events: list[Event]) -> bool:
    return any(e["type"] == "turn/completed" for e in events)


def message_text(client: Client) -> str:
    return "".join(e["delta"] for e in client.of("item/agentMessage/delta"))


# -- the npm example agent ---------------------------------------------------------


async def test_js_agent_turn_asks_the_runtime_and_gets_its_allow(agents: dict[str, list[str]], tmp_path: Path) -> None:
    async with bridge(agents["js-example"]) as client:
        ptid = await client.start(tmp_path, ASK)
        assert await client.turn(ptid, "improve the project", ASK) == {"threadId": "thr_live"}
        await client.wait_for(completed)
    (approval,) = client.interactions
    assert approval["payload"]["subject"] == {
        "kind": "file_change", "itemId": "call_2", "writeScope": "/home/user/project/config.json", "sessionGrant": None,
    }  # fmt: skip
    assert approval["payload"]["availableDecisions"] == ["allow_once", "deny"] and approval["turnId"] is None
    assert client.items("fileRead")[0]["path"] == "/project/README.md"
    assert client.items("fileChange")[0]["changes"] == [{"path": "/project/config.json", "kind": "update"}]
    assert "Perfect! I've successfully updated the configuration." in message_text(client)
    assert [e["status"] for e in client.of("turn/completed")] == ["completed"]


async def test_js_agent_hears_a_deny_as_its_reject_option(agents: dict[str, list[str]], tmp_path: Path) -> None:
    async with bridge(agents["js-example"]) as client:
        client.decision = "deny"
        ptid = await client.start(tmp_path, ASK)
        await client.turn(ptid, "improve the project", ASK)
        await client.wait_for(completed)
    assert "I understand you prefer not to make that change" in message_text(client)
    assert all(item["status"] == "completed" for item in client.items("fileChange"))


async def test_js_agent_interrupt_cancels_and_settles_before_the_stop_answers(
    agents: dict[str, list[str]], tmp_path: Path
) -> None:
    async with bridge(agents["js-example"]) as client:
        ptid = await client.start(tmp_path, FULL)
        await client.turn(ptid, "improve the project", FULL)
        await client.wait_for(lambda events: any(e["type"] == "item/agentMessage/delta" for e in events))
        stop = {"threadId": "thr_live", "providerThreadId": ptid, "intent": "interrupt", "activeTurnId": "t"}
        assert await client.call("thread/stop", stop) == {}
        settled_before_answer = [e["status"] for e in client.of("turn/completed")]
        steer = {
            "threadId": "thr_live",
            "providerThreadId": ptid,
            "expectedTurnId": "t",
            "clientRequestId": "creq_2222222224",
        }
        with pytest.raises(rpc.RpcError, match="No active ACP session"):
            await client.call("turn/steer", {**steer, "input": [], "options": FULL})
    assert settled_before_answer == ["interrupted"]
    opened = {msgspec.to_builtins(e["item"])["id"] for e in client.of("item/started")}
    assert opened <= {msgspec.to_builtins(e["item"])["id"] for e in client.of("item/completed")}


async def test_dual_version_agent_is_driven_in_v1(agents: dict[str, list[str]], tmp_path: Path) -> None:
    record = tmp_path / "record"
    env = {**os.environ, "BB_PROVIDER_BRIDGE_RECORD_DIR": str(record)}
    async with bridge(agents["js-dual-version"], env) as client:
        ptid = await client.start(tmp_path, FULL)
        await client.turn(ptid, "hello", FULL)
        await client.wait_for(completed)
    assert message_text(client) == "Hello from the v1 implementation."
    lane = [
        json.loads(json.loads(line)["line"])
        for line in (record / "thr_live" / "bridge→provider.ndjson").read_text().splitlines()
    ]
    assert lane[0]["method"] == "initialize" and lane[0]["params"]["protocolVersion"] == 1


# -- the PyPI examples -------------------------------------------------------------


async def test_python_echo_agent_and_a_steer_without_a_turn(agents: dict[str, list[str]], tmp_path: Path) -> None:
    async with bridge(agents["py-echo"]) as client:
        ptid = await client.start(tmp_path, FULL)
        await client.turn(ptid, "echo me", FULL)
        await client.wait_for(completed)
        steer = {
            "threadId": "thr_live",
            "providerThreadId": ptid,
            "expectedTurnId": "t",
            "clientRequestId": "creq_2222222224",
        }
        with pytest.raises(rpc.RpcError) as refused:
            await client.call("turn/steer", {**steer, "input": [], "options": FULL})
    assert refused.value.code == rpc.NO_ACTIVE_TURN
    assert message_text(client) == "echo me"


async def test_resume_without_load_session_continues_in_a_fresh_session(
    agents: dict[str, list[str]], tmp_path: Path
) -> None:
    async with bridge(agents["py-example"]) as client:
        ptid = await client.start(tmp_path, FULL)
        resume = {"threadId": "thr_live", "cwd": str(tmp_path), "options": FULL, "providerThreadId": ptid}
        resumed = await client.call("thread/resume", resume)
        assert resumed["sessionRestorable"] is False  # its fresh session may reuse the id: a counter per process
        await client.turn(resumed["providerThreadId"], "after the resume", FULL)
        await client.wait_for(completed)


# -- bbridge conformance -------------------------------------------------------------


def conformance(agent: list[str], wait_ms: int | None = None) -> dict[str, str]:
    command = [sys.executable, "-m", "bbridge", "conformance"]
    command += [] if wait_ms is None else ["--wait-ms", str(wait_ms)]
    result = subprocess.run(
        [*command, "--", sys.executable, "-m", "bridges.acp", "--", *agent],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = result.stdout.splitlines()
    assert lines and lines[-1].endswith("failed"), result.stdout + result.stderr
    return {line.split()[1]: line for line in lines[:-1] if line.startswith("FAIL")}


def test_conformance_js_agent(agents: dict[str, list[str]]) -> None:
    """Every rule passes; the example agent spends 5 s in its simulated turn, so waits get 15 s."""
    assert conformance(agents["js-example"], wait_ms=15000) == {}


@pytest.mark.parametrize("name", ["py-echo", "py-example", "js-dual-version"])
def test_conformance_instant_agents(agents: dict[str, list[str]], name: str) -> None:
    """Every rule passes; these agents finish a turn before an interrupt can land, so that rule has nothing to check."""
    assert conformance(agents[name]) == {}
