"""bridges.echo as a real subprocess, driven through rpc.Connection; its thread/delta traffic assembled and checked."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio

from bbridge.core import grammar as g
from bbridge.core.events import EVENT_TYPES
from bbridge.core.guard import Guard
from bbridge.wire import interactions, protocol, rpc, schema
from bridges.echo.translate import chunks, parse_directives
from tests.support import FULL, INIT, Runtime, Spawned, capabilities, spawned, start_thread, turn_params

ECHO = [sys.executable, "-m", "bridges.echo"]
THREAD = "thr_echo"


@asynccontextmanager
async def echo() -> AsyncIterator[Spawned]:
    """An initialized echo bridge; it must exit 0 once its stdin closes."""
    async with spawned(ECHO) as child:
        await child.runtime.call("initialize", INIT)
        yield child
        assert await child.finish() == 0


async def turn(rt: Runtime, ptid: str, text: str, creq: str = "creq_2222222223") -> list[dict[str, Any]]:
    """Run one turn to its settlement; the events it produced."""
    before = len(rt.events[THREAD])
    await rt.call("turn/start", turn_params(THREAD, ptid, text, creq))
    await rt.wait_until(lambda: "turn/completed" in rt.types(THREAD)[before:])
    return rt.events[THREAD][before:]


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def check_timeline(events: list[dict[str, Any]]) -> None:
    """Every event is a valid ThreadEvent and none breaks the host grammar."""
    msgspec.convert(events, list[schema.ThreadEvent])
    guard = Guard()
    assert [(e["type"], v) for e in events if (v := guard.observe(e)) is not None] == []


# -- plain behaviour ---------------------------------------------------------------


async def test_handshake_and_model_list() -> None:
    async with spawned(ECHO) as child:
        result = await child.runtime.call("initialize", INIT)
        caps = capabilities(sessionRestore=True, fork="checkpoint", steerMode="inject")
        assert result == {"protocolVersion": 2, "capabilities": caps}
        models = await child.runtime.call("model/list", {})
        assert msgspec.convert(models, protocol.ModelListResult).models[0].id == "echo"
        assert await child.finish() == 0


async def test_plain_turn() -> None:
    async with echo() as child:
        rt = child.runtime
        ptid = await start_thread(rt, THREAD)
        assert ptid.startswith("echo_")
        assert rt.log[-3:] == [
            ("note", "thread/identity", {"threadId": THREAD, "providerThreadId": ptid, "sessionRestorable": True}),
            ("note", "thread/delta", {"threadId": THREAD, "deltas": [{"kind": "session.reset"}]}),
            ("answer", "thread/start", {"providerThreadId": ptid, "sessionRestorable": True}),
        ]
        events = await turn(rt, ptid, "hello there world")
        deltas = [e for e in events if e["type"] == "item/agentMessage/delta"]
        assert types(events) == [
            "turn/started",
            "turn/input/accepted",
            "item/started",
            *["item/agentMessage/delta"] * len(deltas),
            "item/completed",
            "thread/tokenUsage/updated",
            "turn/completed",
        ]
        assert len(deltas) == 4
        assert "".join(d["delta"] for d in deltas) == "echo: hello there world"
        assert events[-3]["item"] == {
            "type": "agentMessage",
            "id": events[2]["item"]["id"],
            "text": "echo: hello there world",
        }
        assert events[1]["clientRequestId"] == "creq_2222222223"
        assert events[-1]["status"] == "completed"
        checkpoint = events[-1]["providerCheckpointId"]
        second = await turn(rt, ptid, "again", "creq_2222222224")
        usage = [e["tokenUsage"] for e in events + second if e["type"] == "thread/tokenUsage/updated"]
        assert [u["last"]["totalTokens"] for u in usage] == [46, 22]
        assert [u["total"]["totalTokens"] for u in usage] == [46, 68]
        check_timeline(rt.events[THREAD])
        stop = {"threadId": THREAD, "providerThreadId": ptid, "intent": "release", "activeTurnId": None}
        count = len(rt.log)
        assert await rt.call("thread/stop", stop) == {"providerCheckpointId": second[-1]["providerCheckpointId"]}
        assert rt.log[count:] == [("answer", "thread/stop", {"providerCheckpointId": f"{ptid}:2"})]
        assert checkpoint == f"{ptid}:1"


LOOKUP = {
    "name": "lookup",
    "description": "Looks a word up",
    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
    "presentation": {"label": {"pending": "Looking up", "completed": "Looked up"}, "icon": {"glyph": "Search"}},
}


@pytest.mark.parametrize("success", [True, False])
async def test_a_tool_directive_calls_the_clients_tool(success: bool) -> None:
    async with echo() as child:
        rt = child.runtime
        rt.resolution = {"success": success, "contentItems": [{"type": "inputText", "text": "42"}]}
        started = await rt.call(
            "thread/start", {"threadId": THREAD, "cwd": "/tmp", "options": FULL, "dynamicTools": [LOOKUP]}
        )
        ptid = started["providerThreadId"]
        events = await turn(rt, ptid, 'tool:lookup args:{"q":"x"}')
        [(method, call)] = rt.requests
        assert method == "item/tool/call"
        assert call == {
            "providerThreadId": ptid,
            "threadId": THREAD,
            "turnId": None,
            "callId": f"call-{ptid}-1",
            "tool": "lookup",
            "arguments": {"q": "x"},
        }
        tool = [e["item"] for e in events if e["type"] == "item/completed" and e["item"]["type"] == "toolCall"]
        outcome = {"result": "42"} if success else {"error": "42"}
        assert tool == [
            {
                "type": "toolCall",
                "id": tool[0]["id"],
                "server": "bb",
                "tool": "lookup",
                "arguments": {"q": "x"},
                "status": "completed" if success else "failed",
                **outcome,
                "presentation": LOOKUP["presentation"],
            }
        ]
        message = [
            e["item"]["text"] for e in events if e["type"] == "item/completed" and e["item"]["type"] == "agentMessage"
        ]
        assert message == ["echo: lookup → 42"]
        check_timeline(rt.events[THREAD])


@pytest.mark.parametrize(
    ("kind", "decision", "answer"),
    [("command", "allow_once", "echo: approve:command go"), ("file_change", "deny", "echo: denied"),
     ("permission_grant", "allow_for_session", "echo: approve:permission_grant go"), ("plan", None, "echo: denied")],
)  # fmt: skip
async def test_an_approve_directive_asks_before_it_answers(kind: str, decision: str | None, answer: str) -> None:
    async with echo() as child:
        rt = child.runtime  # no decision: the runtime refuses the request, which denies
        if decision is not None:
            rt.resolution = (
                {"decision": decision, "grantedPermissions": None} if decision != "deny" else {"decision": decision}
            )
        ptid = await start_thread(rt, THREAD)
        events = await turn(rt, ptid, f"approve:{kind} go")
        [(method, ask)] = rt.requests
        assert method == "interaction/request"
        typed = msgspec.convert(ask, interactions.InteractionRequestParams)
        assert isinstance(typed.payload, interactions.ApprovalPayload) and ask["payload"]["subject"]["kind"] == kind
        assert (typed.payload.subject.itemId, typed.providerNativeIds, typed.threadId) == ("approval-1", True, THREAD)
        message = [
            e["item"]["text"] for e in events if e["type"] == "item/completed" and e["item"]["type"] == "agentMessage"
        ]
        assert message == [answer]
        check_timeline(events)


async def test_a_refused_tool_call_is_reported_in_the_turn() -> None:
    async with echo() as child:
        rt = child.runtime  # no resolution: the runtime refuses the request
        ptid = await start_thread(rt, THREAD)
        events = await turn(rt, ptid, "tool:missing")
        tool = [e["item"] for e in events if e["type"] == "item/completed" and e["item"]["type"] == "toolCall"]
        assert tool[0]["status"] == "failed" and tool[0]["error"] == "Method not found: item/tool/call"
        assert tool[0]["presentation"]["label"] == {"pending": "Calling tool", "completed": "Called tool"}


async def test_start_with_input_runs_a_turn_without_accepted_input() -> None:
    async with echo() as child:
        rt = child.runtime
        params = {"threadId": THREAD, "cwd": "/tmp", "options": FULL, "input": [{"type": "text", "text": "first"}]}
        await rt.call("thread/start", params)
        await rt.wait_until(lambda: "turn/completed" in rt.types(THREAD))
        assert "turn/input/accepted" not in rt.types(THREAD)
        assert rt.events[THREAD][-3]["item"]["text"] == "echo: first"


@pytest.mark.parametrize("text", ["noop", "", "   "])
async def test_zero_work_turn_settles_without_activity(text: str) -> None:
    async with echo() as child:
        ptid = await start_thread(child.runtime, THREAD)
        events = await turn(child.runtime, ptid, text)
        assert types(events) == ["turn/started", "turn/input/accepted", "turn/completed"]


async def test_fail_ends_the_turn_failed() -> None:
    async with echo() as child:
        ptid = await start_thread(child.runtime, THREAD)
        events = await turn(child.runtime, ptid, "fail:disk_is_full")
        assert types(events)[-3:] == ["item/completed", "provider/error", "turn/completed"]
        error = events[-2]
        assert (error["message"], error["detail"], error["willRetry"]) == ("Provider error", "disk is full", False)
        assert events[-1]["status"] == "failed"
        check_timeline(events)


# -- every delta kind --------------------------------------------------------------


async def test_deltas_all_covers_every_event_type_kind_and_shape() -> None:
    async with echo() as child:
        rt = child.runtime
        ptid = await start_thread(rt, THREAD)
        events = await turn(rt, ptid, "deltas:all")
        assert set(types(events)) == set(EVENT_TYPES)
        assert len(EVENT_TYPES) == 30
        assert events[-1] == {
            "type": "turn/completed",
            "threadId": "",
            "providerThreadId": "",
            "scope": events[0]["scope"],
            "status": "completed",
            "providerCheckpointId": f"{ptid}:1",
        }
        check_timeline(events)
        shapes = {
            type(d.item).__struct_config__.tag for d in rt.deltas[THREAD] if isinstance(d, g.ItemOpen | g.ItemClose)
        }
        assert len(shapes) == 16
        opened = rt.kinds(THREAD).index("session.reset") + 1  # the session's own reset opened it
        with trio.fail_after(10):  # the two session kinds follow the boundary: session.ended, then a rebuild
            await rt.wait_until(lambda: rt.kinds(THREAD)[opened:].count("session.reset") == 1)
        assert set(rt.kinds(THREAD)[opened:]) == set(g.DELTA_KINDS)
        assert any(m.endswith(":session/replaced") for m in rt.methods())
        # session.ended with a turn open settles it as interrupted
        ended = await turn(rt, ptid, "deltas:session.ended", "creq_2222222224")
        assert types(ended)[-2:] == ["item/completed", "turn/completed"]
        assert ended[-2]["item"]["text"] == "echo: deltas:session.ended"
        assert ended[-1]["status"] == "interrupted"


# -- steer and interrupt -------------------------------------------------------------


def text_so_far(rt: Runtime) -> str:
    return "".join(e["delta"] for e in rt.events[THREAD] if e["type"] == "item/agentMessage/delta")


async def test_steer_lands_in_the_live_turn() -> None:
    async with echo() as child:
        rt = child.runtime
        ptid = await start_thread(rt, THREAD)
        steer = turn_params(THREAD, ptid, "more please", "creq_2222222224") | {"expectedTurnId": "whatever"}
        err = await rt.error("turn/steer", steer)
        assert (err.code, err.message) == (rpc.NO_ACTIVE_TURN, "No active turn to steer (expected whatever)")

        await rt.call("turn/start", turn_params(THREAD, ptid, "hold on"))
        await rt.wait_until(lambda: text_so_far(rt) == "echo: hold on")
        err = await rt.error("turn/start", turn_params(THREAD, ptid, "overlap", "creq_2222222225"))
        assert err.code == rpc.BRIDGE_ERROR
        assert await rt.call("turn/steer", steer) == {}
        await rt.wait_until(lambda: text_so_far(rt).endswith("more please"))
        finish = steer | {"clientRequestId": "creq_2222222226", "input": [{"type": "text", "text": "finish"}]}
        await rt.call("turn/steer", finish)
        await rt.wait_until(lambda: "turn/completed" in rt.types(THREAD))
        events = rt.events[THREAD]
        turn_scope = events[0]["scope"]
        accepted = [e for e in events if e["type"] == "turn/input/accepted"]
        assert [(e["clientRequestId"], e["scope"]) for e in accepted] == [
            ("creq_2222222223", turn_scope),
            ("creq_2222222224", turn_scope),
            ("creq_2222222226", turn_scope),
        ]
        assert events[-3]["item"]["text"] == "echo: hold on [steer] more please [steer] finish"
        assert events[-1]["status"] == "completed"
        check_timeline(events)
        err = await rt.error("turn/steer", steer)
        assert err.code == rpc.NO_ACTIVE_TURN


async def test_interrupt_settles_before_the_stop_response() -> None:
    async with echo() as child:
        rt = child.runtime
        ptid = await start_thread(rt, THREAD)
        await rt.call("turn/start", turn_params(THREAD, ptid, "slow:600000 a very long answer"))
        await rt.wait_until(lambda: "item/agentMessage/delta" in rt.types(THREAD))
        stop = {"threadId": THREAD, "providerThreadId": ptid, "intent": "interrupt", "activeTurnId": "bb-turn"}
        assert await rt.call("thread/stop", stop) == {}
        settled = rt.log.index(("note", "thread/delta", {"threadId": THREAD, "deltas": [{"kind": "session.ended"}]}))
        assert rt.log[settled + 1] == ("answer", "thread/stop", {})  # turn/interrupt-settles-before-response
        events = rt.events[THREAD]
        assert types(events)[-2:] == ["item/completed", "turn/completed"]
        assert events[-2]["item"]["text"] == "echo: "
        assert events[-1]["status"] == "interrupted"
        check_timeline(events)
        err = await rt.error("turn/steer", turn_params(THREAD, ptid, "late") | {"expectedTurnId": "bb-turn"})
        assert err.code == rpc.NO_ACTIVE_TURN
        # the session survives an interrupt: a new turn runs, then a release fabricates nothing
        await turn(rt, ptid, "again", "creq_2222222224")
        count = len(rt.events[THREAD])
        release = stop | {"intent": "release", "activeTurnId": None}
        assert await rt.call("thread/stop", release) == {"providerCheckpointId": f"{ptid}:1"}
        assert len(rt.events[THREAD]) == count


async def test_release_of_a_live_turn_fabricates_nothing() -> None:
    async with echo() as child:
        rt = child.runtime
        ptid = await start_thread(rt, THREAD)
        await rt.call("turn/start", turn_params(THREAD, ptid, "hold"))
        await rt.wait_until(lambda: text_so_far(rt) == "echo: hold")
        count = len(rt.log)
        stop = {"threadId": THREAD, "providerThreadId": ptid, "intent": "release", "activeTurnId": None}
        assert await rt.call("thread/stop", stop) == {}
        assert rt.log[count:] == [("answer", "thread/stop", {})]
        err = await rt.error("turn/start", turn_params(THREAD, ptid, "x"))
        assert (err.code, err.message) == (rpc.BRIDGE_ERROR, f"Unknown thread: {THREAD}")


# -- sessions ------------------------------------------------------------------------


async def test_resume_and_fork() -> None:
    async with echo() as child:
        rt = child.runtime
        ptid = await start_thread(rt, THREAD)
        first = await turn(rt, ptid, "one")
        await turn(rt, ptid, "two", "creq_2222222224")
        base = {"threadId": "thr_fork", "cwd": "/tmp", "options": FULL, "sourceProviderThreadId": ptid}
        forked = await rt.call("thread/fork", base | {"sourceProviderCheckpointId": first[-1]["providerCheckpointId"]})
        assert forked["providerThreadId"] not in (ptid, None)
        assert rt.log[-2][1:] == ("thread/delta", {"threadId": "thr_fork", "deltas": [{"kind": "session.reset"}]})
        stop = {"threadId": "thr_fork", "providerThreadId": forked["providerThreadId"], "intent": "release"}
        assert await rt.call("thread/stop", stop | {"activeTurnId": None}) == {"providerCheckpointId": f"{ptid}:1"}
        err = await rt.error("thread/fork", base | {"sourceProviderCheckpointId": "nope"})
        assert (err.code, err.message) == (rpc.BRIDGE_ERROR, f'Unknown checkpoint "nope" in echo session "{ptid}"')
        tip = await rt.call("thread/fork", base)
        assert tip["providerThreadId"] != forked["providerThreadId"]

        resume = {"threadId": THREAD, "cwd": "/tmp", "options": FULL, "providerThreadId": ptid}
        assert await rt.call("thread/resume", resume) == {"providerThreadId": ptid, "sessionRestorable": True}
        again = await turn(rt, ptid, "three", "creq_2222222225")
        assert again[-1]["providerCheckpointId"] == f"{ptid}:3"  # checkpoints stay unique across sessions
        err = await rt.error("thread/resume", resume | {"providerThreadId": "someone-else"})
        assert (err.code, err.message) == (rpc.SESSION_NOT_RESTORABLE, 'Echo session "someone-else" cannot be restored')
        check_timeline(rt.events[THREAD])


# -- hygiene -------------------------------------------------------------------------


async def test_rpc_hygiene() -> None:
    async with echo() as child:
        rt = child.runtime
        err = await rt.error("bb/conformance/definitely-unknown-method", {})
        assert err.code == rpc.METHOD_NOT_FOUND
        err = await rt.error("thread/stop", {})
        assert (err.code, err.message) == (rpc.INVALID_PARAMS, "Invalid params for thread/stop")
        assert err.data == [{"path": [], "message": "Object missing required field `threadId`"}]
        err = await rt.error("turn/start", turn_params(THREAD, "p", "x", creq="not-a-creq"))
        assert err.data[0]["path"] == ["clientRequestId"]
        await child.raw(b"this is { not json\n")
        await child.raw(b'{"jsonrpc":"2.0","id":999999,"result":{}}\n')
        ptid = await start_thread(rt, THREAD)  # still serving
        assert types(await turn(rt, ptid, "alive"))[-1] == "turn/completed"
    assert child.runtime.junk == []


# -- pure helpers ------------------------------------------------------------------


def test_directives() -> None:
    assert parse_directives("hello").mode == "echo"
    assert parse_directives(" ").mode == "noop"
    assert parse_directives("please noop").mode == "noop"
    slow = parse_directives("slow:250 hold text")
    assert (slow.delay, slow.hold) == (0.25, True)
    assert parse_directives("slow:x").delay == 0
    assert parse_directives("fail").detail == "echo failure requested by the prompt"
    assert parse_directives("deltas:all").mode == "all"
    assert parse_directives("deltas:session.ended").mode == "ended"


def test_chunks_concatenate_back() -> None:
    assert chunks("echo: hi  there ") == ["echo: ", "hi  ", "there "]
    assert chunks("   ") == ["   "]
    assert chunks("") == []
