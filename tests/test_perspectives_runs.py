"""Perspectives runs end to end on fake bridges, budgets shrunk to seconds (issue 48): the room's in-process face,
its tools through the tool host, hidden threads, the one delivery into the calling thread, `help`, `ai/complete`
and `perspectives/runs`.

The calling thread is `tests/fakes/fake_bridge.py` in its `tool` mode (a turn whose input is `{"tool",
"arguments"}` calls that tool and reports the result as its text); the hidden threads run the fake in its `panel`
mode (`panel_text`: a plan for the planner, a finding per lens, lens `stall` holding its turn open, a synthesis
quoting every finding and the internal thread references it was given).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from bbridge.daemon import server
from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.runtime import Daemon
from bbridge.perspectives.room import Perspectives
from bbridge.perspectives.settings import load_perspectives
from bbridge.serving import room_face
from bbridge.toolhost.host import load_host
from bbridge.wire import rpc
from tests.support import TestClient, connect, fake_provider
from tests.test_declared_tools import bridge_got, completed

CALLER = "thr_caller"
FULL = {"permissionMode": "full", "permissionScope": "full", "approvalReviewer": None, "permissionEscalation": None}
BUDGETS = "planner_s = 4\nwrapup_s = 1\nhard_cap_s = 8\nsynthesis_s = 3\nspawn_timeout_s = 5\n"


def table(panel: list[str] | None = None, *, planner: str = "panel", extra: str = "") -> str:
    lines = ["[perspectives]", f'planner = {{ provider = "{planner}" }}', 'worker = { provider = "panel" }']
    if panel is not None:
        lines.append("panel = " + json.dumps(panel))
    return "\n".join(lines) + "\n" + BUDGETS + extra


@asynccontextmanager
async def panel_daemon(
    tmp_path: Path, text: str, **providers: ProviderConfig
) -> AsyncIterator[tuple[Daemon, Perspectives, TestClient]]:
    """A daemon with the room of `text`'s `[perspectives]`, the `caller` provider and `providers`, a client on it,
    and the calling thread started."""
    config = tmp_path / "bbridge.toml"
    config.write_text(text, encoding="utf-8")
    settings, refused = load_perspectives(config)
    assert settings is not None and not refused, refused
    room = Perspectives(settings)
    host = load_host(None, None, None, external=room.tools)
    every = {"caller": fake_provider("tool"), "panel": fake_provider("panel"), **providers}
    daemon = Daemon(every, text_delta_flush_ms=0, tool_host=host, services=[room])
    sock = tmp_path / "bbridge.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, daemon, [server.socket_face(sock), room_face(room)])
        try:
            async with connect(sock) as client:
                start = {"providerId": "caller", "threadId": CALLER, "cwd": str(tmp_path), "options": FULL}
                await client.request("thread/start", start)
                yield daemon, room, client
        finally:
            daemon.request_shutdown()
            with trio.fail_after(20):
                await daemon.stopped.wait()


async def call(client: TestClient, tool: str, arguments: dict[str, Any], n: int = 1) -> Any:
    """The calling thread's `n`-th turn calls `tool`; the result its bridge got."""
    text = json.dumps({"tool": tool, "arguments": arguments})
    turn = {"threadId": CALLER, "input": [{"type": "text", "text": text}], "clientRequestId": f"creq_abcdefghj{n + 2}"}
    await client.request("turn/start", turn)
    await client.wait_for(lambda: completed(client, CALLER, n), timeout=30)
    return bridge_got(client, CALLER, n)


async def delivered(client: TestClient, room: Perspectives, timeout: float = 30) -> list[str]:
    """Once every run is done: the texts of the calling thread's inputs from the room (the deliveries)."""
    with trio.fail_after(timeout):
        while not room.runs or any(run.phase != "done" for run in room.runs.values()):
            await trio.sleep(0.05)
    inputs = (await client.request("thread/inputs", {"threadId": CALLER}))["inputs"]
    texts = [part["text"] for record in inputs for part in record["input"] if part.get("type") == "text"]
    return [text for text in texts if text.startswith("Perspectives panel")]


def text_of(result: Any) -> str:
    return str(result["contentItems"][0]["text"])


