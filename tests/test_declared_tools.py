"""Client-declared tools: the daemon checks a bridge's `item/tool/call` before relaying it (issue 13, part 1).

The daemon runs on a socket with `tests/fakes/fake_bridge.py` in its `tool` mode: a turn whose input text is
`{"tool", "arguments"}` makes the bridge send that call, and the bridge reports what it was answered as the
turn's text, so each test sees both sides: what the client was asked, and what the bridge got back.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from bbridge.daemon.declared_tools import (
    MAX_ARGUMENT_BYTES,
    Checker,
    DeclarationError,
    Declarations,
    Refusal,
    failed_result,
    lookup,
)
from bbridge.ops import format_status
from bbridge.wire import rpc
from tests.support import connect, fake_provider, running

THREAD = "thr_tools"
OTHER = "thr_other"
SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
    "required": ["query"],
}
LOOKUP = {"name": "lookup", "description": "Look a word up", "inputSchema": SCHEMA}
SEARCH = {
    "name": "search",
    "description": "Search",
    "inputSchema": {"type": "object", "properties": {"terms": {"type": "array", "items": {"type": "string"}}}},
    "presentation": {"label": {"pending": "Searching", "completed": "Searched"}, "icon": {"glyph": "magnifier"}},
}
OK = {"success": True, "contentItems": [{"type": "inputText", "text": "found it"}]}


def start(thread: str = THREAD, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"providerId": "fake", "threadId": thread, "cwd": "/tmp", "options": {}}
    if tools is not None:
        params["dynamicTools"] = tools
    return params


def call_turn(spec: dict[str, Any] | None, n: int = 1, thread: str = THREAD) -> dict[str, Any]:
    text = json.dumps(spec) if spec is not None else "hi"
    return {
        "providerId": "fake",
        "threadId": thread,
        "input": [{"type": "text", "text": text}],
        "clientRequestId": f"creq_abcdefghj{'mnpqrstuvw'[n % 10]}",
    }


def completed(client: Any, thread: str = THREAD, count: int = 1) -> bool:
    return client.types(thread).count("turn/completed") >= count


def bridge_got(client: Any, thread: str = THREAD, turn: int = 1) -> Any:
    """What the bridge was answered for the tool call of the thread's `turn`-th turn (its turn text, decoded)."""
    texts: list[str] = []
    seen = 0
    for event in client.events(thread):
        if event["type"] == "turn/started":
            seen += 1
        elif event["type"] == "item/agentMessage/delta" and seen == turn:
            texts.append(event["delta"])
    return json.loads("".join(texts))


async def run_call(client: Any, spec: dict[str, Any], n: int, thread: str = THREAD) -> Any:
    await client.request("turn/start", call_turn(spec, n, thread))
    await client.wait_for(lambda: completed(client, thread, n))
    return bridge_got(client, thread, n)


def tool_calls(client: Any) -> list[dict[str, Any]]:
    return [msgspec.json.decode(r.params) for r in client.requests if r.method == "item/tool/call"]


async def test_a_valid_call_is_relayed_and_its_answer_reaches_the_bridge(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("tool")}) as (daemon, path):
        async with connect(path, answer=lambda request: OK) as client:
            await client.request("thread/start", start(tools=[LOOKUP]))
            got = await run_call(client, {"tool": "lookup", "arguments": {"query": "bb", "limit": 2}}, 1)
            assert got == OK
            [call] = tool_calls(client)
            assert call["tool"] == "lookup" and call["arguments"] == {"query": "bb", "limit": 2}
            assert call["threadId"] == THREAD and call["providerId"] == "fake"
            # Claude Code's name for the tool, and a call carrying only its providerThreadId, resolve the same way
            got = await run_call(
                client, {"tool": "mcp__bb-bridge__lookup", "arguments": {"query": "x"}, "bare": True}, 2
            )
            assert got == OK
            second = tool_calls(client)[1]
            assert second["tool"] == "lookup" and "threadId" not in second
            assert daemon.counters.tool_calls_relayed == 2
            assert daemon.counters.tool_calls_refused == daemon.counters.tool_calls_failed == 0
            assert daemon.checker.spawned == 1  # one checker process served both calls


