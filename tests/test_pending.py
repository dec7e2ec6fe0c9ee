"""Pending bridge requests as thread state (issue 23): any client answers, the first answer wins, nothing is lost
on a disconnect, nothing hangs with nobody connected, a stop or a bridge exit resolves what waits; and the
registry's invariant under random interleavings (hypothesis)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from bbridge.daemon.config import ProviderConfig
from bbridge.daemon.journal import Journal
from bbridge.daemon.pending import Interactions, policy_answer
from bbridge.daemon.threads import ThreadRegistry
from bbridge.daemon.tracker import Tracker
from bbridge.wire import errors, rpc
from tests.conftest import REPO
from tests.support import FULL, connect, fake_provider, running

THREAD = "thr_pending"
START = {"providerId": "fake", "threadId": THREAD, "cwd": "/tmp", "options": {}}
TURN = {"providerId": "fake", "threadId": THREAD, "input": [], "clientRequestId": "creq_abcdefghjm"}


async def hang(request: rpc.Request) -> Any:
    """A client that was asked and never answers (a person away from the screen)."""
    await trio.sleep_forever()


def notes(client: Any, method: str) -> list[dict[str, Any]]:
    return [params for name, params in client.notes if name == method]


def turn_text(client: Any) -> str:
    done = [e["item"] for e in client.of(THREAD, "item/completed") if e["item"]["type"] == "agentMessage"]
    return str(done[-1]["text"]) if done else ""


async def test_any_client_answers_and_the_first_answer_wins(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("ask")}) as (_, path):
        async with connect(path, answer=hang) as owner, connect(path) as b, connect(path) as c:
            await owner.request("thread/start", START)
            await owner.request("turn/start", TURN)
            await b.wait_for(lambda: bool(notes(b, "interaction/opened")))
            (opened,) = notes(b, "interaction/opened")
            assert opened["threadId"] == THREAD and opened["kind"] == "user_question" and opened["providerId"] == "fake"
            (listed,) = (await c.request("thread/pending", {"threadId": THREAD}))["pending"]
            assert listed["requestId"] == opened["requestId"] and listed["ageS"] >= 0
            answer = {"kind": "user_answer", "answers": {"q1": {"selected": [], "freeText": "yes"}}}
            assert await b.request("interaction/respond", {"requestId": opened["requestId"], "result": answer}) == {
                "ok": True
            }
            with pytest.raises(rpc.RpcError) as late:
                await c.request("interaction/respond", {"requestId": opened["requestId"], "result": answer})
            assert late.value.code == errors.ALREADY_RESOLVED and "socket-2" in late.value.message
            await owner.wait_for(lambda: owner.settled(THREAD))
            for client in (owner, b, c):
                await client.wait_for(lambda client=client: bool(notes(client, "interaction/resolved")))
                (resolved,) = notes(client, "interaction/resolved")
                assert resolved["resolvedBy"] == "socket-2" and resolved["result"] == answer
            assert json.loads(turn_text(owner)) == answer  # the bridge got exactly this one answer
            assert (await c.request("thread/pending", {"threadId": THREAD}))["pending"] == []


async def test_a_disconnect_leaves_the_request_for_the_next_client(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("ask")}) as (daemon, path):
        async with connect(path) as observer:
            async with connect(path, answer=hang) as owner:
                await owner.request("thread/start", START)
                await owner.request("turn/start", TURN)
                await observer.wait_for(lambda: bool(notes(observer, "interaction/opened")))
            # the owner is gone without answering; the request is still pending
            async with connect(path) as b:
                (pending,) = (await b.request("thread/pending", {}))["pending"]
                answer = {"kind": "user_answer", "answers": {"q1": {"selected": [], "freeText": "later"}}}
                await b.request("interaction/respond", {"requestId": pending["requestId"], "result": answer})
                await b.wait_for(lambda: bool(notes(b, "interaction/resolved")))
                await observer.wait_for(lambda: observer.settled(THREAD))
                assert len(notes(b, "interaction/resolved")) == 1
            assert len(notes(observer, "interaction/resolved")) == 1
            assert json.loads(turn_text(observer)) == answer
            assert daemon.counters.interactions_by_policy == 0


async def test_with_nobody_connected_the_timeout_declines_by_policy(tmp_path: Path) -> None:
    journal = Journal(directory=tmp_path / "journal")
    provider = fake_provider("ask", interaction_timeout_s=0.5)
    async with running(tmp_path, {"fake": provider}, journal=journal) as (daemon, path):
        async with connect(path, answer=hang) as owner:  # asked before it leaves (or not): it never answers
            await owner.request("thread/start", START)
            await owner.request("turn/start", TURN)
        started = trio.current_time()
        with trio.fail_after(10):
            while daemon.counters.interactions_by_policy == 0:
                await trio.sleep(0.05)
        assert 0.4 <= trio.current_time() - started < 3  # promptly after its deadline
        async with connect(path) as later:
            listing = await later.request("thread/pending", {"threadId": THREAD})
            with trio.fail_after(10):  # the bridge settles its turn on the cancellation, after the resolution
                while True:
                    replay = await later.request("thread/events", {"threadId": THREAD, "afterSeq": 0})
                    if replay["events"][-1]["event"]["type"] == "turn/completed":
                        break
                    await trio.sleep(0.05)
        assert listing["pending"] == []
        (resolved,) = listing["resolved"]
        assert (
            resolved["resolvedBy"] == "daemon:timeout"
            and "no client answered within 0.5s" in resolved["error"]["message"]
        )
        assert replay["events"][-1]["event"]["type"] == "turn/completed"  # the turn settled on the cancellation
    journaled = (tmp_path / "journal" / f"{THREAD}.interactions.ndjson").read_text().splitlines()
    assert [json.loads(line)["resolvedBy"] for line in journaled] == ["daemon:timeout"]


async def test_a_stop_cancels_the_pending_question_and_the_turn_settles(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider("ask")}) as (_, path):
        async with connect(path, answer=hang) as owner:
            await owner.request("thread/start", START)
            await owner.request("turn/start", TURN)
            await owner.wait_for(lambda: bool(notes(owner, "interaction/opened")))
            stop = {"providerId": "fake", "threadId": THREAD, "intent": "interrupt", "activeTurnId": None}
            await owner.request("thread/stop", stop)
            await owner.wait_for(lambda: owner.settled(THREAD))
            (resolved,) = notes(owner, "interaction/resolved")
            assert resolved["resolvedBy"] == "daemon:thread-stop"
            assert resolved["error"]["message"] == "The user question was cancelled: the thread was stopped"


async def test_a_tool_call_with_nobody_connected_fails_readably(tmp_path: Path) -> None:
    tools = [{"name": "lookup", "description": "d", "inputSchema": {"type": "object"}}]
    provider = fake_provider("tool", interaction_timeout_s=0.3)
    async with running(tmp_path, {"fake": provider}) as (daemon, path):
        async with connect(path) as owner:
            await owner.request("thread/start", {**START, "dynamicTools": tools})
            text = json.dumps({"tool": "lookup", "arguments": {"q": 1}})
            await owner.request("turn/start", {**TURN, "input": [{"type": "text", "text": text, "mentions": []}]})
        with trio.fail_after(10):
            while daemon.counters.interactions_by_policy == 0:
                await trio.sleep(0.05)
        async with connect(path) as later:
            with trio.fail_after(10):
                while not (await later.request("thread/events", {"threadId": THREAD, "afterSeq": 0}))["events"][-1:]:
                    await trio.sleep(0.05)
            (resolved,) = (await later.request("thread/pending", {"threadId": THREAD}))["resolved"]
    assert resolved["kind"] == "tool_call" and resolved["result"]["success"] is False
    assert (
        resolved["result"]["contentItems"][0]["text"]
        == 'Tool "lookup" was not answered: no client answered within 0.3s'
    )


async def test_an_answers_warning_goes_on_the_thread_as_a_provider_warning(tmp_path: Path) -> None:
    """A client that cannot do what was asked (an editor that cannot show a question) answers with a `warning`:
    the turn goes on with the answer, and every client's timeline shows the warning on the request's thread."""
    async with running(tmp_path, {"fake": fake_provider("ask")}) as (_, path):
        async with connect(path, answer=hang) as owner, connect(path) as other:
            await owner.request("thread/start", START)
            await owner.request("turn/start", TURN)
            await owner.wait_for(lambda: bool(notes(owner, "interaction/opened")))
            (opened,) = notes(owner, "interaction/opened")
            said = "the editor cannot show “Go?”; answered with no answer"
            answer = {"kind": "user_answer", "answers": {}}
            respond = {"requestId": opened["requestId"], "result": answer, "warning": said}
            assert await owner.request("interaction/respond", respond) == {"ok": True}
            await owner.wait_for(lambda: owner.settled(THREAD))
            await other.wait_for(lambda: bool(other.of(THREAD, "provider/warning")))
            with pytest.raises(rpc.RpcError) as empty:
                await owner.request("interaction/respond", {**respond, "warning": ""})
            assert empty.value.code == rpc.INVALID_PARAMS
    for client in (owner, other):
        (warning,) = client.of(THREAD, "provider/warning")
        assert warning["summary"] == said and warning["category"] == "general"
        assert warning["scope"] == {"kind": "thread"} and warning["providerThreadId"] == f"prov-{THREAD}"
    assert json.loads(turn_text(owner)) == answer  # the bridge got the answer itself
    assert [e["status"] for e in owner.of(THREAD, "turn/completed")] == ["completed"]


async def test_respond_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider()}) as (_, path), connect(path) as client:
        with pytest.raises(rpc.RpcError) as unknown:
            await client.request("interaction/respond", {"requestId": "req_x", "result": {}})
        assert unknown.value.code == errors.UNKNOWN_REQUEST
        with pytest.raises(rpc.RpcError) as both:
            await client.request(
                "interaction/respond", {"requestId": "req_x", "result": {}, "error": {"code": 1, "message": "m"}}
            )
        assert both.value.code == rpc.INVALID_PARAMS


# -- the registry's invariant -------------------------------------------------------------------------------------

KINDS = ("interaction/request", "item/tool/call")
OPS = st.lists(
    st.tuples(
        st.sampled_from(["open", "answer", "timeout", "stop", "exit", "disconnect", "reconnect"]), st.integers(0, 5)
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_every_request_is_resolved_exactly_once(ops: list[tuple[str, int]]) -> None:
    """Random interleavings of open, answer, disconnect, reconnect, timeout, stop and bridge exit: each request
    is resolved once (one `interaction/resolved`), the bridge's waiter sees that one answer, later answers are
    refused; whatever is still open at the end is resolved by the exit."""

    async def main() -> None:
        lines: list[bytes] = []
        threads = ThreadRegistry(Tracker())
        registry = Interactions(lines.extend, threads)
        opened: list[Any] = []
        answers: dict[str, list[Any]] = {}
        connected = True

        async def bridge_waits(pending: Any) -> None:
            await pending.done.wait()
            answers.setdefault(pending.request_id, []).append(
                pending.result if pending.error is None else pending.error.message
            )

        def policy(pending: Any, reason: str, by: str) -> None:
            if pending.request_id in registry.open:
                registry.apply_policy(pending, reason, by)

        async with trio.open_nursery() as nursery:
            for op, n in ops:
                if op == "open":
                    method = KINDS[n % 2]
                    payload = {"kind": ("approval", "user_question")[n % 2]}
                    params = (
                        {"threadId": f"t{n % 3}", "tool": "x"}
                        if method == KINDS[1]
                        else {"threadId": f"t{n % 3}", "payload": payload}
                    )
                    pending = registry.add(method, "p", params)
                    opened.append(pending)
                    nursery.start_soon(bridge_waits, pending)
                elif opened and op == "answer" and connected:
                    target = opened[n % len(opened)]
                    try:
                        registry.resolve(target.request_id, f"client-{n}", msgspec.Raw(b'{"decision":"deny"}'))
                    except rpc.RpcError as exc:
                        assert exc.code == errors.ALREADY_RESOLVED
                elif opened and op == "timeout" and not connected:
                    policy(opened[n % len(opened)], "timeout", "daemon:timeout")
                elif op == "stop":
                    for pending in threads.waiting(f"t{n % 3}"):
                        policy(pending, "stopped", "daemon:thread-stop")
                elif op == "exit":
                    for pending in registry.of_provider("p"):
                        policy(pending, "exited", "daemon:bridge-exit")
                elif op == "disconnect":
                    connected = False  # resolves nothing
                elif op == "reconnect":
                    connected = True
                await trio.lowlevel.checkpoint()
            for pending in registry.of_provider("p"):
                policy(pending, "exited", "daemon:bridge-exit")
            await trio.testing.wait_all_tasks_blocked()
        resolved = [
            msgspec.json.decode(line)["params"]["requestId"] for line in lines if b"interaction/resolved" in line
        ]
        assert sorted(resolved) == sorted(p.request_id for p in opened)  # each exactly once
        assert all(len(answers[p.request_id]) == 1 for p in opened)
        assert registry.open == {} and not any(record.pending for record in threads.records.values())

    trio.run(main)


def test_policy_answers_are_valid_for_their_payload_kind() -> None:
    registry = Interactions(lambda lines: None, ThreadRegistry(Tracker()))

    async def main() -> None:
        approval = registry.add("interaction/request", "p", {"payload": {"kind": "approval"}})
        question = registry.add("interaction/request", "p", {"payload": {"kind": "user_question"}})
        tool = registry.add("item/tool/call", "p", {"tool": "lookup"})
        assert policy_answer(approval, "r") == (msgspec.Raw(b'{"decision":"deny"}'), None)
        result, error = policy_answer(question, "r")
        assert result is None and error is not None and error.message == "The user question was cancelled: r"
        result, error = policy_answer(tool, "r")
        assert error is None and msgspec.json.decode(result or b"") == {
            "success": False,
            "contentItems": [{"type": "inputText", "text": 'Tool "lookup" was not answered: r'}],
        }

    trio.run(main)


async def test_the_live_view_shows_the_wait_and_the_stall_warning_names_it(tmp_path: Path) -> None:
    provider = fake_provider("ask", turn_stall_timeout_s=0.3, turn_start_sweep_s=0.1)
    async with running(tmp_path, {"fake": provider}) as (_, path), connect(path, answer=hang) as owner:
        await owner.request("thread/start", START)
        await owner.request("turn/start", TURN)
        await owner.wait_for(lambda: bool(notes(owner, "interaction/opened")))
        await owner.wait_for(lambda: bool(owner.of(THREAD, "system/warning")), timeout=10)
        (warning,) = owner.of(THREAD, "system/warning")
        assert warning["code"] == "turn_waiting_on_client" and "user question" in warning["message"]
        assert warning["details"]["waitingOn"] == "client" and warning["details"]["kind"] == "user_question"
        command = [sys.executable, "-m", "bbridge", "status", "--socket", str(path)]
        shown = await trio.run_process([*command, "--json"], capture_stdout=True)
        table = await trio.run_process(command, capture_stdout=True)
    (thread,) = json.loads(shown.stdout)["threads"]
    (waiting,) = thread["waitingOn"]
    assert waiting["kind"] == "user_question" and waiting["ageS"] > 0
    assert thread["openTurn"]["turnId"].endswith("-t1") and thread["openTurn"]["ageS"] > 0
    assert thread["clients"]["owner"] == "socket-1" and thread["bridge"]["state"] == "ready"
    rows = table.stdout.decode().splitlines()
    (row,) = [line for line in rows if line.strip().startswith(THREAD)]
    assert "user question" in row and "owner socket-1" in row


async def test_the_acp_bridge_tool_call_with_nobody_connected_fails_readably(tmp_path: Path) -> None:
    """The same through a real bridge: an ACP agent calls a client tool while no client is connected; the policy
    answer reaches the agent as an MCP error result it can read, and the turn completes."""
    from tests.test_acp_tools import AGENT, SCHEMA

    script, agent_log = tmp_path / "agent.py", tmp_path / "agent.log"
    script.write_text(AGENT)
    command = [sys.executable, "-m", "bridges.acp", "--", sys.executable, str(script), str(agent_log)]
    provider = ProviderConfig(command=command, cwd=str(REPO), interaction_timeout_s=0.4)
    tool = {"name": "lookup", "description": "Look something up", "inputSchema": SCHEMA}
    async with running(tmp_path, {"acp": provider}) as (daemon, path):
        async with connect(path) as owner:
            start = {
                "providerId": "acp",
                "threadId": THREAD,
                "cwd": str(tmp_path),
                "options": FULL,
                "dynamicTools": [tool],
            }
            await owner.request("thread/start", start)
            turn = {**TURN, "providerId": "acp", "options": FULL}
            turn["input"] = [
                {"type": "text", "text": 'call mcp__bb-bridge__lookup|{"query": "weather"}', "mentions": []}
            ]
            await owner.request("turn/start", turn)
        with trio.fail_after(20):
            while not any('"toolResult"' in line for line in _lines(agent_log)):
                await trio.sleep(0.05)
    (answer,) = [json.loads(line)["toolResult"] for line in _lines(agent_log) if '"toolResult"' in line]
    assert answer["result"]["isError"] is True
    assert answer["result"]["content"][0]["text"] == 'Tool "lookup" was not answered: no client answered within 0.4s'
    assert daemon.counters.interactions_by_policy == 1


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
