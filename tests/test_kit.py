"""bbridge.kit: a minimal bridge written with it, dispatch hygiene, negotiation, deltas, usage, record mode, stdio guard."""

from __future__ import annotations

import inspect
import json
import signal
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from bbridge import kit
from bbridge.core import grammar as g
from bbridge.wire import framing, protocol, rpc
from tests.support import FULL, INIT, capabilities, in_process, spawned, start_thread, turn_params

# -- a complete bridge written with the kit (the minimal example) -------------


def minimal_bridge() -> kit.Bridge:
    """Echoes the prompt back as one assistant message; every line here is protocol-relevant."""
    bridge = kit.Bridge("mini", protocol.Capabilities(sessionRestore=True))
    sessions: dict[str, str] = {}

    @bridge.method("thread/start", protocol.ThreadStartParams)
    async def start(params: protocol.ThreadStartParams) -> dict[str, Any]:
        provider_thread_id = sessions[params.threadId] = f"mini-{len(sessions) + 1}"
        await bridge.open_session(params.threadId, provider_thread_id, session_restorable=True)
        return {"providerThreadId": provider_thread_id}

    @bridge.method("thread/resume", protocol.ThreadResumeParams)
    async def resume(params: protocol.ThreadResumeParams) -> dict[str, Any]:
        sessions[params.threadId] = params.providerThreadId
        await bridge.open_session(params.threadId, params.providerThreadId)
        return {"providerThreadId": params.providerThreadId}

    @bridge.method("turn/start", protocol.TurnStartParams)
    async def turn(params: protocol.TurnStartParams) -> dict[str, Any]:
        if params.threadId not in sessions:
            raise rpc.RpcError(rpc.BRIDGE_ERROR, f"Unknown thread: {params.threadId}")
        text = " ".join(i.text for i in params.input if isinstance(i, protocol.TextInput))
        key = g.ItemKey(providerItemId="answer")
        await bridge.emit(
            params.threadId,
            [
                g.InputAccepted(clientRequestId=params.clientRequestId),
                g.TurnOpen(),
                g.ItemTextDelta(key=key, channel="agentMessage", text=f"you said: {text}"),
                g.ItemTextClose(key=key, channel="agentMessage"),
                bridge.usage(params.threadId).turn(kit.tokens(input=len(text), output=len(text) + 10)),
                g.TurnBoundary(status="completed"),
            ],
        )
        return {}

    @bridge.method("thread/stop", protocol.ThreadStopParams)
    async def stop(params: protocol.ThreadStopParams) -> dict[str, Any]:
        sessions.pop(params.threadId, None)
        bridge.forget(params.threadId)
        return {}

    return bridge


# -- the minimal bridge, end to end -------------------------------------------


async def test_minimal_bridge_timeline() -> None:
    async with in_process(minimal_bridge()) as rt:
        result = await rt.call("initialize", INIT)
        assert result["protocolVersion"] == 2
        assert result["capabilities"]["grammarVersions"] == [3, 3]
        assert result["capabilities"]["sessionRestore"] is True
        ptid = await start_thread(rt)
        assert ptid == "mini-1"
        # §4.2: identity, then the reset, then the response
        assert rt.log[1:] == [
            ("note", "thread/identity", {"threadId": "thr_1", "providerThreadId": "mini-1", "sessionRestorable": True}),
            ("note", "thread/delta", {"threadId": "thr_1", "deltas": [{"kind": "session.reset"}]}),
            ("answer", "thread/start", {"providerThreadId": "mini-1"}),
        ]
        assert await rt.call("turn/start", turn_params("thr_1", ptid, "hi")) == {}
        assert rt.types("thr_1") == [
            "turn/started",
            "turn/input/accepted",
            "item/started",
            "item/agentMessage/delta",
            "item/completed",
            "thread/tokenUsage/updated",
            "turn/completed",
        ]
        assert rt.events["thr_1"][4]["item"]["text"] == "you said: hi"
        await rt.call("turn/start", turn_params("thr_1", ptid, "again", "creq_2222222224"))
        usage = [e["tokenUsage"] for e in rt.events["thr_1"] if e["type"] == "thread/tokenUsage/updated"]
        assert [u["last"]["totalTokens"] for u in usage] == [14, 20]
        assert [u["total"]["totalTokens"] for u in usage] == [14, 34]
        # a new session restarts the running total
        await rt.call("thread/resume", {"threadId": "thr_1", "cwd": "/tmp", "options": FULL, "providerThreadId": ptid})
        await rt.call("turn/start", turn_params("thr_1", ptid, "hi", "creq_2222222225"))
        assert rt.events["thr_1"][-2]["tokenUsage"]["total"]["totalTokens"] == 14
        assert (
            await rt.call(
                "thread/stop",
                {"threadId": "thr_1", "providerThreadId": ptid, "intent": "release", "activeTurnId": None},
            )
            == {}
        )


