"""Tools hosted by the daemon, its side (issue 35): offered to each construction, chosen with `options.tools`,
shadowed by a client's own tool, and their calls answered by the tool host with no client asked; an `ask` is a
pending approval like a bridge's; a thread's stop, release and its bridge's exit cancel its running calls.

The tool host is `FakeHost`, an in-process `ToolHost`; the bridge is `tests/fakes/fake_bridge.py` in its `tool`
mode (a turn whose input is `{"tool", "arguments"}` makes it call that tool and report the answer as its text),
and what the bridge was sent is read from its recorded runtime lane (`record_dir`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from structlog.testing import capture_logs

from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.declared_tools import failed_result
from bbridge.listen.routes import metrics
from bbridge.ops import asked
from bbridge.seams.tool_host import Approval, HostedCall
from bbridge.wire import protocol, rpc
from bbridge.wire.interactions import approval_answer
from bbridge.wire.lanes import read_lane
from tests.support import FULL, connect, fake_provider, running
from tests.test_declared_tools import LOOKUP, OK, bridge_got, call_turn, completed, tool_calls

THREAD = "thr_hosted"
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
PRESENTATION = {"label": {"pending": "Searching", "completed": "Searched"}, "icon": {"glyph": "Search"}}
GREP = {
    "name": "grep_repo",
    "description": "Search the repository",
    "inputSchema": SCHEMA,
    "presentation": PRESENTATION,
}
CLOCK = {"name": "clock", "description": "The time", "inputSchema": {"type": "object"}}
SLEEP = {"name": "sleep", "description": "Never ends", "inputSchema": {"type": "object"}}
ASK = {"name": "asking", "description": "Asks first", "inputSchema": {"type": "object"}}
BROKEN = {"name": "broken", "description": "A fault of the host", "inputSchema": {"type": "object"}}
HOSTED = [GREP, CLOCK, SLEEP, ASK, BROKEN]


def text_result(text: str) -> dict[str, Any]:
    return {"success": True, "contentItems": [{"type": "inputText", "text": text}]}


class FakeHost:
    """A `ToolHost` in the test's process: `grep_repo` and `clock` answer at once, `sleep` waits until cancelled,
    `asking` asks and answers with the approval it got, `broken` raises."""

    def __init__(self) -> None:
        self.calls: list[HostedCall] = []
        self.approvals: list[Approval] = []
        self.forgotten: list[str] = []
        self.started = trio.Event()
        self.cancelled = trio.Event()
        self.answered = trio.Event()

    def offered(self) -> list[protocol.DynamicTool]:
        return [protocol.DynamicTool(**tool) for tool in HOSTED]  # type: ignore[arg-type]

    async def call(self, call: HostedCall) -> dict[str, Any]:
        self.calls.append(call)
        self.started.set()
        if call.tool == "sleep":
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                self.cancelled.set()
                raise
        if call.tool == "broken":
            raise RuntimeError("the host broke")
        if call.tool == "asking":
            details = {"hostedTool": {"tool": call.tool, "arguments": call.arguments, "argv": ["echo", "hi"]}}
            approval = await call.ask(details)
            self.approvals.append(approval)
            self.answered.set()
            return text_result(f"{approval.decision} by {approval.by}")
        return text_result(f"{call.tool} ran in {call.cwd} with {json.dumps(call.arguments)}")

    async def open_thread(self, thread_id: str, brought: list[Any], cwd: str | None) -> list[protocol.DynamicTool]:
        return []

    def forget(self, thread_id: str) -> None:
        self.forgotten.append(thread_id)

    def report(self) -> dict[str, Any]:
        return {"served": [tool["name"] for tool in HOSTED], "refused": [], "shadowed": []}


def start(
    thread: str = THREAD, declared: list[dict[str, Any]] | None = None, tools: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A construction's params: `declared`, the client's own dynamicTools; `tools`, its `options.tools`."""
    params: dict[str, Any] = {"providerId": "fake", "threadId": thread, "cwd": "/tmp", "options": {}}
    if declared is not None:
        params["dynamicTools"] = declared
    if tools is not None:
        params["options"]["tools"] = tools
    return params


