"""`bridges.acp` resuming with an agent that has no `loadSession`: a fresh session, announced as lost context.

The agent is a few lines of stdlib Python written to a temporary file (no install needed): it answers
`initialize` without `loadSession`, `session/new` with a new id, and `session/prompt` with one message chunk,
and logs every method it receives.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from bbridge.daemon.config import ProviderConfig
from tests.conftest import REPO
from tests.support import FULL, INIT, connect, running, spawned, start_thread, turn_params

AGENT = r"""
import json, sys, uuid

log = open(sys.argv[1], "a")


def send(message):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    method, mid = message.get("method"), message.get("id")
    log.write(f"{method}\n")
    log.flush()
    if method is None or mid is None:
        continue
    if method == "initialize":
        send({"id": mid, "result": {"protocolVersion": 1, "agentCapabilities": {"promptCapabilities": {}}}})
    elif method == "session/new":
        send({"id": mid, "result": {"sessionId": f"sess-{uuid.uuid4().hex[:8]}"}})
    elif method == "session/prompt":
        chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "fresh"}}
        send({"method": "session/update", "params": {"sessionId": message["params"]["sessionId"], "update": chunk}})
        send({"id": mid, "result": {"stopReason": "end_turn"}})
    else:
        send({"id": mid, "error": {"code": -32601, "message": f"no {method}"}})
"""
THREAD = "thr_1"
LOST = "could not restore the previous session; continuing in a fresh session without in-agent history."


@pytest.fixture
def agent(tmp_path: Path) -> tuple[list[str], Path]:
    """The bridge's command line around the fake agent, and the agent's method log."""
    script, log = tmp_path / "agent.py", tmp_path / "agent.log"
    script.write_text(AGENT)
    return [sys.executable, "-m", "bridges.acp", "--", sys.executable, str(script), str(log)], log


def resume_params(provider_thread_id: str) -> dict[str, Any]:
    return {"threadId": THREAD, "cwd": "/tmp", "options": FULL, "providerThreadId": provider_thread_id}


async def test_resume_without_load_session_opens_a_fresh_session_after_a_replacement(
    agent: tuple[list[str], Path],
) -> None:
    """§4.3: settlement, `session/replaced {contextLost}`, identity, `session.reset`, then the ordinary answer."""
    command, log = agent
    async with spawned(command) as child:
        rt = child.runtime
        await rt.call("initialize", INIT)
        old = await start_thread(rt, THREAD)
        await rt.call("thread/stop", {"threadId": THREAD, "providerThreadId": old, "intent": "release", "activeTurnId": None})  # fmt: skip
        mark = len(rt.log)
        resumed = await rt.call("thread/resume", resume_params(old))
        new = resumed["providerThreadId"]
        assert new != old and resumed["sessionRestorable"] is False

        replaced, identity, reset, answer = rt.log[mark:]
        assert replaced[:2] == ("note", "session/replaced")
        assert replaced[2]["threadId"] == THREAD and replaced[2]["providerThreadId"] == old
        assert replaced[2]["contextLost"] is True and replaced[2]["reason"].endswith(LOST)
        assert identity == ("note", "thread/identity", {"threadId": THREAD, "providerThreadId": new, "sessionRestorable": False})  # fmt: skip
        assert reset == ("note", "thread/delta", {"threadId": THREAD, "deltas": [{"kind": "session.reset"}]})
        assert answer[:2] == ("answer", "thread/resume")

        await rt.call("turn/start", turn_params(THREAD, new, "again"))
        await rt.wait_until(lambda: "turn/completed" in rt.types(THREAD))
    methods = log.read_text().split()
    assert "session/load" not in methods
    assert methods.count("session/new") == 2 and methods[-1] == "session/prompt"


async def test_the_client_sees_the_lost_history_as_a_warning_on_the_thread(
    agent: tuple[list[str], Path], tmp_path: Path
) -> None:
    """Through the daemon: a resume (after a restart, nothing live) answers normally and warns on that thread."""
    command, _ = agent
    async with (
        running(tmp_path, {"acp": ProviderConfig(command=command, cwd=str(REPO))}) as (_, path),
        connect(path) as client,
    ):
        resumed = await client.request("thread/resume", {"providerId": "acp", **resume_params("sess-before")})
        assert resumed["providerThreadId"].startswith("sess-") and resumed["sessionRestorable"] is False
        await client.wait_for(lambda: "provider/warning" in client.types(THREAD))
        (warning,) = [e for e in client.events(THREAD) if e["type"] == "provider/warning"]
        assert warning["scope"] == {"kind": "thread"} and warning["category"] == "general"
        assert warning["providerThreadId"] == "sess-before"  # recorded before the resume was sent (§3.3.6)
        assert warning["summary"] == "Provider session was replaced; provider-side context was lost."
        assert warning["details"].endswith(LOST)
        note = next(params for method, params in client.notes if method == "session/replaced")
        replaced = {"threadId": THREAD, "providerThreadId": "sess-before", "reason": warning["details"]}
        assert note == {**replaced, "contextLost": True, "providerId": "acp"}
