"""The daemon's seams for a room above it (issue 48): hidden threads (a construction's `hidden {runId, role}`),
what a hosted tool's call knows of its caller, and client methods a room serves (`daemon/services.py`).

A hidden thread is journaled and addressable by id, told to every client (`thread/hidden`) before its bridge is
asked, never seen by the bridge as a member, and left out of `daemon/status` (unless `includeHidden`), `bbridge tail`
without `--thread` and the ACP face's `session/list`; its mark survives a restart on the journal. On the fake
bridge (`tests/fakes/fake_bridge.py`); what the bridge was sent is read from its recorded runtime lane.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from bbridge.acp_face import messages as m
from bbridge.acp_face.agent import Face
from bbridge.acp_face.index import Index, Record
from bbridge.client import Client, DaemonError
from bbridge.daemon.journal import Journal
from bbridge.daemon.runtime import Daemon
from bbridge.daemon.services import PERSPECTIVES_ADVICE
from bbridge.listen.routes import metrics
from bbridge.ops import Tail
from bbridge.wire import rpc
from bbridge.wire.perspectives import AiCompleteError, AiCompleteOk
from tests.support import FULL, connect, fake_provider, running
from tests.test_declared_tools import call_turn, completed
from tests.test_hosting_daemon import FakeHost, bridge_saw

HIDDEN = {"runId": "prun_1", "role": "worker"}


def start(thread: str, hidden: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"providerId": "fake", "threadId": thread, "cwd": "/tmp", "options": {**FULL, **options}}
    return params | ({"hidden": hidden} if hidden is not None else {})


def turn(thread: str, n: int = 1, **options: Any) -> dict[str, Any]:
    text = [{"type": "text", "text": f"turn {n}", "mentions": []}]
    creq = f"creq_abcdefghj{'mnpqrstuvw'[n % 10]}"
    return {"providerId": "fake", "threadId": thread, "input": text, "clientRequestId": creq, "options": options}


def listed(status: dict[str, Any]) -> list[str]:
    return [row["threadId"] for row in status["threads"]]


async def test_a_hidden_thread_is_told_first_never_sent_to_its_bridge_and_listed_only_when_asked(
    tmp_path: Path,
) -> None:
    record = tmp_path / "rec"
    async with running(tmp_path, {"fake": fake_provider()}, record_dir=record) as (daemon, path):
        async with Client.connect(path) as client, connect(path) as other:
            await client.request("thread/start", start("thr_seen"))
            await client.request("thread/start", start("thr_hid", HIDDEN))
            order: list[str] = []
            with trio.fail_after(10):
                async for note in client.notifications():
                    if note.raw.get("threadId") == "thr_hid":
                        order.append(note.method)
                    if "thread/events" in order:
                        break
            # told before the bridge was asked (its identity notice answers the construction), before any event
            assert order[:3] == ["thread/hidden", "thread/identity", "thread/events"]
            await other.wait_for(lambda: any(method == "thread/hidden" for method, _ in other.notes))
            told = next(params for method, params in other.notes if method == "thread/hidden")
            assert told == {"threadId": "thr_hid", "providerId": "fake", "runId": "prun_1", "role": "worker"}
            (sent,) = bridge_saw(record, "thr_hid", "thread/start")
            assert "hidden" not in sent and sent["threadId"] == "thr_hid"

            status = await other.request("daemon/status", {})
            assert listed(status) == ["thr_seen"] and status["daemon"]["hiddenThreads"] == 1
            every = await other.request("daemon/status", {"includeHidden": True})
            rows = {row["threadId"]: row for row in every["threads"]}
            assert rows["thr_hid"]["hidden"] is True and "hidden" not in rows["thr_seen"]
            assert (rows["thr_hid"]["runId"], rows["thr_hid"]["role"]) == ("prun_1", "worker")
            assert [t["threadId"] for t in (await client.status(include_hidden=True)).threads] == [
                "thr_hid",
                "thr_seen",
            ]

            await other.request("turn/start", turn("thr_hid"))  # addressable by id: its provider is known
            await other.wait_for(lambda: other.settled("thr_hid"))
            events = await other.request("thread/events", {"threadId": "thr_hid"})
            assert [e["event"]["type"] for e in events["events"]][-1] == "turn/completed"
            assert listed(await other.request("daemon/status", {})) == ["thr_seen"]  # its events list it nowhere
            assert daemon.status()["daemon"]["hiddenThreads"] == 1


@pytest.mark.parametrize(
    ("method", "params", "phrase"),
    [
        ("thread/start", start("thr_x", {"runId": "prun_1", "role": "boss"}), "$.hidden.role"),
        ("thread/start", start("thr_x", {"runId": ""}), "$.hidden"),
        ("turn/start", {**turn("thr_x"), "hidden": HIDDEN}, "hidden marks a thread at its construction"),
    ],
)
async def test_a_malformed_or_misplaced_mark_is_refused_naming_it(
    tmp_path: Path, method: str, params: dict[str, Any], phrase: str
) -> None:
    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path), connect(path) as client:
        with pytest.raises(rpc.RpcError) as refused:
            await client.request(method, params)
        assert refused.value.code == rpc.INVALID_PARAMS and phrase in refused.value.message
        assert "fake" not in daemon.supervisor.bridges  # refused before any bridge was started


async def test_the_mark_survives_a_restart_on_the_journal(tmp_path: Path) -> None:
    folder = tmp_path / "journal"
    async with (
        running(tmp_path, {"fake": fake_provider()}, journal=Journal(directory=folder)) as (_, path),
        connect(path) as client,
    ):
        await client.request("thread/start", start("thr_seen"))
        await client.request("thread/start", start("thr_hid", {"runId": "prun_9", "role": "synthesis"}))
        await client.request("thread/stop", {"providerId": "fake", "threadId": "thr_hid", "intent": "release"})
        await client.wait_for(lambda: bool(client.entries["thr_hid"]))
    assert (folder / "thr_hid.hidden.ndjson").exists()
    async with (
        running(tmp_path, {"fake": fake_provider()}, journal=Journal(directory=folder)) as (daemon, path),
        connect(path) as client,
    ):
        assert listed(await client.request("daemon/status", {})) == ["thr_seen"]
        every = await client.request("daemon/status", {"includeHidden": True})
        (row,) = [row for row in every["threads"] if row["threadId"] == "thr_hid"]
        assert (row["hidden"], row["runId"], row["role"]) == (True, "prun_9", "synthesis")
        assert every["daemon"]["hiddenThreads"] == 1
        assert (await client.request("thread/events", {"threadId": "thr_hid"}))["events"]  # its journal stays


async def test_tail_of_every_thread_leaves_hidden_ones_out_and_follows_one_by_id(tmp_path: Path) -> None:
    async with (
        running(tmp_path, {"fake": fake_provider()}) as (daemon, path),
        connect(path) as driver,
        Client.connect(path) as first,
        Client.connect(path) as second,
    ):
        await driver.request("thread/start", start("thr_before", HIDDEN))  # known to the tail from daemon/status
        every, one = io.StringIO(), io.StringIO()
        tails = [
            (Tail(every, as_json=True, thread_id=None), first),
            (Tail(one, as_json=True, thread_id="thr_after"), second),
        ]
        async with trio.open_nursery() as nursery:
            for tail, client in tails:
                nursery.start_soon(tail.follow, client, 0)
            with trio.fail_after(10):
                while not all(tail.hidden or tail.only for tail, _ in tails) or len(daemon.fanout.clients) < 3:
                    await trio.sleep(0.01)
            await driver.request("thread/start", start("thr_after", HIDDEN))  # learnt from thread/hidden
            await driver.request("thread/start", start("thr_seen"))
            for n, thread in enumerate(("thr_before", "thr_after", "thr_seen"), 1):
                await driver.request("turn/start", turn(thread, n))
                await driver.wait_for(lambda thread=thread: driver.settled(thread))  # type: ignore[misc]
            with trio.fail_after(10):
                while '"turn/completed"' not in every.getvalue() or '"turn/completed"' not in one.getvalue():
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    shown = {json.loads(line)["threadId"] for line in every.getvalue().splitlines()}
    assert shown == {"thr_seen"}
    assert {json.loads(line)["threadId"] for line in one.getvalue().splitlines()} == {"thr_after"}


async def test_the_acp_faces_session_list_leaves_a_hidden_thread_out(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider()}) as (_, path), Client.connect(path) as client:
        await client.request("thread/start", start("thr_seen"))
        await client.request("thread/start", start("thr_hid", HIDDEN))
        index = Index(None)
        for thread in ("thr_seen", "thr_hid"):  # even a record naming a hidden thread (a shared sessions file)
            index.put(Record(sessionId=thread, cwd="/tmp", providerId="fake"))
        editor, _ = trio.testing.memory_stream_pair()
        face = Face(client, editor, editor, index)
        listing = await face._list(m.ListSessionsParams())
    assert [session["sessionId"] for session in listing["sessions"]] == ["thr_seen"]


async def test_a_hosted_call_knows_its_callers_options_and_whether_it_is_hidden(tmp_path: Path) -> None:
    host = FakeHost()
    async with (
        running(tmp_path, {"fake": fake_provider("tool")}, tool_host=host) as (daemon, path),
        connect(path) as client,
    ):
        tools = {"exclude": ["sleep"]}
        await client.request("thread/start", start("thr_hid", HIDDEN, model="m-1", tools=tools))
        await client.request("thread/start", start("thr_seen"))
        clock = {"tool": "clock", "arguments": {}}
        await client.request("turn/start", call_turn(clock, 1, "thr_hid"))  # a turn without options
        await client.wait_for(lambda: completed(client, "thr_hid", 1))
        await client.request("turn/start", {**call_turn(clock, 2, "thr_hid"), "options": {**FULL, "model": "m-2"}})
        await client.wait_for(lambda: completed(client, "thr_hid", 2))
        await client.request("turn/start", call_turn(clock, 3, "thr_seen"))
        await client.wait_for(lambda: completed(client, "thr_seen", 1))
    first, second, seen = host.calls
    assert (first.thread_id, first.hidden, first.options) == ("thr_hid", True, {**FULL, "model": "m-1"})
    assert second.options == {**FULL, "model": "m-2"}  # the latest turn's, as its client sent them
    assert (seen.thread_id, seen.hidden, seen.options) == ("thr_seen", False, FULL)
    assert daemon.registry.records["thr_hid"].options == {**FULL, "model": "m-2"}


class Room:
    """A `Service` such as a Perspectives room: `ai/complete` answers its prompt back (or fails it), and
    `perspectives/runs` one run; its report counts runs."""

    name = "perspectives"
    methods = frozenset({"ai/complete", "perspectives/runs"})

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        self.asked.append((method, params))
        if method == "perspectives/runs":
            if params.get("threadId") == "thr_none":
                raise rpc.RpcError(rpc.INVALID_PARAMS, "no such thread")
            return {"runs": [RUN]}
        if params["prompt"] == "fail":
            return {"ok": False, "code": "timeout", "message": "no answer within 1000 ms"}
        return {"ok": True, "model": params.get("model", "m-default"), "value": {"echo": params["prompt"]}}

    def report(self) -> dict[str, Any]:
        return {"runs": {"running": 1, "delivered": 2, "failed": 1, "undelivered": 0}}


RUN = {
    "runId": "prun_1",
    "threadId": "thr_caller",
    "tool": "gather_perspectives",
    "lenses": ["big-O complexity", "duplicate work"],
    "phase": "panel",
    "startedAt": 1.5,
    "members": [
        {"role": "planner", "providerId": "fake", "model": "m", "threadId": "thr_p", "status": "completed"},
        {"role": "worker", "providerId": "fake", "model": "m", "threadId": "thr_w", "lens": "duplicate work",
         "status": "running", "seconds": 2.0},
    ],
}  # fmt: skip


async def test_a_rooms_methods_are_routed_to_it_and_its_report_is_in_status_and_metrics(tmp_path: Path) -> None:
    room = Room()
    async with running(tmp_path, {"fake": fake_provider()}, services=[room]) as (daemon, path):
        async with Client.connect(path) as client:
            answer = await client.ai_complete("hello", {"type": "object"}, 5000, model="m-1")
            assert answer == AiCompleteOk(ok=True, model="m-1", value={"echo": "hello"})
            failed = await client.ai_complete("fail", {"type": "object"}, 1000)
            assert failed == AiCompleteError(ok=False, code="timeout", message="no answer within 1000 ms")
            runs = await client.perspectives_runs("thr_caller")
            assert runs.runs[0].members[1].lens == "duplicate work" and runs.runs[0].phase == "panel"
            with pytest.raises(DaemonError) as refused:
                await client.perspectives_runs("thr_none")
            assert refused.value.code == rpc.INVALID_PARAMS and "no such thread" in str(refused.value)
            asked = len(room.asked)
            with pytest.raises(DaemonError) as malformed:  # checked against its wire type before the room is asked
                await client.ai_complete("hello", {"type": "object"}, 10)
            assert malformed.value.code == rpc.INVALID_PARAMS and "$.timeoutMs" in str(malformed.value)
            assert len(room.asked) == asked
            status = await client.request("daemon/status")
        assert room.asked[0] == ("ai/complete", {"prompt": "hello", "outputSchema": {"type": "object"},
                                                 "timeoutMs": 5000, "model": "m-1"})  # fmt: skip
        assert room.asked[2] == ("perspectives/runs", {"threadId": "thr_caller"})
        assert status["perspectives"] == room.report()
        text = metrics(daemon).decode()
    assert 'bbridge_perspectives_runs_total{outcome="delivered"} 2.0' in text
    assert 'bbridge_perspectives_runs_total{outcome="failed"} 1.0' in text
    assert "bbridge_perspectives_runs_running 1.0" in text
    assert "bbridge_hidden_threads 0.0" in text


async def test_without_a_room_its_methods_say_what_to_configure(tmp_path: Path) -> None:
    async with running(tmp_path, {"fake": fake_provider()}) as (daemon, path), connect(path) as client:
        for method in ("ai/complete", "perspectives/runs"):
            with pytest.raises(rpc.RpcError) as refused:
                await client.request(method, {})
            assert refused.value.code == rpc.METHOD_NOT_FOUND
            assert refused.value.message == f"{method} is served by no room on this daemon: {PERSPECTIVES_ADVICE}"
        with pytest.raises(rpc.RpcError) as unknown:
            await client.request("perspectives/nope", {})
        assert unknown.value.message == "Method not found: perspectives/nope"
        assert "perspectives" not in await client.request("daemon/status")
        assert "bbridge_perspectives_runs" not in metrics(daemon).decode()


class Taker(Room):
    def __init__(self, name: str, methods: frozenset[str]) -> None:
        super().__init__()
        self.name, self.methods = name, methods  # type: ignore[misc]


@pytest.mark.parametrize(
    ("services", "phrase"),
    [
        ([Taker("x", frozenset({"daemon/status"}))], "daemon/status is served already"),
        ([Taker("x", frozenset({"turn/start"}))], "turn/start is served already"),
        ([Room(), Taker("y", frozenset({"ai/complete"}))], "ai/complete is served already"),
        ([Taker("threads", frozenset())], "its daemon/status section is taken"),
    ],
)
def test_a_service_that_takes_a_daemon_method_or_section_is_refused(services: list[Room], phrase: str) -> None:
    with pytest.raises(ValueError, match=phrase):
        Daemon({}, services=services)