async def test_invalid_arguments_are_refused_with_path_and_reason_and_never_reach_the_client(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("tool")}) as (daemon, path):
        async with connect(path, answer=lambda request: OK) as client:
            await client.request("thread/start", start(tools=[LOOKUP]))
            got = await run_call(client, {"tool": "lookup", "arguments": {"query": 3}}, 1)
            assert got == failed_result("Tool \"lookup\" arguments are invalid at /query: 3 is not of type 'string'")
            got = await run_call(client, {"tool": "lookup", "arguments": {"limit": 0}}, 2)
            assert got == failed_result(
                "Tool \"lookup\" arguments are invalid at (root): 'query' is a required property"
            )
            got = await run_call(client, {"tool": "lookup", "arguments": {"query": "a", "limit": 0}}, 3)
            assert got == failed_result(
                'Tool "lookup" arguments are invalid at /limit: 0 is less than the minimum of 1'
            )
            assert tool_calls(client) == []
            assert daemon.counters.tool_calls_refused == 3 and daemon.counters.tool_calls_relayed == 0


async def test_an_undeclared_tool_is_refused(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("tool")}) as (daemon, path):
        async with connect(path, answer=lambda request: OK) as client:
            await client.request("thread/start", start(tools=[LOOKUP, SEARCH]))
            await client.request("thread/start", start(OTHER))  # no tools at all
            got = await run_call(client, {"tool": "nope", "arguments": {}}, 1)
            assert got == failed_result('Tool "nope" is not declared for this thread (declared: "lookup", "search")')
            got = await run_call(client, {"tool": "lookup", "arguments": {"query": "q"}}, 1, OTHER)
            assert got == failed_result('Tool "lookup" is not declared for this thread (no tools are declared)')
            assert tool_calls(client) == []
            assert daemon.counters.tool_calls_refused == 2
            assert daemon.checker.spawned == 0


async def test_an_invalid_input_schema_refuses_the_construction_naming_the_tool(tmp_path: Path) -> None:
    broken = {"name": "broken", "description": "d", "inputSchema": {"type": "object", "properties": {"a": {"type": 5}}}}
    async with running(tmp_path, {"fake": fake_provider("tool")}) as (daemon, path):
        async with connect(path) as client:
            for method in ("thread/start", "thread/resume", "thread/fork"):
                params = start(tools=[LOOKUP, broken])
                params |= {"providerThreadId": "p", "sourceProviderThreadId": "p"}
                try:
                    await client.request(method, params)
                except rpc.RpcError as exc:
                    assert exc.code == rpc.INVALID_PARAMS
                    assert exc.message.startswith(
                        f'{method}: Tool "broken" has an invalid inputSchema (JSON Schema draft 2020-12) at '
                        "/properties/a/type: "
                    ), exc.message
                else:
                    raise AssertionError(f"{method} with an invalid inputSchema was accepted")
            twice = await _error(client, start(tools=[LOOKUP, LOOKUP]))
            assert twice.code == rpc.INVALID_PARAMS and 'Tool "lookup" is declared twice' in twice.message
            assert "fake" not in daemon.supervisor.bridges  # nothing was sent: the bridge was never even started
            assert THREAD not in daemon.registry.records
            assert await client.request("thread/start", start(tools=[LOOKUP])) == {"providerThreadId": f"prov-{THREAD}"}


async def _error(client: Any, params: dict[str, Any]) -> rpc.RpcError:
    try:
        await client.request("thread/start", params)
    except rpc.RpcError as exc:
        return exc
    raise AssertionError("the construction was accepted")


async def test_the_latest_successful_construction_wins(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("tool")}) as (daemon, path):
        async with connect(path, answer=lambda request: OK) as client:
            await client.request("thread/start", start(tools=[LOOKUP]))
            assert await run_call(client, {"tool": "lookup", "arguments": {"query": "q"}}, 1) == OK
            resume = start(tools=[SEARCH]) | {"providerThreadId": f"prov-{THREAD}"}
            await client.request("thread/resume", resume)
            got = await run_call(client, {"tool": "lookup", "arguments": {"query": "q"}}, 2)
            assert got == failed_result('Tool "lookup" is not declared for this thread (declared: "search")')
            assert await run_call(client, {"tool": "search", "arguments": {"terms": ["a"]}}, 3) == OK
            # a refused construction changes nothing
            bad = {"name": "search", "description": "d", "inputSchema": {"minimum": "one"}}
            refused = await _error(client, start(tools=[bad]))
            assert refused.code == rpc.INVALID_PARAMS and 'Tool "search"' in refused.message
            assert await run_call(client, {"tool": "search", "arguments": {"terms": []}}, 4) == OK
            # a construction without dynamicTools declares none
            await client.request("thread/resume", start() | {"providerThreadId": f"prov-{THREAD}"})
            got = await run_call(client, {"tool": "search", "arguments": {"terms": []}}, 5)
            assert got == failed_result('Tool "search" is not declared for this thread (no tools are declared)')
            assert [c["tool"] for c in tool_calls(client)] == ["lookup", "search", "search"]