def bridge_saw(record: Path, thread: str, method: str) -> list[dict[str, Any]]:
    """The params of the requests of `method` the bridge was sent for `thread` (its recorded runtime lane)."""
    lane = read_lane(record / "fake" / thread / "runtime→bridge.ndjson", "runtime→bridge")
    messages = [json.loads(entry.line) for entry in lane]
    return [message["params"] for message in messages if message.get("method") == method]


async def until(predicate: Callable[[], bool]) -> None:
    """Wait (polling, at most 10 s) for what no notification announces."""
    with trio.fail_after(10):
        while not predicate():
            await trio.sleep(0.01)


def offered_names(params: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in params.get("dynamicTools", [])]


async def run_call(client: Any, spec: dict[str, Any], n: int = 1, thread: str = THREAD) -> Any:
    await client.request("turn/start", call_turn(spec, n, thread))
    await client.wait_for(lambda: completed(client, thread, n))
    return bridge_got(client, thread, n)


async def test_hosted_tools_are_offered_with_their_presentation_and_options_tools_never_reaches_the_bridge(
    tmp_path: Path,
) -> None:
    host = FakeHost()
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host, record_dir=tmp_path / "rec") as (
        daemon,
        path,
    ):
        async with connect(path) as client:
            await client.request("thread/start", start(declared=[LOOKUP], tools={"exclude": ["sleep"]}))
            (sent,) = bridge_saw(tmp_path / "rec", THREAD, "thread/start")
            assert offered_names(sent) == ["lookup", "grep_repo", "clock", "asking", "broken"]  # the client's first
            assert sent["dynamicTools"][1]["presentation"] == PRESENTATION
            assert sent["options"] == {}
            assert daemon.registry.hosted_of(THREAD) == {"grep_repo", "clock", "asking", "broken"}


async def test_include_keeps_only_those_and_absent_offers_every_hosted_tool(tmp_path: Path) -> None:
    host = FakeHost()
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host, record_dir=tmp_path / "rec") as (
        daemon,
        path,
    ):
        async with connect(path) as client:
            await client.request("thread/start", start(tools={"include": ["clock", "grep_repo"]}))
            await client.request("thread/start", start("thr_all"))
            (first,) = bridge_saw(tmp_path / "rec", THREAD, "thread/start")
            (second,) = bridge_saw(tmp_path / "rec", "thr_all", "thread/start")
            assert offered_names(first) == ["grep_repo", "clock"]  # the host's order
            assert offered_names(second) == [tool["name"] for tool in HOSTED]


@pytest.mark.parametrize("with_host", [True, False])
async def test_a_choice_naming_no_hosted_tool_is_refused_naming_the_hosted_ones(
    tmp_path: Path, with_host: bool
) -> None:
    options: dict[str, Any] = {"tool_host": FakeHost()} if with_host else {}
    async with running(tmp_path, {"fake": fake_provider("tool")}, **options) as (daemon, path):
        async with connect(path) as client:
            with pytest.raises(rpc.RpcError) as refused:
                await client.request("thread/start", start(tools={"include": ["nope", "clock"]}))
            assert refused.value.code == rpc.INVALID_PARAMS
            message = refused.value.message
            unknown, hosted = (
                ('"nope"', '"grep_repo", "clock", "sleep", "asking", "broken"')
                if with_host
                else ('"nope", "clock"', "none")
            )
            assert message.startswith(f"thread/start: options.tools names {unknown}, which the daemon does not host")
            assert f"(hosted: {hosted})" in message and "declare a tool of your own in dynamicTools" in message
            with pytest.raises(rpc.RpcError) as malformed:
                await client.request("thread/start", start(tools={"only": ["clock"]}))
            assert "Invalid options.tools" in malformed.value.message
            assert "fake" not in daemon.supervisor.bridges  # refused before any bridge was started