async def test_error_wording_is_a_per_bridge_choice() -> None:
    """Each reference bridge words -32601/-32602 its own way; one `Wording` line picks it (here Codex's)."""
    codex = kit.Wording('Unknown method "{method}"', 'Invalid params for "{method}": {issues}', issues_as_data=False)
    bridge = kit.Bridge("worded", wording=codex)
    bridge.method("thread/stop", protocol.ThreadStopParams)(lambda params: trio.sleep(0))
    async with in_process(bridge) as rt:
        err = await rt.error("thread/name/set", {})
        assert (err.code, err.message, err.data) == (rpc.METHOD_NOT_FOUND, 'Unknown method "thread/name/set"', None)
        bad_intent = {"threadId": "t", "providerThreadId": "p", "intent": "pause", "activeTurnId": None}
        err = await rt.error("thread/stop", bad_intent)
        assert (err.code, err.message, err.data) == (
            rpc.INVALID_PARAMS,
            "Invalid params for \"thread/stop\": intent: Invalid enum value 'pause'",
            None,
        )
        err = await rt.error("thread/stop", {})
        assert err.message == 'Invalid params for "thread/stop": Object missing required field `threadId`'


async def test_upward_requests_write_id_before_method() -> None:
    """Bridges write requests as `{"jsonrpc","id","method","params"}` (the reference bridges' order, claude-code
    and codex §8.2, the ACP recordings); the runtime's own requests keep `method` first and `id` last."""
    bridge = kit.Bridge("asker")

    @bridge.method("ask", dict)
    async def ask(params: dict[str, Any]) -> Any:
        return await bridge.request("interaction/request", {"threadId": "t"})

    ours, theirs = trio.testing.memory_stream_pair()
    lines = framing.LineReader()

    async def line() -> bytes:
        while True:
            for got in lines.feed(await ours.receive_stream.receive_some()):
                assert isinstance(got, bytes)
                return got

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bridge.serve, theirs.send_stream, theirs.receive_stream)
            await ours.send_stream.send_all(b'{"jsonrpc":"2.0","method":"ask","params":{},"id":"a"}\n')
            assert await line() == b'{"jsonrpc":"2.0","id":1,"method":"interaction/request","params":{"threadId":"t"}}'
            await ours.send_stream.send_all(b'{"jsonrpc":"2.0","id":1,"result":{"ok":true}}\n')
            assert await line() == b'{"jsonrpc":"2.0","id":"a","result":{"ok":true}}'
            nursery.cancel_scope.cancel()
    assert rpc.encode_request("m", {}, 1) == b'{"jsonrpc":"2.0","method":"m","params":{},"id":1}'


def test_minimal_bridge_reads_in_under_100_lines() -> None:
    assert len(inspect.getsource(minimal_bridge).splitlines()) < 100


# -- dispatch hygiene ------------------------------------------------------------


async def test_unknown_method_and_invalid_params() -> None:
    async with in_process(minimal_bridge()) as rt:
        err = await rt.error("bb/conformance/definitely-unknown-method", {})
        assert (err.code, err.message) == (
            rpc.METHOD_NOT_FOUND,
            "Method not found: bb/conformance/definitely-unknown-method",
        )
        err = await rt.error("thread/stop", {})
        assert (err.code, err.message) == (rpc.INVALID_PARAMS, "Invalid params for thread/stop")
        assert err.data == [{"path": [], "message": "Object missing required field `threadId`"}]
        bad_intent = {"threadId": "t", "providerThreadId": "p", "intent": "pause", "activeTurnId": None}
        err = await rt.error("thread/stop", bad_intent)
        assert err.data == [{"path": ["intent"], "message": "Invalid enum value 'pause'"}]
        err = await rt.error("thread/stop")  # absent params read as {}
        assert err.code == rpc.INVALID_PARAMS
        err = await rt.error("thread/stop", [1])
        assert err.data == [{"path": [], "message": "Expected `object`, got `array`"}]
        err = await rt.error("turn/start", turn_params("nope", "p", "x"))
        assert (err.code, err.message) == (rpc.BRIDGE_ERROR, "Unknown thread: nope")