async def test_a_three_lens_panel_delivers_once_with_every_lens(tmp_path: Path) -> None:
    """Two workers finish, one (`stall`) never does: it gets the wrap-up steer, and at the phase's end its output
    so far is partial evidence. One delivery, every lens's output in it, no planner or worker id, the synthesis
    thread referenced once; the hidden threads listed only when asked, none offered the tools."""
    async with panel_daemon(tmp_path, table()) as (daemon, room, client):
        arguments = {
            "question": "Where is the slow path?",
            "context": "prod load",
            "lenses": ["alpha", "beta", "stall"],
        }
        receipt = json.loads(text_of(await call(client, "gather_perspectives", arguments)))
        assert receipt["status"] == "launched" and receipt["lenses"] == ["alpha", "beta", "stall"]
        assert receipt["runId"].startswith("prun_")
        (message,) = await delivered(client, room)
        (run,) = room.runs.values()
        status = daemon.status()
        hidden = (await client.request("daemon/status", {"includeHidden": True}))["threads"]
        steers = (await client.request("thread/inputs", {"threadId": run.members[-2].thread_id}))["inputs"]
        tools = {m.thread_id: daemon.registry.hosted_of(m.thread_id) for m in run.members}
        served = set(daemon.supervisor.bridges["panel"].threads)
        journal = await client.request("thread/events", {"threadId": run.members[1].thread_id})
    assert not served & {m.thread_id for m in run.members}  # released when the run ended
    assert journal["events"]  # their journals stay
    assert message.startswith("Perspectives panel result")
    for finding in ("Finding on alpha", "Finding on beta", "Partial finding on stall so far"):
        assert finding in message
    synthesis = run.members[-1]
    assert [m.role for m in run.members] == ["planner", "worker", "worker", "worker", "synthesis"]
    assert message.count(synthesis.thread_id) == 1
    for member in run.members[:-1]:
        assert member.thread_id not in message  # the synthesis repeated them: scrubbed
    assert [m.status for m in run.members[1:4]] == ["completed", "completed", "partial"]
    assert run.outcome == "delivered" and run.notes == []
    assert not any(row.get("hidden") for row in status["threads"])
    assert {row["threadId"] for row in hidden if row.get("hidden")} <= {m.thread_id for m in run.members}
    assert [record["method"] for record in steers] == ["turn/start", "turn/steer"]  # the one wrap-up steer
    assert all(not ({"help", "gather_perspectives"} & offered) for offered in tools.values())


async def test_a_crashed_worker_and_a_failed_planner_leave_the_rest_intact(tmp_path: Path) -> None:
    """The planner answers garbage twice: each lens gets a built-in prompt, and the delivery says so. The worker
    whose agent crashes is failed; the others' results are delivered."""
    crashy = fake_provider("panel,crash-mid-turn")
    garbled = fake_provider("panel", env={"FAKE_PLAN": "garbage"})
    text = table(["panel", "crashy", "panel"], planner="garbled")
    async with panel_daemon(tmp_path, text, crashy=crashy, garbled=garbled) as (_, room, client):
        await call(client, "gather_perspectives", {"question": "Q?", "lenses": ["alpha", "crash", "gamma"]})
        (message,) = await delivered(client, room)
    (run,) = room.runs.values()
    assert "The planner failed twice" in message and "Finding on alpha" in message and "Finding on gamma" in message
    workers = [m for m in run.members if m.role == "worker"]
    assert [m.status for m in workers] == ["completed", "failed", "completed"]


async def test_the_hard_cap_still_ends_in_exactly_one_delivery(tmp_path: Path) -> None:
    """The synthesis never finishes: the hard cap stops it, and the one delivery is a failure holding the raw
    outputs."""
    holding = fake_provider("panel", env={"FAKE_HOLD": "synthesis"})
    async with panel_daemon(tmp_path, table(planner="holding"), holding=holding) as (_, room, client):
        await call(client, "gather_perspectives", {"question": "Q?", "lenses": ["alpha", "beta"]})
        deliveries = await delivered(client, room)
        await trio.sleep(1)  # nothing more arrives
        assert await delivered(client, room) == deliveries
    (message,) = deliveries
    assert message.startswith("Perspectives panel failed") and "hard cap" in message
    assert "Finding on alpha" in message and "Finding on beta" in message


async def test_an_unknown_provider_is_an_error_result_and_no_thread_is_made(tmp_path: Path) -> None:
    async with panel_daemon(tmp_path, table(["panel", "nowhere"])) as (daemon, room, client):
        result = await call(client, "gather_perspectives", {"question": "Q?", "lenses": ["alpha", "beta"]})
        status = await client.request("daemon/status", {"includeHidden": True})
    assert result["success"] is False and "nowhere" in text_of(result) and "no thread was created" in text_of(result)
    assert status["daemon"]["hiddenThreads"] == 0 and room.runs == {}
    assert daemon.registry.provider_of("thr_hidden") is None


async def test_help_answers_with_the_experts_answer(tmp_path: Path) -> None:
    async with panel_daemon(tmp_path, table()) as (_, room, client):
        result = await call(client, "help", {"question": "What is the answer?"})
        runs = await client.request("perspectives/runs", {"threadId": CALLER})
    assert result["success"] is True
    text = text_of(result)
    assert text.startswith("Expert answer: 42") and "Expert thread: `thr_hidden_" in text
    (run,) = runs["runs"]
    assert run["tool"] == "help" and [m["role"] for m in run["members"]] == ["planner", "expert"]
    planner = run["members"][0]["threadId"]
    assert planner not in text