async def test_oversized_arguments_are_refused_without_validating(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("tool")}) as (daemon, path):
        async with connect(path, answer=lambda request: OK) as client:
            await client.request("thread/start", start(tools=[LOOKUP]))
            arguments = {"query": "x" * MAX_ARGUMENT_BYTES}  # valid against the schema, only too large
            size = len(json.dumps(arguments, separators=(",", ":")))
            got = await run_call(client, {"tool": "lookup", "arguments": arguments}, 1)
            assert got == failed_result(
                f'Tool "lookup" arguments are too large: {size} bytes (limit {MAX_ARGUMENT_BYTES})'
            )
            assert daemon.checker.spawned == 0  # no checker ever saw them
            assert tool_calls(client) == []
            assert daemon.counters.tool_calls_refused == 1


HOSTILE = {
    "name": "match",
    "description": "a catastrophic-backtracking pattern",
    "inputSchema": {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}},
}
HOSTILE_CALL = {"tool": "match", "arguments": {"s": "a" * 31 + "!"}}  # ~2^31 steps in re: a minute or so


async def test_a_catastrophic_pattern_does_not_stall_other_threads(tmp_path: Path) -> None:
    # a deadline far beyond the test: the hostile check is still running when the other thread's turn is done
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_check_deadline_s=600) as (daemon, path):
        async with connect(path, answer=lambda request: OK) as client:
            await client.request("thread/start", start(tools=[HOSTILE]))
            await client.request("thread/start", start(OTHER))
            await client.request("turn/start", call_turn(HOSTILE_CALL))
            with trio.fail_after(15):
                while daemon.checker.busy == 0:
                    await trio.sleep(0.01)
                await trio.sleep(0.2)  # the checker is inside the match by now
                await client.request("turn/start", call_turn(None, 1, OTHER))
                await client.wait_for(lambda: completed(client, OTHER))
            assert daemon.checker.busy == 1 and not completed(client)  # the hostile call is still pending
            assert tool_calls(client) == []
            status = await client.request("daemon/status")  # the daemon answers its own requests too
            assert status["counters"]["tool_calls_refused"] == 0
        checker = daemon.checker
    assert checker.alive == 0  # shutdown killed the checker stuck in the match


async def test_a_check_that_outlasts_its_deadline_is_killed_and_refused(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("tool")}, tool_check_deadline_s=0.5) as (daemon, path):
        async with connect(path, answer=lambda request: OK) as client:
            await client.request("thread/start", start(tools=[HOSTILE]))
            got = await run_call(client, HOSTILE_CALL, 1)
            assert got == failed_result(
                'Tool "match" arguments could not be checked within 0.5 s; simplify the arguments'
            )
            assert daemon.checker.killed == 1 and daemon.checker.alive == 0
            assert await run_call(client, {"tool": "match", "arguments": {"s": "aaa"}}, 2) == OK  # a fresh checker
            assert daemon.checker.spawned == 2
            assert [c["arguments"] for c in tool_calls(client)] == [{"s": "aaa"}]
            assert daemon.counters.tool_calls_refused == 1 and daemon.counters.tool_calls_relayed == 1