async def test_junk_is_ignored_and_the_bridge_keeps_serving() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(minimal_bridge().serve, theirs.send_stream, theirs.receive_stream)
        await ours.send_all(
            b"this is { not json\n"
            b'{"jsonrpc":"2.0","id":999999,"result":{}}\n'
            b'{"jsonrpc":"2.0","id":5,"method":7}\n'
            b'{"jsonrpc":"2.0","method":"unknown/notification"}\n'
            b'{"jsonrpc":"2.0","id":"probe","method":"bb/conformance/alive-probe","params":{}}\n'
        )
        reader = framing.LineReader()
        answers: list[Any] = []
        while not answers or answers[-1].get("id") != "probe":
            answers += [json.loads(line) for line in reader.feed(await ours.receive_some()) if isinstance(line, bytes)]
        nursery.cancel_scope.cancel()
    assert answers == [
        {"jsonrpc": "2.0", "id": 5, "error": {"code": -32600, "message": "Invalid Request"}},
        {
            "jsonrpc": "2.0",
            "id": "probe",
            "error": {"code": -32601, "message": "Method not found: bb/conformance/alive-probe"},
        },
    ]


async def test_bridge_requests_and_notifications_to_the_runtime() -> None:
    bridge = kit.Bridge("asker")

    @bridge.method("turn/start", dict)
    async def ask(params: dict[str, Any]) -> Any:
        await bridge.notify("provider/recovery", {"kind": "rateLimited", "message": "slow down", "retryable": True})
        return await bridge.request("item/tool/call", {"tool": params["tool"]})

    async def answer(request: rpc.Request) -> Any:
        return {"success": True, "asked": request.method, "params": msgspec.json.decode(request.params or b"null")}

    seen: list[str] = []

    async def notes(batch: list[rpc.Notification]) -> None:
        seen.extend(n.method for n in batch)

    ours, theirs = trio.testing.memory_stream_pair()
    runtime = rpc.Connection(
        ours.send_stream, ours.receive_stream, name="rt", on_request=answer, on_notifications=notes
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(bridge.serve, theirs.send_stream, theirs.receive_stream)
        nursery.start_soon(runtime.run)
        result = await runtime.request("turn/start", {"tool": "grep"})
        nursery.cancel_scope.cancel()
    assert result == {"success": True, "asked": "item/tool/call", "params": {"tool": "grep"}}
    assert seen == ["provider/recovery"]


# -- grammar negotiation ---------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "version"),
    [([3, 3], 3), ([2, 5], 3), ([1, 3], 3), (None, 3)],
)
async def test_grammar_negotiation(asked: list[int] | None, version: int) -> None:
    bridge = minimal_bridge()
    params = {k: v for k, v in INIT.items() if k != "grammarVersions"}
    if asked is not None:
        params["grammarVersions"] = asked
    async with in_process(bridge) as rt:
        result = await rt.call("initialize", params)
    assert result == {"protocolVersion": 2, "capabilities": capabilities(sessionRestore=True)}
    assert bridge.grammar_version == version


async def test_grammar_ranges_that_miss_are_refused_legibly() -> None:
    async with in_process(minimal_bridge()) as rt:
        err = await rt.error("initialize", INIT | {"grammarVersions": [1, 2]})
        assert err.code == rpc.BRIDGE_ERROR
        assert err.message == (
            'Bridge "mini" emits thread/delta grammar versions 3-3, but the runtime assembles versions 1-2; '
            "no version is in both ranges."
        )
        assert err.data == {"bridgeGrammarVersions": [3, 3], "runtimeGrammarVersions": [1, 2]}
        err = await rt.error("initialize", INIT | {"grammarVersions": [3, 2]})
        assert err.code == rpc.INVALID_PARAMS


def test_capabilities_always_declare_the_kit_grammar() -> None:
    bridge = kit.Bridge("x", protocol.Capabilities(grammarVersions=(2, 2), fork="tip"))
    assert bridge.capabilities.grammarVersions == g.GRAMMAR_VERSIONS
    assert bridge.capabilities.fork == "tip"