async def test_ai_complete_answers_a_valid_object_or_says_why_not(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    wrong = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    async with panel_daemon(tmp_path, table()) as (_, _, client):
        asked = {"providerId": "panel", "prompt": "The answer?", "outputSchema": schema, "timeoutMs": 10_000}
        good = await client.request("ai/complete", asked)
        bad = await client.request("ai/complete", {**asked, "outputSchema": wrong})
        try:
            await client.request("ai/complete", {**asked, "providerId": "nowhere"})
        except rpc.RpcError as exc:
            unknown = exc.message
        status = await client.request("daemon/status", {"includeHidden": True})
    assert good == {"ok": True, "model": "", "value": {"answer": 42}}
    assert bad["ok"] is False and bad["code"] == "invalid_response" and "answer" in bad["message"]
    assert "nowhere" in unknown
    assert not any(row.get("hidden") is None and row["threadId"].startswith("thr_hidden") for row in status["threads"])


def test_serve_builds_the_room_and_hosts_its_tools_from_the_file(tmp_path: Path) -> None:
    """`bbridge serve`/`acp` read `[perspectives]` with the rest of the file: the room is a daemon service, its
    tools are hosted, and its face joins the daemon's; a broken table is a refusal in the config report."""
    import argparse

    from bbridge.serving import _served

    config = tmp_path / "bbridge.toml"
    config.write_text(table(), encoding="utf-8")
    args = argparse.Namespace(config=config, tools_dir=None, journal=None)
    served = _served(args, client_servers=False)
    assert served.room is not None and served.daemon_options()["services"] == [served.room]
    assert served.tool_host is not None
    assert [tool.name for tool in served.tool_host.offered()] == ["help", "gather_perspectives"]
    assert len(served.faces()) == 1
    served.tool_host.close()
    config.write_text("[perspectives]\nhard_cap_s = -1\n", encoding="utf-8")
    broken = _served(args, client_servers=False)
    assert broken.room is None and any(r.section == "perspectives" for r in broken.report.refused)


async def test_every_hidden_thread_is_released_when_its_run_ends(tmp_path: Path) -> None:
    """A panel's five threads and help's two are let go of their bridge once the run is over (`thread/stop
    {intent: release, activeTurnId: null}`: the fake's `panel` mode refuses one without `activeTurnId`, as a
    bridge's protocol type does), so no agent session outlives its run; the caller's thread stays."""

    async def threads(client: TestClient) -> dict[str, int]:
        status = await client.request("daemon/status", {})
        return {p["providerId"]: p.get("threads", 0) for p in status["providers"]}

    async with panel_daemon(tmp_path, table()) as (_, room, client):
        await call(client, "gather_perspectives", {"question": "Q?", "lenses": ["alpha", "beta"]})
        await delivered(client, room)
        await call(client, "help", {"question": "What is the answer?"}, n=3)  # the delivery was the 2nd turn
        with trio.move_on_after(10):
            while await threads(client) != {"caller": 1, "panel": 0}:
                await trio.sleep(0.05)
        counted = await threads(client)
        hidden = (await client.request("daemon/status", {"includeHidden": True}))["threads"]
    assert counted == {"caller": 1, "panel": 0}
    assert len([row for row in hidden if row.get("hidden")]) == 4 + 2  # planner, 2 workers, synthesis; planner, expert


def test_a_members_vendor_and_model_names_are_withheld_from_the_synthesizer() -> None:
    from bbridge.perspectives.run import _names
    from bbridge.perspectives.tuples import Resolved

    assert _names(Resolved("claude-code", "claude-sonnet-4-5", None, {})) == [
        "claude-code",
        "Claude",
        "Anthropic",
        "claude-sonnet-4-5",
    ]
    assert _names(Resolved("acp-gemini", None, None, {})) == ["acp-gemini", "gemini"]
    assert _names(Resolved("pi", "scripted/scripted-model", None, {}))[-1] == "scripted-model"
    assert _names(Resolved("pi", "pi/first", None, {})) == ["pi", "pi/first"]


async def test_the_typed_status_keeps_the_rooms_section(tmp_path: Path) -> None:
    """`Client.status()` decodes `daemon/status` into `DaemonStatus`: the Perspectives room's section is kept."""
    from bbridge.client import Client

    async with panel_daemon(tmp_path, table()) as (_, _, _):
        async with Client.connect(tmp_path / "bbridge.sock") as typed:
            status = await typed.status()
    assert status.perspectives == {"runs": {"running": 0, "delivered": 0, "failed": 0, "undelivered": 0}}