async def test_a_client_tool_shadows_a_hosted_one_reported_once(tmp_path: Path) -> None:
    host = FakeHost()
    own_clock = {"name": "clock", "description": "The client's clock", "inputSchema": {"type": "object"}}
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host, record_dir=tmp_path / "rec") as (
        daemon,
        path,
    ):
        async with connect(path, answer=lambda request: OK) as client:
            with capture_logs() as logs:
                await client.request("thread/start", start(declared=[own_clock]))
                await client.request("thread/start", start("thr_two", declared=[own_clock]))
            shadowings = [entry for entry in logs if "shadows a hosted tool" in entry["event"]]
            assert [(entry["tool"], entry["threadId"]) for entry in shadowings] == [("clock", THREAD)]
            (first,) = bridge_saw(tmp_path / "rec", THREAD, "thread/start")
            assert offered_names(first) == ["clock", "grep_repo", "sleep", "asking", "broken"]
            assert first["dynamicTools"][0]["description"] == "The client's clock"
            status = (await client.request("daemon/status"))["hostedTools"]
            assert status["served"] == [tool["name"] for tool in HOSTED]  # the host's report
            [shadowed] = status["shadowedByClients"]
            assert shadowed["tool"] == "clock" and shadowed["threadId"] == THREAD and shadowed["client"] == "socket-1"
            # the client's own clock is the client's to answer
            assert await run_call(client, {"tool": "clock", "arguments": {}}) == OK
            assert len(tool_calls(client)) == 1 and host.calls == []


async def test_a_hosted_call_is_answered_by_the_host_and_no_client_is_asked(tmp_path: Path) -> None:
    host = FakeHost()
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host) as (daemon, path):
        async with connect(path, answer=lambda request: OK) as client:
            await client.request("thread/start", start())
            got = await run_call(client, {"tool": "grep_repo", "arguments": {"q": "x; rm -rf ~"}})
            assert got == text_result('grep_repo ran in /tmp with {"q": "x; rm -rf ~"}')
            [call] = host.calls
            assert (call.thread_id, call.provider_id, call.tool, call.call_id) == (
                THREAD,
                "fake",
                "grep_repo",
                "call-1",
            )
            # checked like any declared tool: invalid arguments never reach the host
            got = await run_call(client, {"tool": "grep_repo", "arguments": {"q": 3}}, 2)
            assert got["success"] is False and "/q" in got["contentItems"][0]["text"]
            assert len(host.calls) == 1 and tool_calls(client) == []
            # a fault of the host is a failed call the model reads, not a broken turn
            got = await run_call(client, {"tool": "broken", "arguments": {}}, 3)
            assert got == failed_result('Tool "broken" failed in the daemon\'s tool host: the host broke')
            assert daemon.counters.hosted_calls == 2 and daemon.counters.hosted_calls_failed == 1
            assert daemon.counters.tool_calls_relayed == 0
            assert b"bbridge_hosted_tool_calls_total" in metrics(daemon)


async def test_an_ask_is_a_pending_approval_a_second_client_answers(tmp_path: Path) -> None:
    async def hang(request: rpc.Request) -> Any:
        await trio.sleep_forever()

    host = FakeHost()
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host) as (daemon, path):
        async with connect(path, answer=hang) as owner, connect(path) as second:
            await owner.request("thread/start", start())
            await owner.request("turn/start", call_turn({"tool": "asking", "arguments": {"n": 1}}, 1, THREAD))
            await second.wait_for(lambda: any(name == "interaction/opened" for name, _ in second.notes))
            [(_, opened)] = [note for note in second.notes if note[0] == "interaction/opened"]
            params = opened["params"]
            assert opened["kind"] == "approval" and opened["threadId"] == THREAD
            assert params["payload"]["subject"] == {
                "kind": "tool_use",
                "itemId": "call-1",
                "tool": "asking",
                "presentation": {
                    "label": {"pending": "Calling tool", "completed": "Called tool"},
                    "icon": {"glyph": "Wrench"},
                },
            }
            assert params["payload"]["availableDecisions"] == ["allow_once", "allow_for_session", "deny"]
            assert params["hostedTool"] == {"tool": "asking", "arguments": {"n": 1}, "argv": ["echo", "hi"]}
            assert params["providerThreadId"] == f"prov-{THREAD}"
            await until(lambda: bool(owner.requests))
            [relayed] = owner.requests  # relayed to the owner, which never answers
            assert relayed.method == "interaction/request"
            assert asked(opened).startswith('use asking running ["echo","hi"] (Tool "asking" is hosted by the daemon')
            # what `bbridge respond ID allow_for_session` sends
            answer = approval_answer(opened["requestId"], opened["params"]["payload"], "allow_for_session")
            await second.request("interaction/respond", {"requestId": opened["requestId"], "result": answer})
            await owner.wait_for(lambda: completed(owner, THREAD))
            assert bridge_got(owner, THREAD) == text_result("allow_for_session by socket-2")
            assert host.approvals == [Approval("allow_for_session", "socket-2")]
            assert daemon.counters.hosted_asks == daemon.counters.hosted_asks_allowed == 1