# -- deltas ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("delta", "reason"),
    [
        (g.InputAccepted(clientRequestId="creq_bad"), "clientRequestId"),
        (g.ItemTextDelta(key=g.ItemKey(providerItemId="a\x1fb"), channel="agentMessage", text="x"), "providerItemId"),
        (g.ItemTextDelta(key=g.ItemKey(), channel="nope", text="x"), "channel"),  # type: ignore[arg-type]
        (g.ExtensionState(extensionKind="Bad", payload=None), "extensionKind"),
    ],
)
async def test_invalid_deltas_raise_and_send_nothing(delta: g.Delta, reason: str) -> None:
    bridge = minimal_bridge()
    async with in_process(bridge) as rt:
        await rt.call("initialize", INIT)
        with pytest.raises(kit.DeltaError, match=reason):
            await bridge.emit("thr_1", [g.TurnOpen(), delta])
        await bridge.emit("thr_1", [g.TurnOpen()])
        await rt.wait_until(lambda: bool(rt.deltas["thr_1"]))
        assert rt.kinds("thr_1") == ["turn.open"]


def test_encode_deltas_is_the_wire_form() -> None:
    data = kit.encode_deltas("t", [g.TurnBoundary(status="completed", providerTurnId="turn-1")])
    assert (
        data == b'{"threadId":"t","deltas":[{"kind":"turn.boundary","status":"completed","providerTurnId":"turn-1"}]}'
    )


_SHOWN = g.Presentation(
    label=g.Label(pending="Running x", completed="Ran x"), icon=g.Icon(glyph="Toolbox"), title="t", suppress=True
)
_TOOL = g.ItemOpen(key=g.ItemKey(providerItemId="i"), item=g.ToolShape(tool="x", server="s"), presentation=_SHOWN)
_BOUNDARY = g.TurnBoundary(status="completed", providerTurnId="turn-1")


def _raw(params: Any) -> g.RawEvent:
    return g.RawEvent(jsonrpc="2.0", method="m", params=params)


def test_a_delta_encoder_without_tables_writes_what_encode_deltas_writes() -> None:
    """One encoder: the member-order path is the Struct path plus its tables, byte for byte."""
    batch = [
        _BOUNDARY,
        _TOOL,
        g.Unhandled(raw=_raw({"n": 1, "a": [None, "é"]}), rawType="x", vouchedTurn=False, providerTurnId="turn-1"),
    ]
    assert kit.DeltaEncoder()("t", batch) == kit.encode_deltas("t", batch)


def test_a_delta_encoder_writes_the_members_its_tables_name_first() -> None:
    encoder = kit.DeltaEncoder(
        kinds={"turn.boundary": ("kind", "providerTurnId")},
        items={"tool": ("type", "server")},
        presentation=("label", "icon", "suppress"),
    )
    boundary, opened = json.loads(encoder("t", [_BOUNDARY, _TOOL]))["deltas"]
    assert list(boundary) == ["kind", "providerTurnId", "status"]
    assert list(opened["item"]) == ["type", "server", "tool"]
    assert list(opened["presentation"]) == ["label", "icon", "suppress", "title"]
    assert list(json.loads(kit.encode_deltas("t", [_TOOL]))["deltas"][0]["presentation"])[2] == "title"


def test_a_javascript_delta_encoder_writes_as_json_stringify() -> None:
    """Raw payloads keep JavaScript's number spellings and a lone surrogate, which msgspec could not write."""
    raw = _raw({"n": 1e21, "whole": 2.0, "s": "a\ud800"})
    data = kit.DeltaEncoder(javascript=True)("t", [g.Unhandled(raw=raw, rawType="x", vouchedTurn=False)])
    assert b'"params":{"n":1e+21,"whole":2,"s":"a\\ud800"}' in data


@pytest.mark.parametrize("javascript", [False, True])
def test_a_delta_encoder_refuses_what_the_grammar_rejects(javascript: bool) -> None:
    encoder = kit.DeltaEncoder(presentation=("label",), javascript=javascript)
    with pytest.raises(kit.DeltaError, match="clientRequestId"):
        encoder("t", [g.InputAccepted(clientRequestId="creq_bad")])


def test_usage_meter_sums_turns() -> None:
    meter = kit.UsageMeter()
    first = meter.turn(kit.tokens(100, 20, cached_input=40, reasoning_output=5), model_context_window=200_000)
    second = meter.turn(kit.tokens(10, 2), provider_turn_id="turn-2")
    assert msgspec.to_builtins(first) == {
        "kind": "usage",
        "total": {
            "totalTokens": 120,
            "inputTokens": 100,
            "cachedInputTokens": 40,
            "outputTokens": 20,
            "reasoningOutputTokens": 5,
        },
        "last": {
            "totalTokens": 120,
            "inputTokens": 100,
            "cachedInputTokens": 40,
            "outputTokens": 20,
            "reasoningOutputTokens": 5,
        },
        "modelContextWindow": 200_000,
    }
    assert msgspec.to_builtins(second)["total"] == {
        "totalTokens": 132,
        "inputTokens": 110,
        "cachedInputTokens": 40,
        "outputTokens": 22,
        "reasoningOutputTokens": 5,
    }
    assert msgspec.to_builtins(second)["last"]["totalTokens"] == 12
    assert second.providerTurnId == "turn-2"
    assert second.modelContextWindow is None