def checkers(parent: int) -> list[int]:
    """The pids of the live (not zombie) tool-argument checker processes whose parent is `parent`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state, ppid = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if b"bbridge.daemon.toolcheck" in argv and int(ppid) == parent and state != "Z":
            found.append(int(entry))
    return found


def gone(pid: int) -> bool:
    """The process has exited (a zombie nobody reaped yet counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


IDLE_S = 1.0  # trio's worker-thread idle timeout in the test below: well past a checker's start (~0.1 s)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
async def test_a_call_after_the_daemon_idled_past_trios_worker_threads_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agents think for longer than trio keeps an idle worker thread (`IDLE_TIMEOUT`, 10 s; 1 s here). The
    checker used to be forked from one, and its `PR_SET_PDEATHSIG` killed it when that thread exited, so the
    next call was refused as `the checker failed`. The checker now serves both calls."""
    monkeypatch.setattr("trio._core._thread_cache.IDLE_TIMEOUT", IDLE_S)
    async with running(tmp_path, {"fake": fake_provider("tool")}) as (daemon, path):
        async with connect(path, answer=lambda request: OK) as client:
            await client.request("thread/start", start(tools=[LOOKUP]))
            assert await run_call(client, {"tool": "lookup", "arguments": {"query": "a"}}, 1) == OK
            [pid] = checkers(os.getpid())
            await trio.sleep(IDLE_S + 0.6)  # every worker thread the call used has exited by now
            assert await run_call(client, {"tool": "lookup", "arguments": {"query": "b"}}, 2) == OK
            assert checkers(os.getpid()) == [pid] and daemon.checker.spawned == 1
            assert daemon.counters.tool_calls_relayed == 2 and daemon.counters.tool_calls_refused == 0


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
async def test_a_checker_killed_between_calls_is_replaced_and_the_next_call_is_checked(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("tool")}) as (daemon, path):
        async with connect(path, answer=lambda request: OK) as client:
            await client.request("thread/start", start(tools=[LOOKUP]))
            assert await run_call(client, {"tool": "lookup", "arguments": {"query": "a"}}, 1) == OK
            [pid] = checkers(os.getpid())
            os.kill(pid, signal.SIGKILL)
            with trio.fail_after(5):
                while not gone(pid):
                    await trio.sleep(0.01)
            got = await run_call(client, {"tool": "lookup", "arguments": {"query": 3}}, 2)
            assert got == failed_result("Tool \"lookup\" arguments are invalid at /query: 3 is not of type 'string'")
            assert await run_call(client, {"tool": "lookup", "arguments": {"query": "c"}}, 3) == OK
            assert daemon.checker.spawned == 2 and daemon.checker.alive == 1
            assert checkers(os.getpid()) not in ([], [pid])
            assert daemon.counters.tool_calls_relayed == 2 and daemon.counters.tool_calls_refused == 1


async def test_an_invalid_client_answer_or_a_client_error_fails_the_call(tmp_path: Path) -> None:
    answers: list[Any] = [{"success": "yes"}, {"contentItems": []}, rpc.RpcError(-32000, "tool exploded")]

    def answer(request: rpc.Request) -> Any:
        reply = answers.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    async with running(tmp_path, {"fake": fake_provider("tool")}) as (daemon, path):
        async with connect(path, answer=answer) as client:
            await client.request("thread/start", start(tools=[LOOKUP]))
            for n in (1, 2):
                got = await run_call(client, {"tool": "lookup", "arguments": {"query": "q"}}, n)
                assert got["success"] is False and len(got["contentItems"]) == 1
                text = got["contentItems"][0]["text"]
                assert text.startswith('The client\'s answer to tool "lookup" was not a valid tool result ('), text
                assert text.endswith("); the call failed")
            assert "success" in bridge_got(client, turn=2)["contentItems"][0]["text"]
            got = await run_call(client, {"tool": "lookup", "arguments": {"query": "q"}}, 3)
            assert got == {"code": -32000, "message": "tool exploded"}  # a client error reaches the bridge as one
            assert len(tool_calls(client)) == 3
            counters = daemon.counters
            assert (counters.tool_calls_relayed, counters.tool_calls_failed, counters.tool_calls_refused) == (3, 3, 0)


async def test_daemon_status_counts_tool_calls_and_bbridge_status_shows_them(tmp_path: Path) -> None:
    answers = [OK, {"nope": True}]
    async with running(tmp_path, {"fake": fake_provider("tool")}) as (daemon, path):
        async with connect(path, answer=lambda request: answers.pop(0)) as client:
            await client.request("thread/start", start(tools=[LOOKUP]))
            await run_call(client, {"tool": "lookup", "arguments": {"query": "q"}}, 1)  # relayed
            await run_call(client, {"tool": "lookup", "arguments": {"query": 1}}, 2)  # refused: arguments
            await run_call(client, {"tool": "other", "arguments": {}}, 3)  # refused: undeclared
            await run_call(client, {"tool": "lookup", "arguments": {"query": "q"}}, 4)  # relayed, then failed
            status = await client.request("daemon/status")
    counters = status["counters"]
    assert (counters["tool_calls_relayed"], counters["tool_calls_refused"], counters["tool_calls_failed"]) == (2, 2, 1)
    lines = format_status(status)
    assert "  tool_calls_relayed: 2" in lines and "  tool_calls_refused: 2" in lines
    assert "  tool_calls_failed: 1" in lines


# -- the decision itself, as a property ----------------------------------------------------------

PROPERTY_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "maxLength": 4, "pattern": "^[a-c]*$"},
        "limit": {"type": "integer", "minimum": 0, "maximum": 9},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "maxItems": 3},
        "mode": {"enum": ["fast", "slow", None]},
        "ratio": {"type": "number", "exclusiveMaximum": 1},
    },
    "required": ["query"],
    "additionalProperties": False,
}
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet="abcd!é", max_size=6)
    | st.sampled_from(["fast", "slow", "a", "", "abc"])
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet="abq", max_size=3), inner, max_size=3),
    max_leaves=12,
)
_keys = st.sampled_from(["query", "limit", "tags", "mode", "ratio", "other"])
_near_valid = st.fixed_dictionaries(
    {"query": st.text(alphabet="abcd", max_size=5)},
    optional={
        "limit": st.integers(min_value=-1, max_value=10),
        "tags": st.lists(st.sampled_from(["x", "y", "z", 1]), max_size=4),
        "mode": st.sampled_from(["fast", "slow", None, "medium"]),
        "ratio": st.floats(min_value=0, max_value=1.5),
    },
)
ARGUMENTS = _near_valid | st.dictionaries(_keys, _json, max_size=5) | _json


async def test_the_decision_is_exactly_draft_2020_12_validity() -> None:
    """For random JSON arguments, the daemon's checks (declaration, lookup, checker process) refuse exactly
    what `Draft202012Validator(schema).is_valid` rejects, and relay the rest."""
    tool = lookup(
        await Declarations().declare([{"name": "t", "description": "d", "inputSchema": PROPERTY_SCHEMA}]), "t"
    )
    assert not isinstance(tool, Refusal)
    checker = Checker()
    reference = jsonschema.Draft202012Validator(PROPERTY_SCHEMA)
    seen = {True: 0, False: 0}

    @settings(deadline=None)
    @given(ARGUMENTS)
    def decide(arguments: Any) -> None:
        refusal = trio.from_thread.run(checker.check, tool, arguments)
        expected = reference.is_valid(arguments)
        assert (refusal is None) == expected, (arguments, refusal)
        if refusal is not None:
            assert refusal.message.startswith('Tool "t" arguments are invalid at ')
        seen[expected] += 1

    try:
        await trio.to_thread.run_sync(decide)
    finally:
        await checker.aclose()
    assert checker.spawned == 1 and checker.alive == 0
    assert min(seen.values()) > 0, seen  # both decisions were exercised


async def test_schemas_and_arguments_too_deep_to_check_are_refused() -> None:
    deep: Any = {"type": "object"}
    for _ in range(120):  # 121 levels: within the 256-level nesting bound, too deep for check_schema's recursion
        deep = {"anyOf": [deep, {"type": "string"}]}
    table = Declarations()
    try:
        await table.declare([{"name": "deep", "description": "d", "inputSchema": deep}])
    except DeclarationError as exc:
        assert str(exc) == 'Tool "deep" has an inputSchema nested too deeply to check'
    else:
        raise AssertionError("a schema too deep for check_schema was accepted")
    recursive = await table.declare([{"name": "nest", "description": "d", "inputSchema": {"items": {"$ref": "#"}}}])
    arguments: Any = []
    for _ in range(250):
        arguments = [arguments]
    checker = Checker()
    try:
        refusal = await checker.check(recursive["nest"], arguments)
        assert refusal is not None and refusal.message == (
            'Tool "nest" arguments are invalid at (root): the arguments are nested too deeply to check against '
            "this schema"
        )
        assert await checker.check(recursive["nest"], [[[]]]) is None  # the checker lives on
    finally:
        await checker.aclose()