async def test_an_ask_nobody_answers_is_denied_by_the_timeout_policy(tmp_path: Path) -> None:
    host = FakeHost()
    provider = fake_provider("tool", interaction_timeout_s=0.3)
    async with running(tmp_path, {"fake": provider}, tool_host=host) as (daemon, path):
        async with connect(path) as client:
            await client.request("thread/start", start())
            await client.request("turn/start", call_turn({"tool": "asking", "arguments": {}}, 1, THREAD))
            with trio.fail_after(10):
                await host.started.wait()
        with trio.fail_after(10):
            await host.answered.wait()
        assert host.approvals == [Approval("deny", "daemon:timeout")]
        assert daemon.interactions.open == {}


async def sleeping(client: Any, host: FakeHost) -> None:
    """A thread whose first turn calls the hosted `sleep`, which the host has started."""
    await client.request("thread/start", start())
    await client.request("turn/start", call_turn({"tool": "sleep", "arguments": {}}, 1, THREAD))
    with trio.fail_after(10):
        await host.started.wait()


async def test_thread_stop_cancels_a_running_hosted_call_and_the_bridge_gets_a_failed_result(tmp_path: Path) -> None:
    host = FakeHost()
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host) as (daemon, path):
        async with connect(path) as client:
            await sleeping(client, host)
            await client.request("thread/stop", {"threadId": THREAD, "intent": "interrupt", "activeTurnId": None})
            with trio.fail_after(10):
                await host.cancelled.wait()
            await client.wait_for(lambda: completed(client, THREAD))
            assert bridge_got(client, THREAD) == failed_result('Tool "sleep" was cancelled: the thread was stopped')
            assert daemon.counters.hosted_calls_cancelled == 1
            assert daemon.registry.records[THREAD].calls == set()


async def test_a_bridge_exit_cancels_its_running_hosted_calls(tmp_path: Path) -> None:
    host = FakeHost()
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host) as (daemon, path):
        async with connect(path) as client:
            await sleeping(client, host)
            bridge = daemon.supervisor.bridges["fake"]
            assert bridge.pid is not None
            os.kill(bridge.pid, signal.SIGKILL)
            with trio.fail_after(10):
                await host.cancelled.wait()
            await until(lambda: daemon.counters.hosted_calls_cancelled == 1)
            assert host.forgotten == []  # the thread keeps its tools (and grants) for the next bridge
            assert daemon.registry.hosted_of(THREAD) == {tool["name"] for tool in HOSTED}


async def test_a_release_forgets_the_thread_and_clears_its_hosted_tools(tmp_path: Path) -> None:
    host = FakeHost()
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host) as (daemon, path):
        async with connect(path) as client:
            await client.request("thread/start", start())
            assert daemon.registry.records[THREAD].cwd == "/tmp"
            await client.request("thread/stop", {"threadId": THREAD, "intent": "release"})
            assert host.forgotten == [THREAD]
            assert daemon.registry.hosted_of(THREAD) == frozenset()


async def test_the_echo_bridge_shows_a_hosted_call_with_the_tools_presentation(tmp_path: Path) -> None:
    """Through a real bridge, unchanged: the hosted tool is offered, called, answered by the host, and its tool item
    carries the hosted tool's presentation."""
    host = FakeHost()
    echo = ProviderConfig(command=[sys.executable, "-m", "bridges.echo"])
    async with running(tmp_path, {"echo": echo}, tool_host=host) as (daemon, path), connect(path) as client:
        await client.request("thread/start", {"providerId": "echo", "threadId": THREAD, "cwd": "/tmp", "options": FULL})
        text = 'tool:grep_repo args:{"q":"x"}'
        turn = {"input": [{"type": "text", "text": text}], "clientRequestId": "creq_abcdefghjm", "options": FULL}
        await client.request("turn/start", {"threadId": THREAD, **turn})
        await client.wait_for(lambda: client.settled(THREAD))
        [tool] = [e["item"] for e in client.of(THREAD, "item/completed") if e["item"]["type"] == "toolCall"]
        assert tool["presentation"] == PRESENTATION and tool["status"] == "completed"
        assert tool["result"] == 'grep_repo ran in /tmp with {"q": "x"}'
        assert [call.tool for call in host.calls] == ["grep_repo"] and client.requests == []