# -- record mode -----------------------------------------------------------------


def test_env_without_runtime() -> None:
    env = {"PATH": "/bin", "BB_PROVIDER_BRIDGE_RECORD_DIR": "/rec", "ELECTRON_RUN_AS_NODE": "1", "BB_OTHER": "x"}
    assert kit.env_without_runtime(env) == {"PATH": "/bin", "BB_OTHER": "x"}
    assert "BB_PROVIDER_BRIDGE_RECORD_DIR" in env  # a copy


def read_lane(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_record_child_io_tees_both_lanes(recording: Path) -> None:
    to_child, child_in = trio.testing.memory_stream_one_way_pair()
    child_out, from_child = trio.testing.memory_stream_one_way_pair()
    stdin, stdout = kit.record_child_io(to_child, from_child, thread_id="thr/1 x")
    await stdin.send_all(b'{"id":1,"method":"initialize"}\n{"par')
    await stdin.send_all(b'tial":true}\n')
    await child_out.send_all(b'{"id":1,"result":{}}\nunterminated')
    assert await stdout.receive_some() == b'{"id":1,"result":{}}\nunterminated'
    assert await child_in.receive_some() == b'{"id":1,"method":"initialize"}\n{"partial":true}\n'
    other_in, _ = kit.record_child_io(trio.testing.memory_stream_one_way_pair()[0], from_child, thread_id=None)
    await other_in.send_all(b"models\n")

    sent = read_lane(recording / "thr-1-x" / "bridge→provider.ndjson")
    got = read_lane(recording / "thr-1-x" / "provider→bridge.ndjson")
    process = read_lane(recording / "_process" / "bridge→provider.ndjson")
    assert [e["line"] for e in sent] == ['{"id":1,"method":"initialize"}', '{"partial":true}']
    assert [e["line"] for e in got] == ['{"id":1,"result":{}}']
    assert [e["line"] for e in process] == ["models"]
    entries = sent + got + process
    assert [e["seq"] for e in entries] == [1, 2, 3, 4]  # one counter over every lane and scope
    assert {e["run"] for e in entries} == {kit.process_recorder().run}  # type: ignore[union-attr]
    assert [list(e) for e in entries] == [["ts", "run", "seq", "dir", "line"]] * 4
    assert {e["dir"] for e in got} == {"provider→bridge"}


async def test_record_child_io_is_a_no_op_when_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BB_PROVIDER_BRIDGE_RECORD_DIR", "   ")
    kit.process_recorder.cache_clear()
    send, receive = trio.testing.memory_stream_one_way_pair()
    assert kit.record_child_io(send, receive, thread_id="t") == (send, receive)
    kit.process_recorder.cache_clear()


# -- the process entry point -------------------------------------------------------

NOISY_BRIDGE = """
import subprocess, sys
import structlog
from bbridge.kit import Bridge

bridge = Bridge("noisy")

@bridge.method("noise", dict)
async def noise(params):
    print("stray print in a handler")
    structlog.get_logger().info("a log line")
    subprocess.run([sys.executable, "-c", "print('child stdout')"], check=True)
    return {"quiet": True}

bridge.run()
"""


async def test_stdout_stays_protocol_only() -> None:
    async with spawned([sys.executable, "-c", NOISY_BRIDGE]) as child:
        assert await child.runtime.call("noise", {}) == {"quiet": True}
        await child.raw(b"not json at all\n")
        assert (await child.runtime.call("initialize", INIT))["protocolVersion"] == 2
        assert await child.finish() == 0  # stdin EOF ends the bridge
    assert child.runtime.junk == []
    assert b"stray print in a handler" in child.stderr
    assert b"child stdout" in child.stderr
    assert b"a log line" in child.stderr


async def test_sigterm_ends_the_bridge_cleanly() -> None:
    async with spawned([sys.executable, "-c", NOISY_BRIDGE]) as child:
        await child.runtime.call("initialize", INIT)
        child.proc.send_signal(signal.SIGTERM)
        assert await child.proc.wait() == 0
    assert b"bridge stopping" in child.stderr
